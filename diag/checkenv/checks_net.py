"""Rendezvous checks: socket interfaces, MASTER_ADDR and MASTER_PORT, the hostname.

These are the mistakes that otherwise surface as a 30-minute timeout: a named interface
that does not exist, a master address that is a netmask, a hostname that resolves to
loopback so gloo tells its peers to connect to 127.0.0.1.
"""

from __future__ import annotations

from diag import fixes
from diag.checkenv.facts import Iface, RankFacts, is_loopback
from diag.checkenv.types import CheckResult, fail, ok, skip
from diag.verdict import Category


def nnodes(env: dict[str, str]) -> int | None:
    """Nodes in the job, as the launcher states it (torchrun, Slurm) or as implied."""
    for key in ("GROUP_WORLD_SIZE", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if env.get(key, "").isdigit():
            return int(env[key])
    world, local = env.get("WORLD_SIZE", ""), env.get("LOCAL_WORLD_SIZE", "")
    if world.isdigit() and local.isdigit() and int(local) > 0:
        return -(-int(world) // int(local))
    return None


def is_multi_node(facts: RankFacts) -> bool:
    return (nnodes(facts.env) or 1) > 1


def one_node_note(facts: RankFacts, ifaces: tuple[Iface, ...]) -> str:
    """Why loopback alone passes, when the launcher says the job has one node: every peer
    is on this host. Not a pass for a named interface that is missing, nor for no usable
    interface at all: NCCL's bootstrap and gloo fail on those on one node too ("Bootstrap :
    no socket interface found" with NCCL_SOCKET_IFNAME=eth0 on a host without eth0)."""
    if ifaces and all(i.loopback for i in ifaces) and nnodes(facts.env) == 1:
        return " (loopback: enough on a single-node job, every peer is on this host)"
    return ""


def iface_list(ifaces: tuple[Iface, ...]) -> str:
    return ", ".join(sorted(i.name for i in ifaces)) or "none"


def usable(iface: Iface) -> bool:
    return iface.up and bool(iface.addrs)


def _state(iface: Iface) -> str:
    return "is down (no carrier or not set up)" if not iface.up else "has no IP address"


# --- interface selection, as NCCL and gloo do it ------------------------------------

def nccl_matches(spec: str, ifaces: tuple[Iface, ...]) -> tuple[Iface, ...]:
    """NCCL_SOCKET_IFNAME semantics: ``^a,b`` excludes prefixes, ``=eth0`` is exact,
    plain entries are prefixes."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    names = [n.strip() for n in (body[1:] if exact else body).split(",") if n.strip()]

    def hit(i: Iface) -> bool:
        return any(i.name == n if exact else i.name.startswith(n) for n in names)
    return tuple(i for i in ifaces if hit(i) != exclude)


def nccl_default(ifaces: tuple[Iface, ...]) -> tuple[Iface, ...]:
    """NCCL's choice when NCCL_SOCKET_IFNAME is unset: ib*, else anything but docker,
    lo and virbr, else docker*, else lo."""
    for spec in ("ib", "^docker,lo,virbr", "docker", "lo"):
        found = tuple(i for i in nccl_matches(spec, ifaces) if usable(i))
        if found:
            return found
    return ()


def local_iface(facts: RankFacts, ip: str) -> Iface | None:
    """The interface an address binds on; any 127/8 address binds on loopback."""
    found = facts.iface_of_ip(ip)
    if found or not is_loopback(ip):
        return found
    return next((i for i in facts.interfaces if i.loopback), None)


def gloo_default(facts: RankFacts) -> tuple[str | None, Iface | None]:
    """What gloo binds without GLOO_SOCKET_IFNAME: the first address the hostname resolves
    to that binds here; else it falls back to loopback (torch warns "Unable to resolve
    hostname to a (local) address")."""
    res = facts.hostname_addrs
    for ip in (res.addrs if res else ()):
        iface = local_iface(facts, ip)
        if iface:
            return ip, iface
    return "127.0.0.1", next((i for i in facts.interfaces if i.loopback), None)


def gloo_ifnames(facts: RankFacts) -> tuple[str, ...]:
    """The interface(s) gloo will use on this rank."""
    named = facts.env.get("GLOO_SOCKET_IFNAME", "").strip()
    if named:
        return tuple(n.strip() for n in named.split(",") if n.strip())
    iface = gloo_default(facts)[1]
    return (iface.name,) if iface else ()


# --- GLOO_SOCKET_IFNAME -----------------------------------------------------------

def check_gloo_ifname(facts: RankFacts) -> list[CheckResult]:
    value = facts.env.get("GLOO_SOCKET_IFNAME", "").strip()
    if not value:
        return [_gloo_by_hostname(facts)]
    problems = [p for name in value.split(",") if name.strip()
                for p in [_gloo_iface_problem(facts, name.strip(), value)] if p]
    if problems:
        return problems
    named = tuple(facts.iface(n.strip()) for n in value.split(",") if n.strip())
    addrs = ", ".join(a for i in named for a in i.ips)
    return [ok("net.gloo_ifname", f"GLOO_SOCKET_IFNAME={value}: up, {addrs}"
               f"{one_node_note(facts, named)}", env_var="GLOO_SOCKET_IFNAME",
               category=Category.WRONG_INTERFACE)]


def _gloo_iface_problem(facts: RankFacts, name: str, value: str) -> CheckResult | None:
    iface, var = facts.iface(name), "GLOO_SOCKET_IFNAME"
    names = iface_list(facts.interfaces)
    ifaces = f"(interfaces: {names})"
    if iface is None:
        return fail("net.gloo_ifname", f"{var}={value}: no such interface {name} {ifaces}",
                    fixes.GLOO_IFNAME_MISSING, env_var=var, category=Category.WRONG_INTERFACE)
    if not usable(iface):
        return fail("net.gloo_ifname", f"{var}={value}: {name} {_state(iface)} {ifaces}",
                    f"bring {name} up with an address, or point {var} at one that is",
                    env_var=var, category=Category.WRONG_INTERFACE)
    if iface.loopback and is_multi_node(facts):
        return fail("net.gloo_ifname", f"{var}={value}: {name} is loopback on a multi-node "
                    "job; peers on other nodes cannot reach 127.0.0.1",
                    fixes.loopback_iface(var, names), env_var=var,
                    category=Category.WRONG_INTERFACE)
    return None


def _gloo_by_hostname(facts: RankFacts) -> CheckResult:
    ip, iface = gloo_default(facts)
    via = f"gloo binds {ip} ({iface.name if iface else '?'}) found via hostname {facts.hostname}"
    if is_loopback(ip or "") and is_multi_node(facts):
        return fail("net.gloo_ifname", f"GLOO_SOCKET_IFNAME unset: {via}, a loopback address; "
                    "peers on other nodes will be told to connect to it and hang",
                    fixes.hostname_loopback(facts.hostname, iface_list(facts.interfaces)),
                    env_var="GLOO_SOCKET_IFNAME", category=Category.WRONG_INTERFACE)
    note = one_node_note(facts, (iface,) if iface else ())
    return ok("net.gloo_ifname", f"GLOO_SOCKET_IFNAME unset: {via}{note}",
              env_var="GLOO_SOCKET_IFNAME", category=Category.WRONG_INTERFACE)


# --- NCCL_SOCKET_IFNAME -----------------------------------------------------------

def check_nccl_ifname(facts: RankFacts) -> list[CheckResult]:
    value = facts.env.get("NCCL_SOCKET_IFNAME", "").strip()
    var, ifaces = "NCCL_SOCKET_IFNAME", f"(interfaces: {iface_list(facts.interfaces)})"
    if not value and not facts.gpu_uuids:
        return [skip("net.nccl_ifname", "no GPUs visible: NCCL is not used on this rank",
                     env_var=var, category=Category.WRONG_INTERFACE)]
    chosen = nccl_matches(value, facts.interfaces) if value else nccl_default(facts.interfaces)
    shown = f"{var}={value}" if value else f"{var} unset"
    if value and not chosen:
        return [fail("net.nccl_ifname", f"{shown}: matches no interface {ifaces}",
                     fixes.NCCL_IFNAME_NO_MATCH, env_var=var, category=Category.WRONG_INTERFACE)]
    up = tuple(i for i in chosen if usable(i))
    if not up:
        return [fail("net.nccl_ifname", f"{shown}: no usable interface (matched: "
                     f"{iface_list(chosen) if chosen else 'none'}) {ifaces}",
                     "give the node (or container: --net=host) an interface that is up "
                     f"with an IP address, and name it in {var}", env_var=var,
                     category=Category.WRONG_INTERFACE)]
    if all(i.loopback for i in up) and is_multi_node(facts):
        return [fail("net.nccl_ifname", f"{shown}: NCCL would use loopback only on a "
                     f"multi-node job {ifaces}", fixes.loopback_iface(var), env_var=var,
                     category=Category.WRONG_INTERFACE)]
    return [ok("net.nccl_ifname", f"{shown}: NCCL uses {iface_list(up)}"
               f"{one_node_note(facts, up)}", env_var=var, category=Category.WRONG_INTERFACE)]


CHECKS = (check_gloo_ifname, check_nccl_ifname)
