"""Rendezvous checks: MASTER_ADDR is a reachable host, MASTER_PORT answers, and the
hostname resolves to an address peers can use."""

from __future__ import annotations

import ipaddress

from diag import fixes
from diag.checkenv.checks_net import gloo_ifnames, is_multi_node
from diag.checkenv.facts import RankFacts, is_loopback
from diag.checkenv.types import CheckResult, fail, ok, skip, warn
from diag.verdict import Category

VAR = "MASTER_ADDR"


def bad_address(ip: str, facts: RankFacts) -> str | None:
    """Why ``ip`` cannot be a master's address, or None."""
    try:
        addr = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return None
    if addr.is_unspecified:
        return "is the wildcard address (0.0.0.0 / ::), not a host"
    if addr.version == 4 and int(addr) == 2**32 - 1:
        return "is the broadcast address, not a host"
    if addr.version == 4 and int(addr) >> 24 == 255:
        # 255.x.x.x is never a host; contiguous ones (255.255.0.0) are a netmask.
        return ("is a netmask, not a host address" if "01" not in bin(int(addr))
                else "is in 255.0.0.0/8, never a host address")
    if addr.is_multicast:
        return "is a multicast address, not a host"
    for iface in facts.interfaces:
        for cidr in iface.addrs:
            net = ipaddress.ip_interface(cidr).network
            if net.version == addr.version and net.prefixlen < 31 and addr == net.broadcast_address:
                return f"is the broadcast address of {iface.name} ({net}), not a host"
    return None


def check_master_addr(facts: RankFacts) -> list[CheckResult]:
    value = facts.env.get(VAR, "").strip()
    if not value:
        return [skip("net.master_addr", "MASTER_ADDR unset (torchrun sets it for its ranks; "
                     "init_method='env://' needs it)", env_var=VAR)]
    why = bad_address(value, facts)
    if why:
        return [fail("net.master_addr", f"MASTER_ADDR={value} {why}", fixes.MASTER_ADDR_HOST,
                     env_var=VAR)]
    res = facts.master
    if res is None or res.error or not res.addrs:
        err = res.error if res else "not looked up"
        return [fail("net.master_addr", f"MASTER_ADDR={value} does not resolve: {err}",
                     fixes.MASTER_ADDR_RESOLVE, env_var=VAR)]
    return [_master_resolved(facts, value, res.addrs)]


def _master_resolved(facts: RankFacts, value: str, addrs: tuple[str, ...]) -> CheckResult:
    bad = [f"{a} {w}" for a in addrs for w in [bad_address(a, facts)] if w]
    if bad:
        return fail("net.master_addr", f"MASTER_ADDR={value} resolves to {bad[0]}",
                    fixes.MASTER_ADDR_RESOLVE, env_var=VAR)
    if all(is_loopback(a) for a in addrs) and is_multi_node(facts):
        return fail("net.master_addr", f"MASTER_ADDR={value} resolves to loopback "
                    f"({', '.join(addrs)}) on a multi-node job: other nodes connect to "
                    "themselves", f"{fixes.MASTER_ADDR_HOST}; check /etc/hosts for a "
                    "127.0.x.1 line naming it", env_var=VAR)
    return ok("net.master_addr", f"MASTER_ADDR={value} resolves to {', '.join(addrs)}",
              env_var=VAR)


def check_master_route(facts: RankFacts) -> list[CheckResult]:
    route = facts.master_route
    if route is None:
        return [skip("net.master_route", "no MASTER_ADDR address to route to", env_var=VAR)]
    if route.error:
        return [fail("net.master_route", f"no route to MASTER_ADDR {route.dst}: {route.error}",
                     "add a route to the master's network, or use an address of rank 0 on "
                     "a network this node is on", env_var=VAR,
                     category=Category.NETWORK_UNREACHABLE)]
    if route.local:
        return [ok("net.master_route", f"MASTER_ADDR {route.dst} is this node", env_var=VAR)]
    # A named interface that does not exist is net.gloo_ifname's finding, not this one's.
    gloo = [n for n in gloo_ifnames(facts) if facts.iface(n)]
    if gloo and route.dev not in gloo:
        return [warn("net.master_route", f"traffic to MASTER_ADDR {route.dst} leaves by "
                     f"{route.dev} but gloo binds {', '.join(gloo)}",
                     f"use a MASTER_ADDR on the network of {', '.join(gloo)}, or set "
                     f"GLOO_SOCKET_IFNAME={route.dev} on every node", env_var=VAR,
                     category=Category.WRONG_INTERFACE)]
    return [ok("net.master_route", f"MASTER_ADDR {route.dst} is reached by {route.dev} "
               f"(from {route.src})", env_var=VAR)]


def check_master_port(facts: RankFacts) -> list[CheckResult]:
    probe, var = facts.master_port, "MASTER_PORT"
    if probe is None:
        return [skip("net.master_port", "MASTER_ADDR or MASTER_PORT unset: nothing to "
                     "connect to", env_var=var)]
    where = f"{probe.addr}:{probe.port}"
    expected = facts.env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if probe.outcome == "open":
        return [ok("net.master_port", f"TCP connect to {where} succeeded", env_var=var)]
    if probe.outcome == "refused" and not expected:
        return [ok("net.master_port", f"{where}: host reachable, nothing listens yet (the "
                   "store starts with rank 0's init_process_group)", env_var=var)]
    return [_port_failure(probe.outcome, where, probe.error, probe.seconds)]


def _port_failure(outcome: str, where: str, error: str | None, seconds: float) -> CheckResult:
    var = "MASTER_PORT"
    if outcome == "refused":
        return fail("net.master_port", f"{where}: connection refused though torchrun's "
                    "store should be listening there", fixes.STORE_NOT_LISTENING, env_var=var,
                    category=Category.NETWORK_UNREACHABLE)
    if outcome == "timeout":
        return fail("net.master_port", f"{where}: TCP connect timed out after {seconds:.1f} s: "
                    "packets are dropped", "check the interface is up, a firewall allows the "
                    "port, and MASTER_ADDR is rank 0's address", env_var=var,
                    category=Category.NETWORK_UNREACHABLE)
    if outcome == "unreachable":
        return fail("net.master_port", f"{where}: {error or 'no route to host'}", "a host "
                    "that answers other traffic but not this port usually has a firewall "
                    f"REJECT rule: {fixes.FIREWALL}", env_var=var,
                    category=Category.NETWORK_UNREACHABLE)
    return warn("net.master_port", f"{where}: connect failed: {error}",
                "check MASTER_ADDR and MASTER_PORT", env_var=var,
                category=Category.NETWORK_UNREACHABLE)


def check_hostname(facts: RankFacts) -> list[CheckResult]:
    res, name = facts.hostname_addrs, facts.hostname
    multi = is_multi_node(facts)
    status = fail if multi else warn
    if res is None or res.error or not res.addrs:
        err = res.error if res else "not looked up"
        return [status("net.hostname", f"hostname {name} does not resolve: {err} (c10d logs "
                       "'The hostname of the client socket cannot be retrieved. err=-3')",
                       fixes.hostname_unresolved(name))]
    if all(is_loopback(a) for a in res.addrs) and multi:
        return [warn("net.hostname", f"hostname {name} resolves to loopback only "
                     f"({', '.join(res.addrs)})", fixes.hostname_loopback(name))]
    return [ok("net.hostname", f"hostname {name} resolves to {', '.join(res.addrs)}")]


CHECKS = (check_master_addr, check_master_route, check_master_port, check_hostname)
