"""This node's interfaces and its route to an address, as the kernel reports them.

Not from ``ip``: slim containers often lack iproute2, and reading its output failed
healthy hosts ("no usable interface") while NCCL, which asks the kernel as we do here,
used eth0 (issue 31). Nothing here raises: what the kernel would not say is left out.
"""

from __future__ import annotations

import ipaddress
import socket

import psutil

from diag.checkenv.facts import Iface, Route, is_loopback

# connect() on a UDP socket only looks the route up and binds a source address; it sends
# nothing, so the port is never reached.
ROUTE_PROBE_PORT = 9


def interfaces() -> tuple[Iface, ...]:
    """Every interface, in the kernel's index order (the order ``ip addr`` lists them)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
        addrs, stats = addresses(), psutil.net_if_stats()
    except OSError:
        return ()
    return tuple(_iface(name, addrs.get(name, ()), stats.get(name)) for name in names)


def _iface(name: str, addrs: tuple[str, ...], stats: psutil._common.snicstats | None) -> Iface:
    flags = set(stats.flags.split(",")) if stats else set()
    # "running" is IFF_RUNNING: up and operationally up (carrier, not dormant), which is
    # what ``ip`` shows as UP and LOWER_UP on an interface that can carry traffic.
    return Iface(name, up={"up", "running"} <= flags, addrs=addrs,
                 mtu=stats.mtu if stats else 0, loopback="loopback" in flags)


def addresses() -> dict[str, tuple[str, ...]]:
    """IPv4 and IPv6 addresses per interface as CIDR strings, IPv4 first like ``ip``."""
    found: dict[str, list[str]] = {}
    for label, snics in psutil.net_if_addrs().items():
        # An IPv4 alias label (eth0:1) is eth0's address; ':' is never in a device name.
        cidrs = found.setdefault(label.split(":")[0], [])
        cidrs += [cidr(a.address, a.netmask) for a in snics
                  if a.family in (socket.AF_INET, socket.AF_INET6) and a.address]
    return {name: tuple(sorted(cidrs, key=lambda c: ":" in c)) for name, cidrs in found.items()}


def cidr(address: str, netmask: str | None) -> str:
    """``fe80::1%eth0`` and ``ffff:ffff:ffff:ffff::`` -> ``fe80::1/64``; no netmask (a
    point-to-point peer) is a host prefix, as ``ip`` prints it."""
    ip = address.split("%")[0]  # the scope of a link-local address is its own interface
    bits = ipaddress.ip_address(ip).max_prefixlen
    if netmask:
        bits = bin(int(ipaddress.ip_address(netmask.split("%")[0]))).count("1")
    return f"{ip}/{bits}"


def route(dst: str, ifaces: tuple[Iface, ...]) -> Route:
    """The kernel's route to ``dst`` (an address, or a name it resolves): the source
    address it picks and the interface that holds it; a destination of this node goes by
    loopback, as ``ip route get`` says."""
    try:
        # getaddrinfo, not a bare tuple: it gives fe80::1%eth0 its scope id
        family, _, _, _, peer_addr = socket.getaddrinfo(
            dst, ROUTE_PROBE_PORT, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(peer_addr)
            src, peer = (sock.getsockname()[0].split("%")[0],
                         sock.getpeername()[0].split("%")[0])
    except OSError as exc:  # Network is unreachable: no route, no default route
        return Route(dst, error=exc.strerror or str(exc))
    local = is_loopback(peer) or any(peer in i.ips for i in ifaces)
    owner = (lambda i: i.loopback) if local else (lambda i: src in i.ips)
    dev = next((i.name for i in ifaces if owner(i)), None)
    return Route(dst, dev=dev, src=src, local=local)
