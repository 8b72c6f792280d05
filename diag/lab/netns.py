"""The lab's network: bridges, one namespace per node, veth pairs, tbf shaping, faults.

Each node gets two links. ``eth0`` sits on the *fabric* bridge: jobs use it, its address is
the node's hostname, ``--slow-link`` shapes it and ``--broken-iface`` takes it down. ``mgmt0``
sits on the *management* bridge, where the host (slurmctld, srun) lives, so Slurm keeps
working whatever is done to the fabric -- as on a real cluster with a separate admin net.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import time
from pathlib import Path

from diag.lab.spec import FABRIC_IFNAME, MGMT_IFNAME, Layout, LabError, Node, owns_link

NETNS_DIR = Path("/run/netns")
TBF_LATENCY = "50ms"
TBF_MIN_BURST = 64 * 1024


def run(argv: list[str], timeout: float = 20) -> str:
    """Run one ip/tc command; a failure names the command and what it printed."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise LabError(f"{' '.join(argv)}: {err}") from None
    if done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def ip(*args: str, netns: str | None = None) -> str:
    return run(["ip", *(["-n", netns] if netns else []), *args])


def used_ipv4_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host's root namespace has an address or a route in."""
    nets = []
    for entry in json.loads(ip("-j", "-4", "addr", "show") or "[]"):
        for info in entry.get("addr_info", []):
            nets.append(ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False))
    for route in json.loads(ip("-j", "-4", "route", "show", "table", "all") or "[]"):
        dst = route.get("dst", "default")
        if dst != "default":
            nets.append(ipaddress.IPv4Network(dst, strict=False))
    return nets


def link_names() -> list[str]:
    return [entry["ifname"] for entry in json.loads(ip("-j", "link", "show") or "[]")]


def netns_names() -> list[str]:
    # `ip netns list` prints "NAME (id: N)" for namespaces that have an id.
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def lab_links(prefix: str) -> list[str]:
    return [name for name in link_names() if owns_link(prefix, name)]


def lab_netns(prefix: str) -> list[str]:
    return [name for name in netns_names() if owns_link(prefix, name)]


def netns_inode(name: str) -> int | None:
    """The namespace's inode: how processes living in it are recognised in /proc."""
    try:
        return (NETNS_DIR / name).stat().st_ino
    except OSError:
        return None


def create_bridge(name: str, addr: str | None = None) -> None:
    ip("link", "add", name, "type", "bridge")
    if addr:
        ip("addr", "add", addr, "dev", name)
    ip("link", "set", name, "up")


def create_node(layout: Layout, node: Node) -> None:
    """The node's namespace, its fabric (eth0) and management (mgmt0) links, all up."""
    ip("netns", "add", node.netns)
    attach(node, node.veth, FABRIC_IFNAME, layout.fabric_bridge,
           f"{node.addr}/{layout.fabric_subnet.prefixlen}")
    attach(node, node.mgmt_veth, MGMT_IFNAME, layout.mgmt_bridge,
           f"{node.mgmt_addr}/{layout.mgmt_subnet.prefixlen}")
    ip("link", "set", "lo", "up", netns=node.netns)


def attach(node: Node, host_end: str, ns_end: str, bridge: str, cidr: str) -> None:
    """A veth pair from ``bridge`` into the node, named ``ns_end`` inside it."""
    ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end, "netns", node.netns)
    ip("link", "set", host_end, "master", bridge, "up")
    ip("addr", "add", cidr, "dev", ns_end, netns=node.netns)
    ip("link", "set", ns_end, "up", netns=node.netns)


def tbf_burst(bits_per_s: int) -> int:
    """Bytes: at least one max-size GSO packet, and ~4 ms of traffic at the rate."""
    return max(TBF_MIN_BURST, bits_per_s // 8 // 250)


def shape(node: Node) -> None:
    """Throttle the node both ways: egress of the host-side veth is traffic *to* the node,
    egress of eth0 inside the namespace is traffic *from* it (tbf shapes egress only)."""
    link = node.slow_link
    if link is None:
        return
    tbf = ["root", "tbf", "rate", link.rate, "burst", str(tbf_burst(link.bits_per_s)),
           "latency", TBF_LATENCY]
    run(["tc", "qdisc", "replace", "dev", node.veth, *tbf])
    run(["tc", "-n", node.netns, "qdisc", "replace", "dev", FABRIC_IFNAME, *tbf])


def unshape(node: Node) -> None:
    """Lift a throttle: back to the default qdisc on both ends."""
    for argv in (["tc", "qdisc", "del", "dev", node.veth, "root"],
                 ["tc", "-n", node.netns, "qdisc", "del", "dev", FABRIC_IFNAME, "root"]):
        try:
            run(argv)
        except LabError as err:  # nothing to delete is fine; anything else is not
            if "No such file" not in str(err) and "Cannot delete qdisc" not in str(err):
                raise


def drop_port(node: Node, port: int, drop: bool = True) -> None:
    """Drop (or stop dropping) inbound TCP to ``port`` on the node's eth0, as a host
    firewall's DROP rule does: peers' connects time out, while the node still reaches
    itself over lo. The rule lives in the node's namespace and goes with it."""
    if shutil.which("iptables") is None:
        raise LabError("iptables not found: install it (apt-get install iptables) to "
                       "block ports in the lab")
    rule = ["INPUT", "-i", FABRIC_IFNAME, "-p", "tcp", "--dport", str(port), "-j", "DROP"]
    ns = ["ip", "netns", "exec", node.netns, "iptables"]
    present = subprocess.run([*ns, "-C", *rule], capture_output=True).returncode == 0
    if drop and not present:
        run([*ns, "-A", *rule])
    elif not drop and present:
        run([*ns, "-D", *rule])


def break_iface(node: Node) -> None:
    """Take eth0 down inside the node: no carrier, so fabric traffic to and from the node
    is silently dropped (connects time out). The address stays; mgmt0 and Slurm work."""
    if node.broken_iface:
        ip("link", "set", FABRIC_IFNAME, "down", netns=node.netns)


def build(layout: Layout) -> None:
    create_bridge(layout.fabric_bridge)
    create_bridge(layout.mgmt_bridge, f"{layout.host_mgmt_addr}/{layout.mgmt_subnet.prefixlen}")
    for node in layout.nodes:
        create_node(layout, node)
        shape(node)


def remove(prefix: str, wait_s: float = 5.0) -> tuple[list[str], list[str]]:
    """Delete the lab's namespaces and links (found by prefix); return what was there."""
    netns, links = lab_netns(prefix), lab_links(prefix)
    for name in netns:
        run(["ip", "netns", "delete", name])
    # veths die with their namespace, but asynchronously: delete what is still listed.
    for name in sorted(lab_links(prefix), key=lambda n: n.endswith(("-br", "-mg"))):
        subprocess.run(["ip", "link", "delete", name], capture_output=True, timeout=20)
    deadline = time.monotonic() + wait_s
    while (lab_links(prefix) or lab_netns(prefix)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return netns, links
