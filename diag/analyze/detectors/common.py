"""What several detectors share: over ddiag's records, exceptions, clean closes, pids and
stack dumps per rank; over text-log signals, the signals indexed by kind, the job's shape
(world size, hosts) as the logs reveal it, and findings built with their quoted evidence."""

from __future__ import annotations

import functools
import ipaddress
import re
from collections import defaultdict

from diag.analyze import topology
from diag.analyze.inputs import RANK_IN_NAME, Inputs
from diag.analyze.stackgroups import Frame, state_of
from diag.analyze.signals import Signal
from diag.analyze.topology import Topology
from diag.format.schema import MAX_WORLD_SIZE
from diag.verdict import CONFIDENCE, Basis, Category, Culprit, Evidence, Finding, Severity

# =======================================================================================
# Records: exceptions and stacks per rank


def exception_ranks(inputs: Inputs) -> set[int]:
    return {rank for rank, log in inputs.events.items() if log.of_kind("exception")}


def closed_ranks(inputs: Inputs) -> set[int]:
    """Ranks whose event log ends with a clean shutdown."""
    return {rank for rank, log in inputs.events.items() if log.of_kind("close")}


def pids_by_rank(inputs: Inputs) -> dict[int, int]:
    return {rank: log.header.get("pid") for rank, log in inputs.events.items() if log.header}


def stack_evidence(inputs: Inputs, rank: int, frames: int = 4) -> list[Evidence]:
    """The innermost frames of the rank's main thread, from a py-spy JSON dump whose
    file name or pid says it is that rank's."""
    found = main_stack(inputs, rank)
    if found is None:
        return []
    path, stack = found
    shown = stack[:frames]
    user = next((f for f in stack if _is_user_code(f)), None)
    if user is not None and user not in shown:
        shown.append(user)
    return [Evidence(path, None, _frame_text(f)) for f in shown]


def main_stack(inputs: Inputs, rank: int) -> tuple[str, list[dict]] | None:
    """(dump file, the main thread's frames innermost first) of the rank, if dumped."""
    pid = pids_by_rank(inputs).get(rank)
    for doc in inputs.docs_of("pyspy"):
        threads = doc.doc if isinstance(doc.doc, list) else [doc.doc]
        match = RANK_IN_NAME.search(doc.path.rsplit("/", 1)[-1])
        if not ((match and int(match.group(1)) == rank) or
                (pid is not None and any(t.get("pid") == pid for t in threads))):
            continue
        main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0])
        return doc.path, [f for f in main.get("frames", []) if isinstance(f, dict)]
    return None


def comm_wait_frame(inputs: Inputs, rank: int) -> str | None:
    """The frame a rank is blocked in when it issues or waits on a collective (a
    collective, a p2p wait, a store get: stackgroups.state_of): it waits on another rank.
    None otherwise."""
    found = main_stack(inputs, rank)
    if not found or not found[1]:
        return None
    frames = tuple(Frame(str(f.get("name")), str(f.get("filename", ""))) for f in found[1])
    state, at = state_of(frames)
    if state != "collective":
        return None
    return _frame_text(next(f for f, mine in zip(found[1], frames) if mine is at))


def blocking_frame(evidence: list[Evidence]) -> Evidence | None:
    """The innermost frame of the user's own code: where *their* program is stuck
    (the frames above it are the library or stdlib call it is blocked in)."""
    return next((e for e in evidence if _USER_MARK in e.text), evidence[0] if evidence else None)


_USER_MARK = " <- user code"


# ddiag's own wrappers sit between the user's call and torch's; they are not where the
# user's program is stuck, wherever ddiag is installed from.
_OWN_FRAMES = re.compile(r"[/\\]diag[/\\]runtime[/\\](collectives|instrument|eventlog|"
                         r"flight_recorder|metrics)\.py$")


def _is_user_code(frame: dict) -> bool:
    filename = str(frame.get("filename", ""))
    return Frame(str(frame.get("name")), filename).user \
        and not _OWN_FRAMES.search(filename)


def _frame_text(frame: dict) -> str:
    where = frame.get("short_filename") or frame.get("filename")
    mark = _USER_MARK if _is_user_code(frame) else ""
    return f"{frame.get('name')} ({where}:{frame.get('line')}){mark}"


# =======================================================================================
# Text-log signals

MAX_EVIDENCE = 8


class SignalIndex:
    """``inputs.signals`` grouped by kind, in input order."""

    def __init__(self, signals: list[Signal]):
        self.signals = signals
        self.by_kind: dict[str, list[Signal]] = defaultdict(list)
        for sig in signals:
            self.by_kind[sig.kind].append(sig)

    def of(self, *kinds: str) -> list[Signal]:
        if len(kinds) == 1:
            return list(self.by_kind.get(kinds[0], ()))
        out = [s for k in kinds for s in self.by_kind.get(k, ())]
        return sorted(out, key=lambda s: (s.file, s.line))

    def has(self, *kinds: str) -> bool:
        return any(self.by_kind.get(k) for k in kinds)

    @functools.cached_property
    def topology(self) -> Topology:
        """Hosts, nodes, addresses and ranks: built once, asked by every principle."""
        return topology.build(self, is_loopback)


def index(inputs) -> SignalIndex:
    return SignalIndex(list(getattr(inputs, "signals", []) or []))


# ---------------------------------------------------------------------------------------
# The job's shape


def world_size(idx: SignalIndex) -> int | None:
    """The largest world size the logs state or imply (ranks 0..max seen, a torchrun agent's
    failed + terminated workers)."""
    sizes = [s.fields.get("n") for s in idx.of("world_size")]
    sizes += [s.fields.get("nranks") for s in idx.of("nccl_init")]
    sizes += [max(r) + 1 for r in [ranks_seen(idx)] if r]
    sizes += [_agent_local_world(idx)]
    sizes = [n for n in sizes if isinstance(n, int) and 0 < n <= MAX_WORLD_SIZE]
    return max(sizes) if sizes else None


def ranks_seen(idx: SignalIndex) -> set[int]:
    return {s.rank for s in idx.signals if isinstance(s.rank, int) and 0 <= s.rank < MAX_WORLD_SIZE}


def _agent_local_world(idx: SignalIndex) -> int | None:
    # torchrun lists the workers that failed and SIGTERMs the rest: together, one node's workers
    failed = {s.fields.get("pid") for s in idx.of("elastic_failure")}
    closed = {s.fields.get("pid") for s in idx.of("elastic_closing")}
    hosts = {s.host for s in idx.of("elastic_failure")}
    if not failed or not closed or len(hosts) > 1:
        return None
    return len(failed | closed)


def hosts_seen(idx: SignalIndex) -> set[str]:
    return set(idx.topology.hosts)


def multi_node(idx: SignalIndex) -> bool:
    return idx.topology.multi_node


def env_values(idx: SignalIndex, var: str) -> list[Signal]:
    return [s for s in idx.of("env") if s.fields.get("var") == var]


# ---------------------------------------------------------------------------------------
# Addresses


def bare_address(addr: str) -> str:
    addr = addr.strip().strip("[]")
    return addr[7:] if addr.lower().startswith("::ffff:") else addr


def classify_address(addr: str) -> str | None:
    """Why ``addr`` cannot be a rendezvous host, or None when it looks like one:
    "netmask", "wildcard", "loopback"."""
    addr = bare_address(addr)
    if addr.lower() in ("localhost", "localhost.localdomain"):
        return "loopback"
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return None
    if ip.is_unspecified:
        return "wildcard"
    if ip.is_loopback:
        return "loopback"
    if ip.version == 4 and _is_netmask(str(ip)):
        return "netmask"
    return None


def _is_netmask(addr: str) -> bool:
    # 255.255.0.0, 255.255.255.0 ...: contiguous ones; no host has such an address
    value = int(ipaddress.ip_address(addr))
    inverted = (~value) & 0xFFFFFFFF
    return value >> 24 == 255 and (inverted & (inverted + 1)) == 0


def is_loopback(addr: str | None) -> bool:
    return bool(addr) and classify_address(addr) == "loopback"


def is_ip(addr: str) -> bool:
    try:
        ipaddress.ip_address(bare_address(addr))
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------
# Failures: a rank's own versus a consequence of another's

_CONSEQUENCE_TYPES = frozenset({
    "DistBackendError", "DistNetworkError", "DistStoreError", "DistError", "ChildFailedError",
    "SignalException", "KeyboardInterrupt", "SystemExit", "BrokenPipeError", "ConnectionResetError",
    "ConnectionRefusedError", "ConnectionAbortedError", "TimeoutError", "RendezvousError",
    "RendezvousConnectionError", "RendezvousTimeoutError", "RendezvousClosedError",
    "ProcessRaisedException", "ProcessExitedException", "CalledProcessError"})
_COLLECTIVE_WORDS = (
    "NCCL", "nccl", "gloo", "Gloo", "Watchdog", "watchdog", "ProcessGroup", "c10d", "collective",
    "timed out", "Timed out", "Timeout", "timeout", "Connection closed", "Connection reset",
    "by peer", "Socket", "socket", "communicator", "TCPStore", "rendezvous", "Rendezvous",
    "barrier", "Broken pipe", "heartbeat", "DistBackendError", "SIGTERM", "SIGABRT", "Signal 15",
    "Signal 6", "aborted", "Aborted", "monitoredBarrier")


def is_consequence(sig: Signal) -> bool:
    """An exception that reports a collective or the job's teardown rather than a bug on
    the rank that printed it."""
    text = f"{sig.fields.get('qualname', '')}: {sig.fields.get('message', '')}"
    if sig.fields.get("type") in _CONSEQUENCE_TYPES:
        return True
    return any(word in text for word in _COLLECTIVE_WORDS)


# cudaGetErrorString of the CUDA runtime errors a kernel *launch* returns when the binary
# cannot run in this process (CUDA runtime API, cudaError_t: 400, 98, 209, 200, 500, 222)
LAUNCH_INCOMPATIBLE = ("invalid resource handle", "invalid device function",
                       "no kernel image is available", "device kernel image is invalid",
                       "named symbol not found", "PTX was compiled with an unsupported toolchain")


def nccl_launch_incompatible(sig: Signal, idx: SignalIndex) -> bool:
    """An NCCL ``Cuda failure`` raised in its launch path (src/enqueue.cc, where
    ncclLaunchKernel launches the collective's kernel) with an error that says the kernel
    cannot be launched in this process at all, rather than that it faulted: an NCCL built
    for another CUDA or GPU, or one too old for the torch that loaded it. 'invalid resource
    handle' has one known cause of that kind (NCCL <= 2.12 under torch >= 2.3, which binds a
    process to one device: pytorch/pytorch#130414); versions the log states can rule it out."""
    if sig.kind != "nccl_cuda_failure" or "enqueue" not in str(sig.fields.get("src")):
        return False
    error = str(sig.fields.get("error"))
    if "resource handle" in error and versions_fit_one_device(idx):
        return False
    return any(e in error for e in LAUNCH_INCOMPATIBLE)


TORCH_ONE_DEVICE = (2, 3)
NCCL_ONE_DEVICE = (2, 13)
VERSION_CORE = re.compile(r"\d+(?:\.\d+){1,2}")  # "2.18.3" of "2.18.3+cuda12.2"


def versions_fit_one_device(idx: SignalIndex) -> bool:
    """The log states a torch older than 2.3 or an NCCL of 2.13 or newer."""
    for s in idx.of("version"):
        found = release(s.fields.get("version"))
        comp = s.fields.get("component")
        if found and ((comp == "torch" and found < TORCH_ONE_DEVICE)
                      or (comp == "nccl" and found >= NCCL_ONE_DEVICE)):
            return True
    return False


def release(version) -> tuple[int, ...] | None:
    """(major, minor) of "2.12.10+cuda11.6" or "2.3.1"; None when unreadable."""
    m = VERSION_CORE.search(str(version or ""))
    return tuple(int(p) for p in m.group(0).split(".")[:2]) if m else None


# ibv_modify_qp's strerror when a queue pair cannot reach its peer: the NICs cannot talk
# (a rail-only fabric crossed, no route between RoCE subnets), which no GID index fixes
IB_UNREACHABLE = ("timed out", "unreachable", "no route")


def ib_unreachable(sig: Signal) -> bool:
    """An NCCL ibv_* call that failed because the peer NIC is out of reach."""
    reason = str(sig.fields.get("reason") or "").lower()
    return any(word in reason for word in IB_UNREACHABLE)


def own_failures(idx: SignalIndex) -> list[Signal]:
    """Signals of a rank failing by itself: OOM, a CUDA or hardware error, a Python
    exception that is not about collectives."""
    out = [s for s in idx.of("oom") if not s.fields.get("weak")]
    out += idx.of("cuda_error", "xid", "hardware_error", "nccl_cuda_failure")
    out += [s for s in idx.of("exception") if not is_consequence(s)]
    return sorted(out, key=order_key)


def order_key(sig: Signal) -> tuple:
    """Earliest first: by timestamp when both lines have one, else by position."""
    return (sig.time if sig.time is not None else float("inf"), sig.file, sig.line)


def earliest(signals: list[Signal]) -> Signal | None:
    timed = [s for s in signals if s.time is not None]
    if timed:
        return min(timed, key=lambda s: s.time)
    return min(signals, key=lambda s: (s.file, s.line)) if signals else None


# ---------------------------------------------------------------------------------------
# Findings


def evidence(signals: list[Signal], limit: int = MAX_EVIDENCE) -> tuple[Evidence, ...]:
    """The distinct lines behind a finding, in file order, at most ``limit``."""
    seen, out = set(), []
    for sig in sorted(signals, key=lambda s: (s.file, s.line)):
        key = (sig.file, sig.line)
        if key in seen or sig.line <= 0:
            continue
        seen.add(key)
        out.append(sig.evidence)
    return tuple(out[:limit])


def first_seen(signals: list[Signal]) -> float | None:
    times = [s.time for s in signals if s.time is not None]
    return min(times) if times else None


def make(category: Category, title: str, fix: str, detector: str, basis: Basis,
         signals: list[Signal], *, ranks=(), hosts=(), link=None, env_var=None,
         severity: Severity = Severity.ERROR, root_cause: bool = True,
         details: dict | None = None) -> Finding:
    """A finding whose evidence is the signals' lines, as sure as its ``basis``."""
    culprit = Culprit(tuple(sorted(set(ranks))), tuple(sorted({h for h in hosts if h})), link,
                      env_var)
    return Finding(category, severity, CONFIDENCE[basis], title, culprit, evidence(signals),
                   fix, detector, root_cause, first_seen(signals), details or {}, basis)


def fmt_ranks(ranks) -> str:
    ranks = sorted(set(ranks))
    if len(ranks) > 8:
        return f"{len(ranks)} ranks ({', '.join(map(str, ranks[:6]))}, ...)"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
