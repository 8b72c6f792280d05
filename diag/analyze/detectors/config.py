"""The job's configuration and environment: launcher and environment mistakes, and
versions that differ across hosts.

``detect_text`` reads text logs: an impossible MASTER_ADDR, a port in use, a missing
variable, two ranks on one GPU, a tiny /dev/shm, settings that differ across nodes, and
component versions that differ across hosts. ``detect`` reads ``ddiag check-env``
snapshots: every failed or warned check is a finding, and the across-rank checks are run
again over the snapshots that are there (a run directory may hold snapshots that were
never merged, when the job died before rank 0 reported).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import replace

from diag import fixes
from diag.analyze.catalog import implied
from diag.analyze.detectors.common import (SignalIndex, bare_address, classify_address,
                                           earliest, env_values, ib_unreachable, index,
                                           is_ip, make,
                                           multi_node, nccl_launch_incompatible, release,
                                           NCCL_ONE_DEVICE, TORCH_ONE_DEVICE, VERSION_CORE)
from diag.analyze.inputs import Inputs
from diag.analyze.signals import Signal
from diag.checkenv.rendezvous import check_rendezvous
from diag.checkenv.report import build_report
from diag.checkenv.snapshot import Snapshot, snapshot_from_json
from diag.checkenv.types import CheckResult
from diag.format import schema
from diag.verdict import Basis, Category, Evidence, Finding, Severity, Status, graded

# =======================================================================================
# From text logs (signals parsed by diag/analyze/textlog.py)

DETECTOR = "logs_config"  # the `detector` of the text-log findings
_WHY = {"netmask": "a netmask, not a host", "wildcard": "the wildcard address, not a host",
        "loopback": "loopback, which other nodes cannot reach",
        "unresolvable": "a name no DNS or /etc/hosts knows"}
# the value alone shows it is no host (a netmask, 0.0.0.0); loopback is a host on one node
_BASIS = {"netmask": Basis.EMITTER, "wildcard": Basis.EMITTER, "unresolvable": Basis.SETTING,
          "loopback": Basis.LINE}
_FAILURE_KINDS = ("watchdog_timeout", "exception", "nccl_error", "nccl_warn", "gloo_error",
                  "elastic_failure", "store_connect_failed", "store_connect_timeout")
# "2.18.5+cuda12.2" -> "2.18.5": the comparable part of a version

# Fixes check-env gives too come from diag.fixes; "{var}"-style fields are filled in below.
_FIX_ADDR = "MASTER_ADDR resolves to {addr}, {why}. " + fixes.sentence(fixes.MASTER_ADDR_HOST)
_FIX_PORT = f"Nothing listens on {{host}}:{{port}}: {fixes.STORE_NOT_LISTENING}."
_FIX_RESOLVE = fixes.sentence(fixes.MASTER_ADDR_RESOLVE)
_FIX_HOSTNAME = f"The host cannot resolve its own name: {fixes.hostname_unresolved()}."
_FIX_MISSING = (
    "Launch with torchrun (it sets {var}) or export {var} on every rank before "
    "init_process_group(init_method='env://').")
_FIX_IN_USE = (
    "Port {port} is taken on the master node (another job, or a leftover process of a previous "
    "run: `ss -ltnp | grep {port}`): pick a free MASTER_PORT per job, e.g. "
    "20000 + $SLURM_JOB_ID % 20000.")
# what these signals imply on their own is kept with their catalog entries
_DUP_GPU = implied("nccl_duplicate_gpu")
_MISSING_GPU = implied("device_mapping_error")
_SHM_FULL = implied("shm_error")
_FIX_GID = (
    "Queue-pair setup fails, typically a RoCE GID index mismatch: find the RoCE v2 GID with "
    "`show_gids` and set NCCL_IB_GID_INDEX to it on every node (often 3).")
_FIX_SKEW = fixes.sentence(fixes.env_skew("{var}"))
_FIX_VERSIONS = fixes.sentence(fixes.versions("{comp}"))
_FIX_CUDA_STACK = (
    "The CUDA stack does not match: update the NVIDIA driver to one that supports the CUDA the "
    "wheel was built for (nvidia-smi shows the driver's CUDA), or install a torch build for "
    "this driver and GPU arch; keep NCCL the same on every node.")
_NVLS_BIND = implied("nccl_nvls_bind")
_FIX_TOPO_FILE = (
    "NCCL reads a topology or graph XML from the environment that does not describe this "
    "machine ({vars}): unset NCCL_TOPO_FILE/NCCL_GRAPH_FILE (look in /etc/nccl.conf and "
    "~/.nccl.conf, which NCCL reads at start), or point them at the file made for this VM "
    "size and GPU count.")
_FIX_CONFIG_SKEW = (
    "The libnccl that was loaded{loaded} is older than the NCCL headers the program was "
    "built with (2.17+ marks unset ncclConfig_t fields with INT_MIN): two NCCL installs. "
    "`pip list | grep -i nccl`, keep only the wheel that matches torch (nvidia-nccl-cu12 for "
    "a cu12 build), and drop any libnccl that LD_LIBRARY_PATH or LD_PRELOAD puts first.")
_FIX_CONFIG_VALUE = (
    "The program passes NCCL a communicator config with an invalid value: check the "
    "ncclConfig_t (or the framework option that fills it, e.g. the process group's "
    "pg_options) for {attr}.")
_FIX_NCCL_TOO_OLD = (
    "torch {torch} cannot run on NCCL {nccl}: NCCL 2.12 and older fail at the first "
    "collective since torch 2.3 (one device per process). Use the NCCL wheel torch ships "
    "(pip nvidia-nccl-cu12), or build against NCCL >= 2.13; do not LD_PRELOAD an old libnccl.")


def detect_text(inputs) -> list[Finding]:
    idx = index(inputs)
    findings: list[Finding] = []
    for rule in (_master_addr, _master_port, _name_resolution, _hostname, _env_missing,
                 _port_in_use, _duplicate_gpu, _device_mapping, _shm, _ib_gid, _topology_file,
                 _nvls_bind, _env_skew, _versions, _version_errors, _config_skew,
                 _nccl_too_old, _nccl_cannot_launch):
        findings += rule(idx)
    return findings


def _hosts(sigs: list[Signal]) -> list[str]:
    return [s.host for s in sigs if s.host]


def _first_rank(sigs: list[Signal]) -> list[int]:
    return sorted({s.rank for s in sigs if s.rank is not None})[:1]


# ---------------------------------------------------------------------------------------
# The rendezvous address and port


def _master_addr(idx: SignalIndex) -> list[Finding]:
    bad: dict[str, list[Signal]] = defaultdict(list)
    kinds: dict[str, str] = {}
    unresolved = {s.fields.get("host") for s in idx.of("name_resolution_failed")}
    for s in idx.of("store_connect_failed", "store_connect_timeout", "name_resolution_failed"):
        host = s.fields.get("host")
        kind = _bad_address(idx, host, unresolved)
        if kind:
            bad[host].append(s)
            kinds[host] = kind
    return [_addr_finding(idx, host, kinds[host], sigs) for host, sigs in bad.items()]


def _bad_address(idx: SignalIndex, host: str | None, unresolved: set) -> str | None:
    if not host:
        return None
    kind = classify_address(host)
    if kind == "loopback" and not multi_node(idx):
        return None  # one node: 127.0.0.1 is right
    if kind is None and host in unresolved and not is_ip(host):
        return "unresolvable"
    return kind


def _addr_finding(idx: SignalIndex, host: str, kind: str, sigs: list[Signal]) -> Finding:
    addr = bare_address(host)
    fix = _FIX_ADDR.format(addr=addr, why=_WHY[kind])
    return make(Category.ENV_MISCONFIG, f"MASTER_ADDR={addr} is {_WHY[kind]}", fix, DETECTOR,
                _BASIS[kind], sigs + env_values(idx, "MASTER_ADDR"), env_var="MASTER_ADDR",
                details={"address": addr, "problem": kind})


def _master_port(idx: SignalIndex) -> list[Finding]:
    """Connection refused at a plausible store address: nothing listens on that port."""
    sigs = [s for s in idx.of("store_connect_failed") if s.fields.get("errno") == 111
            and classify_address(s.fields.get("host") or "") in (None, "loopback")]
    if not sigs:
        return []
    host, port = sigs[0].fields.get("host"), sigs[0].fields.get("port")
    title = f"the rendezvous store at {host}:{port} refuses connections"
    return [make(Category.ENV_MISCONFIG, title, _FIX_PORT.format(host=host, port=port), DETECTOR,
                 Basis.LINE, sigs + env_values(idx, "MASTER_PORT"), env_var="MASTER_PORT")]


# tryConnect retries with backoff and prints the IPv6 lookup's failure each time: once is
# a host without IPv6 (IPv4 follows), this many times for one address is a name unknown
V6_RETRIES = 3


def _name_resolution(idx: SignalIndex) -> list[Finding]:
    stores = {s.fields.get("host") for s in idx.of("store_connect_failed", "store_connect_timeout")}
    sigs = [s for s in idx.of("name_resolution_failed") if s.fields.get("host") not in stores]
    sigs = sigs or _v6_retried(idx, stores)
    if not sigs or any(classify_address(s.fields.get("host") or "") for s in sigs):
        return []
    host = next((s.fields["host"] for s in sigs if s.fields.get("host")), None)
    title = f"hostname {host} cannot be resolved" if host else "a hostname cannot be resolved"
    return [make(Category.ENV_MISCONFIG, title, _FIX_RESOLVE,
                 DETECTOR, Basis.SETTING if host else Basis.LINE,
                 sigs, env_var="MASTER_ADDR")]


def _v6_retried(idx: SignalIndex, stores: set) -> list[Signal]:
    by_address: dict = {}
    for s in idx.of("name_resolution_v6"):
        if s.fields.get("host") not in stores:
            by_address.setdefault((s.fields.get("host"), s.fields.get("port")), []).append(s)
    return next((sigs for sigs in by_address.values() if len(sigs) >= V6_RETRIES), [])


def _hostname(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("hostname_unresolvable")
    if not sigs:
        return []
    return [make(Category.ENV_MISCONFIG, "the client socket's own hostname cannot be resolved",
                 _FIX_HOSTNAME, DETECTOR, Basis.LINE, sigs, hosts=_hosts(sigs))]


def _env_missing(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("env_missing")
    if not sigs:
        return []
    var = sigs[0].fields.get("var")
    return [make(Category.ENV_MISCONFIG, f"{var} is not set", _FIX_MISSING.format(var=var),
                 DETECTOR, Basis.EMITTER, sigs, env_var=var)]


def _port_in_use(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("store_bind_failed")
    if not sigs:
        return []
    port = next((s.fields["port"] for s in sigs if s.fields.get("port")), None)
    server = _store_server_rank(idx, sigs)
    where = f" on rank {server}, which hosts the store" if server is not None else ""
    title = f"the store cannot bind port {port or '?'}{where}: address already in use"
    return [make(Category.ENV_MISCONFIG, title, _FIX_IN_USE.format(port=port or "MASTER_PORT"),
                 DETECTOR, Basis.EMITTER, sigs, env_var="MASTER_PORT",
                 ranks=[server] if server is not None else [])]


# torch/distributed/rendezvous.py: from init_process_group's tcp:// and env:// handlers only
# rank 0 starts the TCPStore server (start_daemon = rank == 0; under torchrun's agent store
# every rank is a client and never binds), so a bind failure raised there is rank 0's.
_RENDEZVOUS_HANDLERS = frozenset({"_tcp_rendezvous_handler", "_env_rendezvous_handler",
                                  "_create_c10d_store"})


def _store_server_rank(idx: SignalIndex, binds: list[Signal]) -> int | None:
    lines = {(s.file, s.line) for s in binds}
    for exc in idx.of("exception"):
        if (exc.file, exc.line) in lines and _RENDEZVOUS_HANDLERS.intersection(
                exc.fields.get("frames") or ()):
            return 0
    return None


# ---------------------------------------------------------------------------------------
# Devices, shared memory, IB GID


def _duplicate_gpu(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("nccl_duplicate_gpu")
    if not sigs:
        return []
    ranks = sorted({r for s in sigs for r in s.fields.get("ranks", [])})
    title = f"ranks {', '.join(map(str, ranks))} use the same GPU"
    return [make(_DUP_GPU.category, title, _DUP_GPU.fix, DETECTOR, _DUP_GPU.basis, sigs,
                 ranks=ranks[-1:], hosts=_hosts(sigs), env_var="CUDA_VISIBLE_DEVICES")]


def _device_mapping(idx: SignalIndex) -> list[Finding]:
    """A GPU index that does not exist: the launch's mapping of ranks to GPUs (more
    processes than visible GPUs, RANK used for LOCAL_RANK) when raised while choosing the
    device at start, or with no traceback to say; raised elsewhere while running, the
    code computed the index (often a library using a global or TP rank as a local GPU)."""
    from diag.analyze.detectors.failure import call_site, selects_device, traceback_of

    sigs = idx.of("device_mapping_error")
    if not sigs:
        return []
    ordinal = [s for s in sigs if "invalid device ordinal" in s.text]
    stack = traceback_of(idx, ordinal[0]) if ordinal else []
    if stack and not selects_device(stack):
        site = call_site(idx, ordinal[0]) or "the code"
        title = (f"'invalid device ordinal' raised in {site}, not where the GPU is chosen at "
                 "start: the code computes a GPU index this node does not have")
        fix = ("The failing call builds its device from a rank that is not this node's local "
               "rank (a global or tensor-parallel rank used as a GPU index). Take the device "
               "from LOCAL_RANK or from a tensor already on the right GPU "
               "(tensor.device.index); if a library makes the call, upgrade it or report it.")
        return [make(Category.OTHER, title, fix, DETECTOR, Basis.LINE, ordinal,
                     ranks=_first_rank(ordinal))]
    return [make(_MISSING_GPU.category, "a rank maps to a GPU that is not there",
                 _MISSING_GPU.fix, DETECTOR, _MISSING_GPU.basis, sigs,
                 ranks=_first_rank(sigs), env_var="CUDA_VISIBLE_DEVICES")]


def _shm(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("shm_error")
    if sigs:
        return [make(_SHM_FULL.category, "shared-memory allocation fails (/dev/shm too small)",
                     _SHM_FULL.fix, DETECTOR, _SHM_FULL.basis, sigs, hosts=_hosts(sigs))]
    bus = bus_errors(idx)
    if not bus:
        return []
    # the signal alone: what it most often is in a training job, not what the line says
    title = ("a rank died of SIGBUS (bus error): shared memory (/dev/shm) ran out under it, "
             "the usual cause in a PyTorch job")
    return [make(_SHM_FULL.category, title, _SHM_FULL.fix, DETECTOR, Basis.LINE, bus,
                 hosts=_hosts(bus), ranks=_first_rank(bus))]


def bus_errors(idx: SignalIndex) -> list[Signal]:
    """A process killed by SIGBUS: the shell's or psiginfo's "Bus error", faulthandler's
    "Fatal Python error: Bus error", or the launcher's exit code -7."""
    return idx.of("bus_error") + [
        s for s in idx.of("fatal_python_error", "elastic_failure", "elastic_worker_failed")
        if str(s.fields.get("message", "")).startswith("Bus error")
        or s.fields.get("exitcode") == -7 or s.fields.get("signal") == "SIGBUS"]


def _ib_gid(idx: SignalIndex) -> list[Finding]:
    sigs = [s for s in idx.of("nccl_ib_error")
            if (s.fields.get("gid") or "modify_qp" in str(s.fields.get("op")))
            and not ib_unreachable(s)]
    if not sigs:
        return []
    return [make(Category.ENV_MISCONFIG, "IB/RoCE queue-pair setup fails (GID index)", _FIX_GID,
                 DETECTOR, Basis.LINE, sigs, hosts=_hosts(sigs), env_var="NCCL_IB_GID_INDEX")]


def _topology_file(idx: SignalIndex) -> list[Finding]:
    """NCCL failing on the topology/graph XML it was told to load: a host setting
    (NCCL_TOPO_FILE/NCCL_GRAPH_FILE, often from /etc/nccl.conf) made for another machine."""
    sigs = idx.of("nccl_topo_xml")
    if not sigs:
        return []
    files = [s for s in idx.of("env") if s.fields.get("var") in ("NCCL_TOPO_FILE",
                                                                   "NCCL_GRAPH_FILE")]
    named = ", ".join(sorted({f"{s.fields['var']}={s.fields.get('value')}" for s in files}))
    first = sigs[0].fields
    what = (f"the graph names GPU {first['dev']}, which this node lacks"
            if first.get("what") == "import_channel" else f"its XML {first.get('what')} fails")
    title = f"NCCL's topology/graph file does not fit this machine: {what}"
    env_var = files[-1].fields["var"] if files else "NCCL_GRAPH_FILE"
    return [make(Category.ENV_MISCONFIG, title,
                 _FIX_TOPO_FILE.format(vars=named or "NCCL_TOPO_FILE/NCCL_GRAPH_FILE"), DETECTOR,
                 Basis.SETTING if files else Basis.LINE, sigs + files, hosts=_hosts(sigs),
                 env_var=env_var)]


def _nvls_bind(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("nccl_nvls_bind")
    if not sigs:
        return []
    first = sigs[0].fields
    error = f": CUDA error {first['code']} '{first.get('error')}'" if first.get("code") else ""
    title = f"NVLink SHARP multicast memory cannot be bound{error} (fabric manager / NVSwitch)"
    return [make(_NVLS_BIND.category, title, _NVLS_BIND.fix, DETECTOR, _NVLS_BIND.basis,
                 sigs, hosts=_hosts(sigs), env_var="NCCL_NVLS_ENABLE")]


# ---------------------------------------------------------------------------------------
# Differences across hosts


def _env_skew(idx: SignalIndex) -> list[Finding]:
    """NCCL's ENV lines are what each process really ran with: one variable with different
    values on different hosts is a launcher that did not propagate it."""
    hosts_by_value: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    sigs_by_var: dict[str, list[Signal]] = defaultdict(list)
    for s in idx.of("env"):
        if s.fields.get("source") == "nccl" and s.host:
            hosts_by_value[s.fields["var"]][s.fields.get("value")].add(s.host)
            sigs_by_var[s.fields["var"]].append(s)
    out = []
    for var, values in hosts_by_value.items():
        if len(values) > 1:
            odd = min(values.values(), key=len)
            title = f"{var} differs across hosts ({_spread(values)})"
            out.append(make(Category.ENV_MISCONFIG, title, _FIX_SKEW.format(var=var), DETECTOR,
                            Basis.MINORITY, sigs_by_var[var], hosts=odd, env_var=var))
    return out


def _spread(values: dict) -> str:
    return "; ".join(f"{v}: {', '.join(sorted(h)[:3])}" for v, h in sorted(values.items(), key=str))


def _versions(idx: SignalIndex) -> list[Finding]:
    by_comp: dict[str, list[Signal]] = defaultdict(list)
    for s in _nccl_version_hosts(idx, idx.of("version")):
        by_comp[s.fields.get("component")].append(s)
    failing = any(idx.has(k) for k in _FAILURE_KINDS)
    found = [_version_spread(comp, sigs, failing) for comp, sigs in by_comp.items()]
    return [f for f in found if f]


def _version_spread(comp: str, sigs: list[Signal], failing: bool) -> Finding | None:
    """Different versions held by different hosts (or ranks). One process printing two
    versions (torch's bundled NCCL and the loaded one) is not a spread across the job."""
    owners: dict[str, set] = defaultdict(set)
    by_version: dict[str, list[Signal]] = defaultdict(list)
    for s in sigs:
        m = VERSION_CORE.search(str(s.fields.get("version", "")))
        if m:
            owners[_owner(s)].add(m.group(0))
            by_version[m.group(0)].append(s)
    attributed = [vs for owner, vs in owners.items() if owner]
    if len(by_version) < 2 or (attributed and len({frozenset(v) for v in attributed}) < 2):
        return None
    minority = min(by_version.values(), key=len)
    spread = ", ".join(f"{v} on {_who(ss)}" for v, ss in sorted(by_version.items()))
    # versions nobody can tie to a host or rank may be pip chatter: never more than a warning
    sure = len(attributed) >= 2
    hosts = _hosts(minority)
    ranks = [] if hosts else sorted({s.rank for s in minority if s.rank is not None})
    return make(Category.VERSION_MISMATCH, f"{comp} versions differ: {spread}",
                _FIX_VERSIONS.format(comp=comp), DETECTOR,
                Basis.MINORITY if sure else Basis.HEURISTIC, sigs, hosts=hosts,
                ranks=ranks, severity=Severity.ERROR if failing and sure else Severity.WARN)


_NEAR_LINES = 3  # how far a bare "NCCL version" line may sit from its process's lines


def _nccl_version_hosts(idx: SignalIndex, sigs: list[Signal]) -> list[Signal]:
    """NCCL prints its version without the host:pid:tid prefix at some debug levels (a bare
    "NCCL version 2.19.3+cuda12.3" among that process's INFO lines): such a line is the
    host's whose prefixed line comes just before it in the same file."""
    bare = [s for s in sigs if s.host is None and s.fields.get("component") == "nccl"]
    if not bare:
        return sigs
    files = {s.file for s in bare}
    hosted: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for s in idx.signals:
        if s.host and s.file in files:
            hosted[s.file].append((s.line, s.host))
    for lines in hosted.values():
        lines.sort()
    return [_near_host(s, hosted[s.file]) if s in bare else s for s in sigs]


def _near_host(sig: Signal, lines: list[tuple[int, str]]) -> Signal:
    i = bisect.bisect_left(lines, (sig.line, "")) - 1
    if i >= 0 and 0 < sig.line - lines[i][0] <= _NEAR_LINES:
        return replace(sig, host=lines[i][1])
    return sig


def _owner(sig: Signal) -> str:
    return sig.host or (f"rank {sig.rank}" if sig.rank is not None else "")


def _who(sigs: list[Signal]) -> str:
    hosts = sorted({s.host for s in sigs if s.host})
    if hosts:
        return ", ".join(hosts[:3]) + (" ..." if len(hosts) > 3 else "")
    ranks = sorted({s.rank for s in sigs if s.rank is not None})
    return "ranks " + ", ".join(map(str, ranks[:4])) if ranks else f"line {sigs[0].line}"


def _version_errors(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("version_error")
    if not sigs:
        return []
    title = f"version incompatibility: {sigs[0].fields.get('what')}"
    return [make(Category.VERSION_MISMATCH, title, _FIX_CUDA_STACK, DETECTOR, Basis.EMITTER, sigs,
                 hosts=_hosts(sigs), ranks=_first_rank(sigs))]


def _config_skew(idx: SignalIndex) -> list[Finding]:
    """NCCL rejecting a communicator config attribute. INT_MIN is the value 2.17+ headers
    give an unset field; only a library older than the headers rejects it."""
    sigs = idx.of("nccl_config_invalid")
    if not sigs:
        return []
    skewed = [s for s in sigs if s.fields.get("undef")]
    attr = (skewed or sigs)[0].fields.get("attr")
    if not skewed:
        return [make(Category.OTHER, f"NCCL rejects the communicator config's {attr} value",
                     _FIX_CONFIG_VALUE.format(attr=attr), DETECTOR, Basis.LINE, sigs,
                     hosts=_hosts(sigs))]
    loaded = _nccl_versions(idx)
    named = f" ({', '.join(sorted(set(loaded)))})" if loaded else ""
    title = (f"libnccl{named} is older than the NCCL headers the program was built with: "
             f"it rejects the unset {attr} value INT_MIN")
    versions = [s for s in idx.of("version") if s.fields.get("component") == "nccl"]
    return [make(Category.VERSION_MISMATCH, title, _FIX_CONFIG_SKEW.format(loaded=named),
                 DETECTOR, Basis.EMITTER, skewed + versions, hosts=_hosts(skewed))]


def _nccl_versions(idx: SignalIndex) -> list[str]:
    return [str(s.fields.get("version")) for s in idx.of("version")
            if s.fields.get("component") == "nccl" and s.fields.get("version")]


def _nccl_too_old(idx: SignalIndex) -> list[Finding]:
    """A visible NCCL older than 2.13 next to a visible torch 2.3 or newer, in a log
    that fails: that pair cannot run a collective (pytorch/pytorch#130414)."""
    old = [s for s in idx.of("version") if s.fields.get("component") == "nccl"
           and (release(s.fields.get("version")) or NCCL_ONE_DEVICE) < NCCL_ONE_DEVICE]
    new = [s for s in idx.of("version") if s.fields.get("component") == "torch"
           and (release(s.fields.get("version")) or (0,)) >= TORCH_ONE_DEVICE]
    if not (old and new and any(idx.has(k) for k in _FAILURE_KINDS + ("nccl_cuda_failure",))):
        return []
    nccl, torch = old[0].fields["version"], new[0].fields["version"]
    return [make(Category.VERSION_MISMATCH, f"NCCL {nccl} is too old for torch {torch}",
                 _FIX_NCCL_TOO_OLD.format(torch=torch, nccl=nccl), DETECTOR, Basis.SETTING,
                 old + new,
                 hosts=_hosts(old))]


_FIX_NCCL_LAUNCH = (
    "NCCL could not launch its kernel in this process: the libnccl that torch loaded does not "
    "fit it. Check torch.cuda.nccl.version() against the NCCL torch was built with "
    "(python -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'); NCCL "
    "2.12 and older fail this way under torch >= 2.3, and an NCCL built for another CUDA or GPU "
    "architecture too. Remove LD_PRELOAD/LD_LIBRARY_PATH entries and extra nvidia-nccl wheels "
    "that bring another libnccl, or rebuild torch against NCCL >= 2.13.")


def _nccl_cannot_launch(idx: SignalIndex) -> list[Finding]:
    """NCCL's collective launch failing with an error that says the kernel cannot run here
    (common.nccl_launch_incompatible): the NCCL library does not fit the process. A version
    the log states settles it (_nccl_too_old); without one this is the sign that is left."""
    sigs = [s for s in idx.of("nccl_cuda_failure") if nccl_launch_incompatible(s, idx)]
    if not sigs or _nccl_too_old(idx):
        return []
    first = earliest(sigs)
    title = (f"NCCL cannot launch its collective kernel ('{first.fields.get('error')}' in "
             f"{first.fields.get('src')}): the loaded NCCL does not fit this torch/CUDA")
    return [make(Category.VERSION_MISMATCH, title, _FIX_NCCL_LAUNCH, DETECTOR, Basis.LINE, sigs,
                 hosts=_hosts(sigs))]


# =======================================================================================
# From ``ddiag check-env`` snapshots (RUN_DIR/env/rank*.json) and its rendezvous pre-flight

BASIS = {Status.FAIL: Basis.SETTING, Status.WARN: Basis.HEURISTIC}
# Consequences of another failure: the group does not form because an interface is wrong,
# or no rank ran because the rendezvous was unreachable.
SYMPTOMS = {"cross.group", "cross.ranks"}


def load(inputs: Inputs) -> tuple[list[Snapshot], dict[int, str]]:
    """Readable snapshots, and each rank's file for evidence; unreadable ones are skipped
    (a schema from a newer ddiag, a truncated write)."""
    snaps, paths = [], {}
    for doc in inputs.docs_of(schema.ENV_SNAPSHOT):
        try:
            snap = snapshot_from_json(doc.doc, doc.path)
        except (ValueError, KeyError, TypeError):
            continue
        snaps.append(snap)
        paths[snap.rank] = doc.path
    return latest_launch(snaps), paths


def latest_launch(snaps: list[Snapshot]) -> list[Snapshot]:
    """Only the newest launch's snapshots: a reused run directory keeps older ones."""
    if not snaps:
        return snaps
    newest = max(snaps, key=lambda s: s.facts.time).launch
    return [s for s in snaps if s.launch == newest]


def detect(inputs: Inputs) -> list[Finding]:
    snaps, paths = load(inputs)
    launch, launch_paths = _rendezvous(inputs)
    if not snaps and not launch:
        return []
    world = max((s.world_size or 0 for s in snaps), default=0) or None
    report = build_report(snaps, world, launch=launch)
    paths = {**launch_paths, **paths}
    bad = [r for r in report.results if r.severity > Severity.INFO]
    causes = any(r.status is Status.FAIL and r.check not in SYMPTOMS for r in bad)
    return [finding(r, paths, root_cause=not (causes and r.check in SYMPTOMS)
                    and not _restates(r, bad)) for r in bad]


def _restates(result: CheckResult, bad: list[CheckResult]) -> bool:
    """A variable that differs across nodes because it is wrong on one of them: the
    failed check on those nodes is the cause, the difference says it again."""
    return result.check == "cross.env" and any(
        other.status is Status.FAIL and other.check != "cross.env"
        and other.culprit.env_var == result.culprit.env_var
        and set(other.culprit.hosts) & set(result.culprit.hosts)
        for other in bad)


def _rendezvous(inputs: Inputs) -> tuple[list[CheckResult], dict[int, str]]:
    """The newest rendezvous pre-flight's results (check-env writes one per launch)."""
    docs = inputs.docs_of(schema.RENDEZVOUS)
    if not docs:
        return [], {}
    doc = docs[-1]
    try:
        schema.check(doc.doc, schema.RENDEZVOUS, doc.path)
        return check_rendezvous(doc.doc), {-1: doc.path}
    except (ValueError, KeyError, TypeError, AttributeError):
        return [], {}


def finding(result: CheckResult, paths: dict[int, str], root_cause: bool) -> Finding:
    files = [paths[r] for r in result.culprit.ranks if r in paths][:4] or (
        [paths[-1]] if -1 in paths else list(paths.values())[:1])  # -1: the pre-flight
    nodes = result.culprit.hosts
    where = f" on {', '.join(nodes)}" if nodes else ""
    return Finding(
        category=result.category, severity=result.severity,
        **graded(BASIS[result.status]), title=f"{result.summary}{where}",
        culprit=result.culprit,
        evidence=tuple(Evidence(f, None, f"check-env {result.check}: {result.summary}")
                       for f in files),
        fix=result.fix, detector="env_snapshots", root_cause=root_cause,
        details={"check": result.check})
