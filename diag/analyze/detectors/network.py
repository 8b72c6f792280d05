"""Network faults: peers that cannot reach each other, and links slower than their peers.

``detect_text`` reads text logs: connections that fail, NCCL or Gloo bootstrapping on an
unusable interface, and InfiniBand silently replaced by TCP sockets. ``detect`` reads
``ddiag probe links`` results: the probe already judged the matrix (a link below half the
median, or below a twentieth of its interfaces' speed, is slow; a node all of whose links
are slow is the culprit, since its own NIC, cable or port is the common factor); this
turns its verdict into findings with the measured rates as evidence.
"""

from __future__ import annotations

import ipaddress

from diag import fixes
from diag.analyze.catalog import implied

from diag.analyze.detectors.common import (SignalIndex, bare_address, classify_address,
                                           env_values, fmt_ranks, ib_unreachable, index,
                                           is_loopback, make, multi_node, own_failures)
from diag.analyze.inputs import Inputs
from diag.analyze.signals import Signal
from diag.format import schema
from diag.verdict import Basis, Category, Culprit, Evidence, Finding, Severity, graded

# =======================================================================================
# From text logs (signals parsed by diag/analyze/textlog.py)

DETECTOR = "logs_network"  # the `detector` of the text-log findings
# errno -> (how sure a failed connect means "unreachable", what it usually is)
_ERRNO = {
    113: (Basis.LINE, "No route to host to a host that is up is a firewall REJECT (firewalld/"
                "iptables) on the ports NCCL picks at random"),
    101: (Basis.LINE,
          "the network is unreachable from this host: a route or the link is missing"),
    110: (Basis.LINE, "connections time out: a firewall DROP, or a route that leads nowhere"),
    111: (Basis.LINE, "the peer refused: its process died, or a firewall rejects with a reset"),
    103: (Basis.HEURISTIC, "the connection was aborted mid-way: a firewall or a flapping link"),
    104: (Basis.HEURISTIC, "the connection was reset: a peer died or a middlebox cut it"),
}
_UNKNOWN_ERRNO = (Basis.HEURISTIC, "connections between the nodes fail")
_BRIDGES = ("docker", "virbr", "veth", "br-", "cni", "flannel", "vmnet")

_FIX_FIREWALL = fixes.sentence(fixes.FIREWALL)
_FIX_STORE = (
    "Check that {host}:{port} is rank 0's node and reachable from every node (`nc -zv {host} "
    "{port}` from a worker): MASTER_ADDR must be the master's IP on the network the nodes "
    "share, rank 0 must have started, and no firewall may block the port.")
_FIX_PARTIAL = (
    "The missing nodes never reached the rendezvous store: check on them that MASTER_ADDR/"
    "MASTER_PORT point at this node, that the port is open between the nodes "
    "(`nc -zv <master> <port>`), and that they started.")
_FIX_LATE_GROUP = (
    "Find what the missing rank runs before its new_group call (py-spy dump --pid on it): "
    "new_group must be called by every rank, in the same order; code before it that only "
    "some ranks run, or that blocks (a logger's login, a download, a lock), keeps it away.")
_FIX_IB_LINK = (
    "Check the IB link between the two hosts (ibstat, ibdiagnet, port error counters); a "
    "flapping link or a peer that died mid-collective gives this. NCCL_IB_TIMEOUT=22 rides "
    "out short flaps.")
_FIX_IB_PATH = (
    "The two NICs have no path between them. On a rail-optimised fabric (only NICs of the "
    "same index share a switch) set NCCL_CROSS_NIC=0 so NCCL never pairs NICs across rails; "
    "otherwise check RoCE routing between the GIDs' subnets (ping the remote NIC's address "
    "from this one, `show_gids` on both hosts) and that NCCL_IB_GID_INDEX selects a routable "
    "RoCE v2 GID on every node.")
_FIX_NO_IFACE = "{named}no interface matches on the host: " + fixes.NCCL_IFNAME_NO_MATCH + "."
_FIX_FAMILY = (
    "NCCL could not open a socket on any IP interface: the container or host has no usable "
    "IPv4/IPv6 interface for bootstrap. Run the container with --net=host (or give it a "
    "network), and set NCCL_SOCKET_IFNAME to an interface that exists and has an address.")
_FIX_LOOPBACK = fixes.sentence(
    fixes.loopback_iface("NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME)"))
_FIX_BRIDGE = (
    "NCCL picked a container bridge (docker0/172.17.x.x), private to each host: set "
    "NCCL_SOCKET_IFNAME to the host's real interface (or ^docker,lo to exclude), or run the "
    "containers with --net=host.")
_FIX_GLOO_IFACE = ("GLOO_SOCKET_IFNAME={iface} names an interface the host lacks: "
                   + fixes.GLOO_IFNAME_MISSING + ".")
_FIX_GLOO_MESH = ("Gloo advertised an address the other ranks cannot use: "
                  + fixes.hostname_loopback() + ".")
_FIX_IPOIB = (
    "NCCL_SOCKET_IFNAME is not set, so NCCL picked {ifaces} for its TCP bootstrap (it prefers "
    "interfaces named ib*, i.e. IPoIB); the nodes cannot reach each other there{subnets}. Set "
    "NCCL_SOCKET_IFNAME to the Ethernet interface the nodes share (e.g. "
    "NCCL_SOCKET_IFNAME=eth0, check with `ip -4 addr` and `ping` between the nodes); "
    "InfiniBand still carries the data.")
_FIX_BOOTSTRAP = (
    "NCCL's bootstrap (plain TCP sockets on the interface NCCL_SOCKET_IFNAME selects) cannot "
    "connect between the processes: check that the interface each node printed in "
    "'Bootstrap : Using' reaches the others (`ping`, `nc -zv`), and that no firewall blocks "
    "the ports NCCL picks.")
# gloo errors that happen while a pair connects: the address was never reachable
_GLOO_CONNECT = ("refused", "connect_timeout", "unreachable")
_FIX_NO_IB = (
    "NCCL sees no InfiniBand device, so inter-node traffic goes over TCP sockets (many times "
    f"slower): {fixes.EXPOSE_IB} and {fixes.LIBIBVERBS}; check `ibv_devinfo` "
    "on the host; NCCL_DEBUG=INFO should then print 'NET/IB : Using [0]mlx5_...'.")
_FIX_SOCKETS = (
    "If the nodes have InfiniBand or RoCE, NCCL should say 'Using network IB': check the HCAs "
    "are visible (ibv_devinfo) and libibverbs is installed (containers: --device=/dev/infiniband).")


def detect_text(inputs) -> list[Finding]:
    idx = index(inputs)
    findings: list[Finding] = []
    # at equal confidence the earlier rule's finding ranks first: an interface NCCL chose
    # by itself explains a failed connect better than the network does
    for rule in (_ipoib_bootstrap, _nccl_connect, _gloo_connect, _store_unreachable,
                 _ib_link_errors, _ib_qp_unreachable, _no_interface, _socket_family, _loopback_bootstrap,
                 _bridge_bootstrap, _bridge_socket, _bootstrap_chain, _gloo_interface,
                 _mpi_wrong_peer, _slow_link):
        findings += rule(idx)
    return findings


def _hosts(sigs: list[Signal]) -> list[str]:
    return [s.host for s in sigs if s.host]


# ---------------------------------------------------------------------------------------
# Unreachable peers


def _nccl_connect(idx: SignalIndex) -> list[Finding]:
    # a loopback or container-bridge peer address is the wrong interface, not the network
    sigs = [s for s in idx.of("nccl_connect_failed")
            if not is_loopback(s.fields.get("addr")) and not _bridge_addr(s.fields.get("addr"))]
    if not sigs:
        return []
    worst = max(sigs, key=lambda s: _ERRNO.get(s.fields.get("errno"), _UNKNOWN_ERRNO)[0])
    basis, why = _ERRNO.get(worst.fields.get("errno"), _UNKNOWN_ERRNO)
    peer, port = worst.fields.get("addr"), worst.fields.get("port")
    src = _named(worst.host, _own_address(idx, worst))
    dst = _named(idx.topology.host_of(peer), peer)
    reason = worst.fields.get("reason")
    title = f"NCCL cannot connect {src or 'a rank'} -> {dst}:{port}: {reason} ({why})"
    link = (worst.host or src, idx.topology.host_of(peer) or peer) if src and peer else None
    return [make(Category.NETWORK_UNREACHABLE, title, _FIX_FIREWALL, DETECTOR, basis, sigs,
                 hosts=_hosts(sigs), link=link)]


def _named(host: str | None, addr: str | None) -> str | None:
    """"node4 (10.0.0.4)": a host by its name and the address it was reached at."""
    if host and addr and host != addr:
        return f"{host} ({addr})"
    return host or addr


def _own_address(idx: SignalIndex, sig: Signal) -> str | None:
    for boot in idx.of("nccl_bootstrap"):
        if boot.host and boot.host == sig.host:
            return boot.fields.get("addr")
    return None


def _gloo_connect(idx: SignalIndex) -> list[Finding]:
    # Gloo pairs dial each peer's advertised address on a random port: a refused or timed-out
    # connect to a routable address is the network's doing (to loopback, wrong_interface's)
    sigs = [s for s in idx.of("gloo_error")
            if s.fields.get("what") in _GLOO_CONNECT and s.fields.get("peer")
            and not is_loopback(s.fields.get("peer"))]
    if not sigs:
        return []
    peer = sigs[0].fields["peer"]
    # a refusal is also what a dead peer's port gives: a crash elsewhere explains it
    refused_only = all(s.fields["what"] == "refused" for s in sigs)
    basis = Basis.HEURISTIC if refused_only or own_failures(idx) else Basis.LINE
    return [make(Category.NETWORK_UNREACHABLE, f"Gloo cannot connect to its peer {peer}",
                 _FIX_FIREWALL, DETECTOR, basis, sigs, hosts=_hosts(sigs) + [peer])]


def _store_unreachable(idx: SignalIndex) -> list[Finding]:
    """The rendezvous store at a plausible address does not answer (an impossible address
    is env_misconfig, see config.detect_text)."""
    sigs = [s for s in idx.of("store_connect_timeout", "store_connect_failed")
            if _plausible(idx, s) and s.fields.get("errno") in (None, 110, 113, 101)]
    if not sigs:
        return _partial_rendezvous(idx) or _store_bad_address(idx)
    host, port = sigs[0].fields.get("host"), sigs[0].fields.get("port")
    routed = any(s.fields.get("errno") in (113, 101) for s in sigs)
    title = f"ranks cannot reach the rendezvous store at {host}:{port}"
    return [make(Category.NETWORK_UNREACHABLE, title, _FIX_STORE.format(host=host, port=port),
                 DETECTOR, Basis.LINE, sigs, hosts=[host])]


# connect(2)'s errnos that say the address itself is unusable from this host, not that
# the network dropped it: EINVAL (an IPv6 link-local address without its scope, a family
# the socket cannot reach), EADDRNOTAVAIL, EAFNOSUPPORT
_BAD_ADDRESS_ERRNO = {22: "Invalid argument", 99: "Cannot assign requested address",
                      97: "Address family not supported by protocol"}
_FIX_BAD_ADDRESS = (
    "This host cannot even open a connection to {host}:{port} ({why}): MASTER_ADDR names an "
    "address this host's sockets cannot use. Set MASTER_ADDR to rank 0's host IPv4 address "
    "(or a name that resolves to it on every node, `getent ahosts {host}`); an IPv6 link-local "
    "address needs its scope (fe80::1%eth0).")


_FIX_RDZV = (
    "torchrun's rendezvous did not complete before its timeout: not every node joined. "
    "Start torchrun on every node with the same --rdzv-endpoint (rank 0's host:port, "
    "reachable from every node: `nc -zv host port`), --rdzv-id and --nnodes; a node that "
    "started much later than the others needs a longer --rdzv-conf join_timeout=.")


def _rendezvous_timeout(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("rendezvous_timeout")
    if not sigs:
        return []
    return [make(Category.NETWORK_UNREACHABLE, "torchrun's rendezvous timed out: not every "
                 "node joined", _FIX_RDZV, DETECTOR, Basis.HEURISTIC, sigs[:3])]


def _store_bad_address(idx: SignalIndex) -> list[Finding]:
    sigs = [s for s in idx.of("store_connect_failed")
            if s.fields.get("errno") in _BAD_ADDRESS_ERRNO]
    if not sigs:
        return []
    f = sigs[0].fields
    why = f"errno {f['errno']}: {_BAD_ADDRESS_ERRNO[f['errno']]}"
    title = f"the store address {f.get('host')}:{f.get('port')} is unusable from this host ({why})"
    return [make(Category.ENV_MISCONFIG, title, _FIX_BAD_ADDRESS.format(
        host=f.get("host"), port=f.get("port"), why=why), DETECTOR, Basis.LINE, sigs,
        env_var="MASTER_ADDR")]


def _partial_rendezvous(idx: SignalIndex) -> list[Finding]:
    # the store's side of the same story: it waited, and only some nodes ever arrived
    sigs = [s for s in idx.of("store_wait_clients")
            if s.fields.get("joined", 0) < s.fields.get("total", 0)]
    if not sigs:
        return _rendezvous_timeout(idx)
    later = [s for s in sigs if (s.fields.get("group") or 1) > 1]
    if later:
        return [_late_to_new_group(later)]
    f = sigs[0].fields
    title = f"only {f['joined']}/{f['total']} clients reached the rendezvous store"
    return [make(Category.NETWORK_UNREACHABLE, title, _FIX_PARTIAL,
                 DETECTOR, Basis.HEURISTIC, sigs)]


def _late_to_new_group(sigs: list[Signal]) -> Finding:
    """The store barrier of a later process group (new_group: key 2 and up) is missing a
    rank: every rank reached the store for the first group, so the missing one is connected
    and stuck, or busy, on its way to new_group, not unreachable."""
    f = sigs[0].fields
    waiting = {s.fields.get("waiter") for s in sigs} - {None}
    missing = set(range(f["total"])) - waiting
    named = sorted(missing) if len(missing) == f["total"] - f["joined"] else []
    who = fmt_ranks(named) if named else f"{f['total'] - f['joined']} rank(s)"
    title = (f"{who} never reached new_group's store barrier (process group "
             f"{f['group']}; {f['joined']} of {f['total']} arrived) though every rank "
             "joined the first group: it is stuck or busy before new_group")
    return make(Category.RANK_HANG, title, _FIX_LATE_GROUP, DETECTOR, Basis.LINE, sigs,
                ranks=named)


def _plausible(idx: SignalIndex, sig: Signal) -> bool:
    host = sig.fields.get("host")
    if not host:
        return True
    kind = classify_address(host)
    if kind == "loopback":
        return not multi_node(idx)
    unresolved = {s.fields.get("host") for s in idx.of("name_resolution_failed")}
    return kind is None and host not in unresolved


def _ib_qp_unreachable(idx: SignalIndex) -> list[Finding]:
    """NCCL's ibv_modify_qp (INIT -> RTR) fails with ETIMEDOUT or ENETUNREACH: the local
    NIC cannot resolve or reach the remote GID, so the two NICs have no path between them."""
    sigs = [s for s in idx.of("nccl_ib_error") if ib_unreachable(s)]
    if not sigs:
        return []
    where = f" on {sigs[0].host}" if sigs[0].host else ""
    title = (f"InfiniBand/RoCE queue pairs{where} cannot reach their peer NIC "
             f"(ibv_{sigs[0].fields.get('op')}: {sigs[0].fields.get('reason')})")
    return [make(Category.NETWORK_UNREACHABLE, title, _FIX_IB_PATH, DETECTOR, Basis.LINE, sigs,
                 hosts=_hosts(sigs))]


def _ib_link_errors(idx: SignalIndex) -> list[Finding]:
    # IB completion status 12 (retry exceeded) / 13 (RNR retry exceeded): link or peer dropped
    sigs = [s for s in idx.of("nccl_ib_error") if s.fields.get("status") in (12, 13)]
    if not sigs:
        return []
    peer, host = sigs[0].fields.get("peer"), sigs[0].host
    src = f" from {host}" if host else ""
    title = (f"InfiniBand transfers{src} to {peer} fail (retry count exceeded)" if peer else
             f"InfiniBand transfers{src} fail: the work requests' retries are exhausted "
             "(completion status 12/13)")
    return [make(Category.NETWORK_UNREACHABLE, title, _FIX_IB_LINK, DETECTOR, Basis.LINE, sigs,
                 hosts=_hosts(sigs), link=(host, peer) if host and peer else None)]


# ---------------------------------------------------------------------------------------
# Wrong interface


def _ifname(idx: SignalIndex, var: str) -> str | None:
    values = env_values(idx, var)
    return values[-1].fields.get("value") if values else None


def _no_interface(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("nccl_no_interface")
    if not sigs:
        return []
    name = _ifname(idx, "NCCL_SOCKET_IFNAME")
    named = f"NCCL_SOCKET_IFNAME={name}: " if name else ""
    evidence = sigs + env_values(idx, "NCCL_SOCKET_IFNAME")
    return [make(Category.WRONG_INTERFACE, f"{named}NCCL found no usable network interface",
                 _FIX_NO_IFACE.format(named=named), DETECTOR, Basis.EMITTER, evidence,
                 hosts=_hosts(sigs),
                 env_var="NCCL_SOCKET_IFNAME")]


def _socket_family(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("nccl_socket_family")
    if not sigs:
        return []
    title = "NCCL cannot create a bootstrap socket (no usable IP interface)"
    return [make(Category.WRONG_INTERFACE, title, _FIX_FAMILY, DETECTOR, Basis.EMITTER, sigs,
                 hosts=_hosts(sigs), env_var="NCCL_SOCKET_IFNAME")]


def _loopback_bootstrap(idx: SignalIndex) -> list[Finding]:
    if not multi_node(idx):
        return []
    sigs = [s for s in idx.of("nccl_bootstrap", "nccl_net")
            if s.fields.get("iface") == "lo" or is_loopback(s.fields.get("addr"))
            or any(i == "lo" for i, _ in s.fields.get("ifaces") or [])]
    sigs += [s for s in env_values(idx, "NCCL_SOCKET_IFNAME") if s.fields.get("value") == "lo"]
    if not sigs:
        return []
    title = "NCCL bootstraps on the loopback interface in a multi-node job"
    return [make(Category.WRONG_INTERFACE, title, _FIX_LOOPBACK, DETECTOR, Basis.SETTING, sigs,
                 hosts=_hosts(sigs), env_var="NCCL_SOCKET_IFNAME")]


def _bridge_addr(addr: str | None) -> bool:
    return bool(addr) and bare_address(addr).startswith("172.17.")


def _bridge_bootstrap(idx: SignalIndex) -> list[Finding]:
    if _one_node(idx):
        return []
    # a bridge address in the bootstrap matters only across nodes; a connect to one that
    # failed says by itself that the peer is elsewhere (on one host it would connect)
    sigs = [s for s in idx.of("nccl_bootstrap") if str(s.fields.get("iface")).startswith(_BRIDGES)
            or _bridge_addr(s.fields.get("addr"))] if multi_node(idx) else []
    sigs += [s for s in idx.of("nccl_connect_failed") if _bridge_addr(s.fields.get("addr"))]
    if not sigs:
        return []
    return [make(Category.WRONG_INTERFACE, "NCCL bootstraps on a container bridge address",
                 _FIX_BRIDGE, DETECTOR, Basis.LINE, sigs, hosts=_hosts(sigs),
                 env_var="NCCL_SOCKET_IFNAME")]


def _bridge_socket(idx: SignalIndex) -> list[Finding]:
    """NCCL's socket transport lists container-bridge or veth interfaces beside the host's
    own: with NCCL_SOCKET_IFNAME unset it stripes inter-node traffic over all of them, and
    the other node cannot reach a bridge that exists only on this one. On one node the
    transport carries nothing between nodes, so it is no finding there."""
    if _one_node(idx):
        return []
    sigs = [s for s in idx.of("nccl_net") if s.fields.get("transport") == "Socket"
            and any(str(name).startswith(_BRIDGES) for name, _ in s.fields.get("ifaces") or ())]
    if not sigs:
        return []
    names = [name for name, _ in sigs[0].fields["ifaces"]]
    real = [n for n in names if not n.startswith(_BRIDGES) and n != "lo"]
    bridges = [n for n in names if n.startswith(_BRIDGES)]
    title = (f"NCCL's socket transport uses {len(bridges)} container-bridge/veth "
             f"interface(s) ({', '.join(bridges[:3])}{', ...' if len(bridges) > 3 else ''})"
             " that other nodes cannot reach")
    fix = (f"Set NCCL_SOCKET_IFNAME={real[0] if real else '<the host interface>'} (the "
           "interface the nodes share) on every node, or exclude the bridges "
           "(NCCL_SOCKET_IFNAME=^docker,br-,veth,lo).")
    return [make(Category.WRONG_INTERFACE, title, fix,
                 DETECTOR, Basis.LINE, sigs, hosts=_hosts(sigs),
                 env_var="NCCL_SOCKET_IFNAME")]


_MPI_WRONG_PEER = implied("mpi_wrong_peer")


def _mpi_wrong_peer(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("mpi_wrong_peer")
    if not sigs:
        return []
    title = ("Open MPI's TCP transport connected to the wrong process (received unexpected "
             "process identifier): it uses an interface the hosts do not share")
    return [make(_MPI_WRONG_PEER.category, title, _MPI_WRONG_PEER.fix, DETECTOR,
                 _MPI_WRONG_PEER.basis, sigs, hosts=_hosts(sigs))]


def _bootstrap_failures(idx: SignalIndex) -> list[Signal]:
    """NCCL error chains (checks.h ``file:line -> code``) whose thread's first frame is in
    socket code and that pass through bootstrap.cc: the TCP bootstrap failed to connect."""
    chains: dict[tuple, list[Signal]] = {}
    for s in idx.of("nccl_err_chain"):
        chains.setdefault((s.host, s.fields.get("pid"), s.fields.get("tid")), []).append(s)
    failed = []
    for frames in chains.values():
        origin = str(frames[0].fields.get("src"))
        through = any(str(f.fields.get("src")).endswith("bootstrap.cc") for f in frames)
        if through and origin.endswith(("socket.cc", "socket.h", "bootstrap.cc")):
            failed += frames
    # the same connect failing in another thread of the same node, cut short in a paste
    hosts = {s.host for s in failed}
    failed += [s for s in idx.of("nccl_err_chain") if s not in failed and s.host in hosts
               and str(s.fields.get("src")).endswith("socket.cc")]
    return sorted(failed, key=lambda s: (s.file, s.line))


def _bootstrap_ifaces(idx: SignalIndex) -> list[tuple[Signal, str, str]]:
    """(signal, interface, address) of every bootstrap or IB out-of-band interface NCCL
    printed: both come from ncclFindInterfaces, by the same rule."""
    out = [(s, s.fields.get("iface"), s.fields.get("addr")) for s in idx.of("nccl_bootstrap")]
    out += [(s, *s.fields["oob"]) for s in idx.of("nccl_net") if s.fields.get("oob")]
    return [(s, str(i), str(a)) for s, i, a in out if i and a]


def _ipoib_bootstrap(idx: SignalIndex) -> list[Finding]:
    """Bootstrap fails between nodes that auto-picked IPoIB (ib*) interfaces: NCCL prefers
    ib* when NCCL_SOCKET_IFNAME is unset, and IPoIB is often not routed between nodes."""
    # a refusal or a reset came back from the peer: that address was reachable
    failed = _bootstrap_failures(idx) + [s for s in idx.of("nccl_connect_failed")
                                         if not is_loopback(s.fields.get("addr"))
                                         and s.fields.get("errno") not in (111, 104)]
    if not failed or not multi_node(idx) or env_values(idx, "NCCL_SOCKET_IFNAME"):
        return []
    ipoib = [(s, i, a) for s, i, a in _bootstrap_ifaces(idx) if i.startswith("ib")]
    if not ipoib:
        return []
    subnets = {_subnet(a) for _, _, a in ipoib} - {None}
    apart = len(subnets) > 1
    ifaces = ", ".join(sorted({f"{i} ({s.host or '?'}: {a})" for s, i, a in ipoib})[:4])
    why = f" (their addresses are on different subnets: {', '.join(sorted(subnets))})" \
        if apart else ""
    title = f"NCCL bootstraps over IPoIB ({ifaces}) and the nodes cannot connect"
    evidence = [s for s, _, _ in ipoib][:4] + failed[:4]
    return [make(Category.WRONG_INTERFACE, title,
                 _FIX_IPOIB.format(ifaces=ifaces, subnets=why), DETECTOR,
                 Basis.SETTING if apart else Basis.LINE,
                 evidence, hosts=_hosts([s for s, _, _ in ipoib]), env_var="NCCL_SOCKET_IFNAME")]


def _subnet(addr: str) -> str | None:
    # the /24 an IPv4 address sits in: a hint only, the real netmask is not in the log
    try:
        ip = ipaddress.ip_address(bare_address(addr))
    except ValueError:
        return None
    return str(ipaddress.ip_network(f"{ip}/24", strict=False)) if ip.version == 4 else None


def _bootstrap_chain(idx: SignalIndex) -> list[Finding]:
    """A bootstrap connect that fails with no WARN in the paste and no interface to blame
    (the WARN naming the peer was cut): the network between the processes."""
    failed = _bootstrap_failures(idx)
    if not failed or idx.has("nccl_connect_failed", "nccl_no_interface", "nccl_socket_family"):
        return []
    if _ipoib_bootstrap(idx) or _loopback_bootstrap(idx) or _bridge_bootstrap(idx):
        return []
    title = f"NCCL's bootstrap cannot connect ({failed[0].fields.get('src')} -> bootstrap.cc)"
    return [make(Category.NETWORK_UNREACHABLE, title, _FIX_BOOTSTRAP, DETECTOR, Basis.LINE,
                 failed, hosts=_hosts(failed))]


def _gloo_interface(idx: SignalIndex) -> list[Finding]:
    gloo = idx.of("gloo_error")
    missing = [s for s in gloo if s.fields.get("what") == "no_iface"]
    if missing:
        iface = missing[0].fields.get("iface") or _ifname(idx, "GLOO_SOCKET_IFNAME")
        title = f"GLOO_SOCKET_IFNAME={iface}: no such interface on the host"
        evidence = missing + env_values(idx, "GLOO_SOCKET_IFNAME")
        return [make(Category.WRONG_INTERFACE, title, _FIX_GLOO_IFACE.format(iface=iface),
                     DETECTOR, Basis.SETTING, evidence, hosts=_hosts(missing),
                     env_var="GLOO_SOCKET_IFNAME")]
    # connecting to a loopback address that refuses: the peer advertised its hostname's
    # 127.0.1.1 to another node. On one node the same refusal is a dead peer instead.
    looped = [s for s in gloo if is_loopback(s.fields.get("peer"))
              and s.fields.get("what") in _GLOO_CONNECT]
    looped = looped if not _one_node(idx) else []
    mesh = [s for s in gloo if s.fields.get("what") == "connect_full_mesh"]
    if not looped and not mesh:
        return []
    title = "Gloo cannot connect its full mesh: ranks advertise an unusable address"
    # a loopback address a peer advertised, between nodes, is the setting that failed
    basis = (Basis.SETTING if multi_node(idx) else Basis.LINE) if looped else Basis.HEURISTIC
    return [make(Category.WRONG_INTERFACE, title, _FIX_GLOO_MESH, DETECTOR,
                 basis, looped + mesh, hosts=_hosts(looped + mesh),
                 env_var="GLOO_SOCKET_IFNAME")]


def _one_node(idx: SignalIndex) -> bool:
    return idx.topology.one_node


# ---------------------------------------------------------------------------------------
# Slow link: InfiniBand silently replaced by TCP


def _slow_link(idx: SignalIndex) -> list[Finding]:
    if _one_node(idx):  # one node: NCCL needs no network, so its transport is no finding
        return []
    no_ib = idx.of("nccl_ib_no_device")
    sockets = [s for s in idx.of("nccl_net") if s.fields.get("transport") == "Socket"]
    # an IB transport that lists no device ("NET/IB : Using [RO]; OOB ...") uses no IB
    ib_hosts = {s.host for s in idx.of("nccl_net") if s.fields.get("transport") == "IB"
                and s.fields.get("devices") != 0}
    ib_env = env_values(idx, "NCCL_IB_DISABLE")
    wants_ib = [s for s in ib_env if s.fields.get("value") in ("0", "false")]
    disabled = [s for s in ib_env if s.fields.get("value") in ("1", "true")]
    crossing = idx.of("nccl_channel_net")
    ib_tuned = [s for s in idx.of("env") if str(s.fields.get("var")).startswith("NCCL_IB_")]
    # one node needs no IB: "no device" matters when traffic crosses nodes, or IB was expected
    if no_ib and (crossing or wants_ib or ib_hosts or ib_tuned or multi_node(idx)):
        return [_ib_missing(no_ib, sockets + crossing + wants_ib, ib_hosts, Basis.LINE)]
    if no_ib and sockets:
        return [_ib_missing(no_ib, sockets, ib_hosts, Basis.HEURISTIC)]
    if sockets:  # the node count unknown: NCCL's only network is sockets, said as a maybe
        return [_sockets_between_nodes(sockets, disabled, multi_node(idx))]
    return []


def _ib_missing(no_ib: list[Signal], also: list[Signal], ib_hosts: set,
                basis: Basis) -> Finding:
    # some hosts use IB and these do not: the odd ones out are known, and surer
    culprits = {s.host for s in no_ib if s.host and s.host not in ib_hosts}
    basis = Basis.MINORITY if ib_hosts and culprits else basis
    where = f" on {', '.join(sorted(culprits))}" if culprits else ""
    title = f"InfiniBand not used{where}: NCCL falls back to TCP sockets"
    return make(Category.SLOW_LINK, title, _FIX_NO_IB, DETECTOR, basis, no_ib + also[:5],
                hosts=culprits, severity=Severity.WARN)


def _sockets_between_nodes(sockets: list[Signal], disabled: list[Signal],
                           nodes: bool) -> Finding:
    if disabled:
        return make(Category.SLOW_LINK, "NCCL_IB_DISABLE=1: inter-node traffic goes over TCP",
                    "Unset NCCL_IB_DISABLE (or set it to 0) if the nodes have InfiniBand/RoCE.",
                    DETECTOR, Basis.LINE, disabled + sockets[:2], env_var="NCCL_IB_DISABLE",
                    severity=Severity.WARN)
    title = ("inter-node traffic uses TCP sockets" if nodes else
             "NCCL's network transport is TCP sockets: traffic between nodes, if the job "
             "spans any, goes over TCP")
    return make(Category.SLOW_LINK, title, _FIX_SOCKETS, DETECTOR, Basis.HEURISTIC,
                sockets[:4], severity=Severity.WARN)


# =======================================================================================
# From ``ddiag probe links`` results

def detect(inputs: Inputs) -> list[Finding]:
    findings = []
    for doc in inputs.docs_of(schema.PROBE_LINKS):
        report = doc.doc if isinstance(doc.doc, dict) else {}
        links = [_typed(link) for link in _list(report.get("links")) if isinstance(link, dict)]
        slow = [link for link in links if link["slow"]]
        if not slow:
            continue
        median = _rate_of(report.get("median_gbit_per_s")) or 0.0
        nodes = [n for n in _list(report.get("slow_nodes")) if isinstance(n, str)
                 and any(n in (link["src"], link["dst"]) for link in slow)]
        findings += ([_node_finding(doc.path, n, slow, median) for n in nodes] or
                     [_link_finding(doc.path, link, median) for link in slow])
    return findings


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _rate_of(value) -> float | None:
    """A rate in Gbit/s as the probe writes it (a finite float >= 0), else None: the
    document may come from anywhere."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < float("inf") else None


def _typed(link: dict) -> dict:
    """One link with the types the findings need: node names as strings, rates as
    floats or None."""
    return {"src": str(link.get("src")), "dst": str(link.get("dst")),
            "gbit_per_s": _rate_of(link.get("gbit_per_s")),
            "nominal_gbit_per_s": _rate_of(link.get("nominal_gbit_per_s")),
            "below_nominal": link.get("below_nominal") is True, "slow": link.get("slow") is True}


def _rate(link: dict) -> str:
    gbit = link.get("gbit_per_s") or 0.0
    return f"{gbit * 1000:.0f} Mbit/s" if gbit < 1 else f"{gbit:.2f} Gbit/s"


def _evidence(path: str, links: list[dict]) -> tuple[Evidence, ...]:
    return tuple(Evidence(path, None, f"{link.get('src')} -> {link.get('dst')}: {_rate(link)}")
                 for link in links[:8])


def _node_finding(path: str, node: str, slow: list[dict], median: float) -> Finding:
    mine = [link for link in slow if node in (link.get("src"), link.get("dst"))]
    worst = max(mine, key=lambda link: link.get("gbit_per_s") or 0.0)
    peer = worst.get("dst") if worst.get("src") == node else worst.get("src")
    return Finding(
        # measured: the node whose every link is the odd one out
        category=Category.SLOW_LINK, severity=Severity.ERROR, **graded(Basis.MINORITY),
        title=(f"every link of {node} is slow: about {_rate(worst)} against a median of "
               f"{median:.2f} Gbit/s ({len(mine)} directions measured)"),
        culprit=Culprit(hosts=(node,), link=(node, str(peer))), evidence=_evidence(path, mine),
        fix=(f"check {node}'s network path: NIC speed and errors (ethtool {node}'s "
             "interface, `ip -s link`), its switch port and cable, and any traffic shaping "
             "(`tc qdisc show`)"),
        detector="probe_links", details={"node": node, "median_gbit_per_s": median})


def _link_finding(path: str, link: dict, median: float) -> Finding:
    src, dst = str(link.get("src")), str(link.get("dst"))
    nominal = link.get("nominal_gbit_per_s")
    against = (f"{(link.get('gbit_per_s') or 0) / nominal:.0%} of its {nominal:g} Gbit/s "
               "interfaces" if link.get("below_nominal") and nominal
               else f"median {median:.2f} Gbit/s")
    return Finding(
        category=Category.SLOW_LINK, severity=Severity.ERROR, **graded(Basis.MINORITY),
        title=f"link {src} -> {dst} runs at {_rate(link)}, {against}",
        culprit=Culprit(hosts=(src, dst), link=(src, dst)), evidence=_evidence(path, [link]),
        fix=f"check the path between {src} and {dst}: both NICs, the switch ports between "
            "them, and routing (`ip route get`)",
        detector="probe_links", details={"median_gbit_per_s": median})
