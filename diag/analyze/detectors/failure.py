"""Crashes: the rank that failed first is the culprit; the ranks that died after it are
victims.

When one rank dies, its peers' next collective fails too ("Connection closed by peer",
NCCL errors, timeouts). Those are consequences. ``detect`` reads the exceptions in
ddiag's event logs: the earliest one that is not a communication failure is the root
cause; only when every exception is a communication failure is the earliest one named.
``detect_text`` reads text logs: out of memory, mismatched collective fingerprints,
NaN/Inf losses, DDP unused parameters, hardware, driver or unexplained errors, tensors on
a device their process group cannot carry, signals torchrun's agent received, command
lines the script rejects, and native crashes.
"""

from __future__ import annotations

import re
from collections import Counter

from diag.analyze.catalog import implied
from diag.analyze.detectors.common import (
    SignalIndex,
    earliest,
    fmt_ranks,
    index,
    is_consequence,
    make,
    nccl_launch_incompatible,
    ranks_seen,
)
from diag.analyze.inputs import Inputs
from diag.analyze.signals import Signal
from diag.verdict import Basis, Category, Culprit, Evidence, Finding, Severity, graded

# =======================================================================================
# From event logs

# Messages of exceptions that a rank raises because a *peer* failed or vanished.
COMM_FAILURE = re.compile(
    r"connection (closed|reset)|broken pipe|timed out|timeout|DistBackendError|NCCL error|"
    r"ProcessGroup\w* .*(abort|terminat)|Gloo|socket|peer", re.IGNORECASE)
OOM = re.compile(r"out of memory|OutOfMemoryError|can't allocate memory|"
                 r"cannot allocate memory|std::bad_alloc|MemoryError", re.IGNORECASE)


def detect(inputs: Inputs) -> list[Finding]:
    failures = sorted(_exceptions(inputs), key=lambda f: (f["t"] or 0.0, f["rank"]))
    if not failures:
        return []
    own = [f for f in failures if not COMM_FAILURE.search(f["type"] + ": " + f["message"])]
    root = (own or failures)[0]
    # Only communication failures: they follow from something else (a hang, a dead or
    # unreachable peer) that another detector names; report them as its symptom.
    findings = [_finding(root, root_cause=bool(own))]
    victims = [f for f in failures if f["rank"] != root["rank"]]
    if victims:
        findings.append(_victims(root, victims))
    return findings


def _exceptions(inputs: Inputs) -> list[dict]:
    out = []
    for rank, log in inputs.events.items():
        for rec, line in zip(log.records, log.lines):
            if rec.get("kind") == "exception":
                out.append({"rank": rank, "t": rec.get("t"), "step": rec.get("step"),
                            "type": str(rec.get("type", "")), "message": str(rec.get("message", "")),
                            "host": (log.header or {}).get("host"),
                            "evidence": Evidence(log.path, line, _head(rec))})
                break  # the first exception of a rank is the one that matters
    return out


def _head(rec: dict) -> str:
    return f"step {rec.get('step')}: {rec.get('type')}: {str(rec.get('message'))[:300]}"


def _finding(f: dict, root_cause: bool) -> Finding:
    oom = bool(OOM.search(f["type"] + " " + f["message"]))
    return Finding(
        category=Category.OOM if oom else Category.OTHER,
        # the rank's own event log recorded it; the first rank to fail, of all of them
        severity=Severity.CRITICAL, **graded(Basis.EMITTER if oom else Basis.MINORITY),
        title=(f"rank {f['rank']} ran out of memory at step {f['step']}" if oom else
               f"rank {f['rank']} failed first, at step {f['step']}: {f['type']}"),
        culprit=Culprit(ranks=(f["rank"],), hosts=(f["host"],) if f["host"] else ()),
        evidence=(f["evidence"],),
        fix=("reduce the per-rank memory: smaller micro-batch, activation checkpointing, "
             "ZeRO/FSDP sharding; on GPU check for fragmentation "
             "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)" if oom else
             f"fix the {f['type']} raised on rank {f['rank']} (traceback in its event "
             "log); the other ranks' errors follow from it"),
        detector="failures", root_cause=root_cause, first_seen=f["t"],
    )


def _victims(root: dict, victims: list[dict]) -> Finding:
    ranks = sorted({v["rank"] for v in victims})
    return Finding(
        category=Category.OTHER, severity=Severity.ERROR, **graded(Basis.MINORITY),
        title=f"ranks {', '.join(map(str, ranks))} failed after rank {root['rank']} (victims)",
        culprit=Culprit(), evidence=tuple(v["evidence"] for v in victims[:8]),
        fix=f"nothing to fix on these ranks: they failed because rank {root['rank']} did",
        detector="failures", root_cause=False, first_seen=victims[0]["t"],
    )


# =======================================================================================
# From text logs (signals parsed by diag/analyze/textlog.py)

DETECTOR = "logs_failures"  # the `detector` of the text-log findings

_FIX_GPU_OOM = (
    "Reduce memory on that rank: a smaller micro-batch or sequence length, activation "
    "checkpointing, FSDP/ZeRO sharding, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "against fragmentation; check for a rank that gets larger batches (uneven data) or also "
    "runs evaluation."
)
_FIX_HOST_OOM = (
    "The host ran out of memory: fewer DataLoader workers, a smaller prefetch, less data "
    "loaded per rank, or more memory for the job (Slurm --mem); `dmesg | grep -i oom` "
    "confirms the OOM killer."
)
_FIX_ORDER = (
    "Make every rank issue the same collectives in the same order: look for rank- or "
    "data-dependent branches around collectives."
)
_FIX_SHAPES = (
    "Make the tensors agree across ranks: pad variable-size inputs; with DeepSpeed ZeRO-3, "
    "make every rank run the same modules each step (e.g. a dummy input through a branch "
    "some batches skip)."
)
_FIX_NAN = (
    "Find the first non-finite value: torch.autograd.set_detect_anomaly(True) for a short "
    "run, check the inputs of the first bad step, lower the learning rate or clip gradients, "
    "and prefer bf16 over fp16 (or keep the loss scaler)."
)
_UNUSED = implied("ddp_unused_params")  # kept with the reducer's catalog entries
_FIX_HARDWARE = {
    "fabric_manager": (
        "Check nvidia-fabricmanager on that node (systemctl status nvidia-fabricmanager): it "
        "must run, with the driver's exact version, before any CUDA job. Reboot the node if it "
        "was restarted while GPUs were in use."
    ),
    "system_not_ready": (
        "CUDA reports the system not initialized: on NVSwitch systems start "
        "nvidia-fabricmanager (matching the driver version), then retry."
    ),
    None: (
        "Drain the node and check the GPU: nvidia-smi -q -d ECC,PAGE_RETIREMENT, "
        "`dmesg | grep -i xid`, and the vendor's diagnostics (dcgmi diag -r 3); reset or "
        "replace the GPU."
    ),
}
_FIX_NCCL_CUDA = {
    "peer": (
        "GPU peer-to-peer access fails between these GPUs (often IOMMU/ACS on PCIe hosts, or a "
        "VM): disable IOMMU/ACS (iommu=pt), or set NCCL_P2P_DISABLE=1 to route around P2P."
    ),
    "nvls": (
        "NVLS (NVLink SHARP) setup failed: usually nvidia-fabricmanager was restarted while GPUs "
        "were in use, or does not match the driver. Reboot the node (or restart fabric manager "
        "with no GPU processes); NCCL_NVLS_ENABLE=0 avoids the NVLS path meanwhile."
    ),
    None: (
        "A CUDA call inside NCCL failed: check the driver/CUDA versions on that node "
        "(nvidia-smi), the GPU's health (dmesg | grep -i xid), and rerun with NCCL_DEBUG=INFO "
        "to see which transport fails."
    ),
}
_FIX_CUDA_ERROR = (
    "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel; a device-side assert is "
    "usually an index out of range (labels vs. vocabulary size); an illegal memory access can "
    "also be a bad GPU (check dmesg for Xid errors)."
)


def detect_text(inputs) -> list[Finding]:
    idx = index(inputs)
    findings: list[Finding] = []
    for rule in (_oom, _fingerprints, _size_mismatch, _nan, _unused_parameters, _hardware,
                 _nccl_cuda, _cuda_errors, _slurm_nodes, _tensor_device, _death_signal,
                 _launcher_args, _native_crash):
        findings += rule(idx)
    if not findings:
        findings += _unexplained(idx)
    return findings


def _culprit(sig: Signal | None) -> list[int]:
    return [sig.rank] if sig is not None and sig.rank is not None else []


# ---------------------------------------------------------------------------------------
# Out of memory


def _oom(idx: SignalIndex) -> list[Finding]:
    strong = [s for s in idx.of("oom") if not s.fields.get("weak")]
    strong += [s for s in idx.of("nccl_cuda_failure")
               if "out of memory" in s.fields.get("error", "")]
    if strong:
        return [_oom_finding(strong, Basis.EMITTER)]
    weak = [s for s in idx.of("oom") if s.fields.get("weak")] + _sigkilled(idx)
    return [_oom_finding(weak, Basis.HEURISTIC)] if weak else []


def _on_gpu(sigs: list[Signal]) -> bool:
    return any(s.fields.get("device") == "gpu" or s.kind == "nccl_cuda_failure" for s in sigs)


def _sigkilled(idx: SignalIndex) -> list[Signal]:
    # exit code -9 with nothing else said is most often the kernel's OOM killer -- but
    # not when the step was cancelled (scancel, a time limit, a watcher ending the job):
    # then Slurm's SIGKILL after the grace period is what "Killed" reports
    if idx.of("slurm_cancelled"):
        return [s for s in idx.of("slurm_task_exit")
                if "Out Of Memory" in s.fields.get("status", "")]
    if idx.of("elastic_death_signal"):
        return []  # the agent was signalled and SIGKILLed its workers after the grace period
    out = [s for s in idx.of("elastic_failure", "elastic_worker_failed")
           if s.fields.get("exitcode") == -9 or s.fields.get("signal") == "SIGKILL"]
    statuses = ("Killed", "Out Of Memory")
    out += [s for s in idx.of("slurm_task_exit")
            if any(word in s.fields.get("status", "") for word in statuses)]
    return out


def _oom_finding(sigs: list[Signal], basis: Basis) -> Finding:
    first = earliest(sigs)
    ranks = _culprit(first)
    where = "GPU" if _on_gpu(sigs) else "host"
    who = fmt_ranks(ranks) if ranks else "a rank"
    fix = _FIX_GPU_OOM if where == "GPU" else _FIX_HOST_OOM
    oom_ranks = sorted({s.rank for s in sigs if s.rank is not None})
    return make(Category.OOM, f"{who} ran out of {where} memory first", fix, DETECTOR, basis,
                sigs, ranks=ranks, hosts=[first.host], details={"oom_ranks": oom_ranks})


# ---------------------------------------------------------------------------------------
# Collective fingerprints (TORCH_DISTRIBUTED_DEBUG=DETAIL) and size mismatches


def _fingerprints(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("fingerprint_mismatch")
    if not sigs:
        return []
    variants = _fingerprint_variants(sigs)
    op_or_seq = {(v[0], v[1]) for v in variants.values()}
    in_order = len(op_or_seq) > 1 or _aspect(sigs, "Op type", "Sequence") or \
        any(_size_header(v) for v in variants.values()) or _structure_differs(sigs, variants)
    category = Category.COLLECTIVE_MISMATCH if in_order else Category.SHAPE_MISMATCH
    sides = "; ".join(f"rank {r}: {_describe(v)}" for r, v in sorted(variants.items())[:4])
    what = "different collectives" if in_order else "the same collective with different tensors"
    details = {"fingerprints": {str(r): list(v) for r, v in variants.items()}}
    return [make(category, f"ranks run {what} ({sides})", _FIX_ORDER if in_order else _FIX_SHAPES,
                 DETECTOR, Basis.EMITTER, sigs, ranks=_odd_rank_out(sigs, variants),
                 details=details)]


def _size_header(v: tuple) -> bool:
    """A one-element int64 tensor: the object sizes an object collective (broadcast_object_list,
    all_gather_object) sends before the objects; met by another collective, the ranks' call
    sequences diverged, whatever the other side's shape."""
    _, _, shape, dtype = v
    return str(shape).replace(" ", "") == "[1]" and str(dtype).lower() in ("long", "int64")


def _structure_differs(sigs: list[Signal], variants: dict[int, tuple]) -> bool:
    """Only the reporting rank's side, in torch's 'is running inconsistent collective': the
    serialized fingerprints differ in length (ProcessGroupWrapper's verify_tensors), so the
    ranks run collectives of another structure: nothing says it is the same collective."""
    return len(variants) == 1 and any(s.fields.get("inconsistent") for s in sigs)


def _fingerprint_variants(sigs: list[Signal]) -> dict[int, tuple]:
    variants: dict[int, tuple] = {}
    for s in sigs:
        for side in s.fields.get("sides", []):
            fingerprint = (side.get("op"), side.get("seq"), side.get("shape"), side.get("dtype"))
            variants.setdefault(side["rank"], fingerprint)
    return variants


def _aspect(sigs: list[Signal], *words: str) -> bool:
    return any(w in s.fields.get("aspects", "") for s in sigs for w in words)


def _odd_rank_out(sigs: list[Signal], variants: dict[int, tuple]) -> list[int]:
    """The ranks whose fingerprint the fewest share; with a 1:1 tie, the rank torch calls
    inconsistent, else the one the reporter compared itself against (torch names the first
    rank that differs from the reporting one)."""
    counts = Counter(variants.values())
    if len(counts) < 2:
        return []
    fewest = min(counts.values())
    rarest = [v for v, n in counts.items() if n == fewest]
    if len(rarest) == 1 and fewest < max(counts.values()):
        return sorted(r for r, v in variants.items() if v == rarest[0])
    inconsistent = [s.fields["sides"][0]["rank"] for s in sigs
                    if s.fields.get("inconsistent") and s.fields.get("sides")]
    if inconsistent:
        return inconsistent[:1]
    pairs = [s.fields["sides"] for s in sigs if len(s.fields.get("sides", [])) > 1]
    others = Counter(sides[1]["rank"] for sides in pairs)
    return [others.most_common(1)[0][0]] if others else []


def _describe(v: tuple) -> str:
    op, seq, shape, dtype = v
    parts = (op, f"#{seq}" if seq is not None else None, shape, dtype)
    return " ".join(str(x) for x in parts if x)


def _size_mismatch(idx: SignalIndex) -> list[Finding]:
    sigs = [s for s in idx.of("gloo_error") if s.fields.get("what") == "size_mismatch"]
    sigs += idx.of("nccl_truncated")
    if not sigs or idx.has("fingerprint_mismatch"):
        return []
    ranks = sorted({s.rank for s in sigs if s.rank is not None})[:1]
    header = [s for s in sigs if _SIZE_HEADER_BYTES in (s.fields.get("sizes") or ())]
    if header:
        return [make(Category.COLLECTIVE_MISMATCH, _TITLE_HEADER, _FIX_SEQUENCE,
                     DETECTOR, Basis.LINE,
                     header, ranks=ranks)]
    title = ("a rank received more bytes than it posted: the ranks' tensor sizes differ in the "
             "same collective, or the ranks are in different collectives")
    fix = ("Rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to see each rank's op and shape. Same "
           "op, other shapes: make them agree (pad, or exchange sizes first). Different ops: "
           + _FIX_SEQUENCE)
    return [make(Category.SHAPE_MISMATCH, title, fix, DETECTOR, Basis.LINE, sigs, ranks=ranks)]


# Object collectives (broadcast_object_list, all_gather_object, gather_object) first send
# each object's size as one int64 element: 8 bytes on one side of gloo's "N vs M" is that
# header meeting another collective, so the ranks' call sequences diverged
_SIZE_HEADER_BYTES = 8
_TITLE_HEADER = ("the ranks are in different collectives: one side of the size mismatch is "
                 "8 bytes, the one-element size header an object collective (all_gather_object, "
                 "broadcast_object_list) sends first")
_FIX_SEQUENCE = ("every rank must call the same collectives in the same order: look for a "
                 "collective under `if rank == 0:` (evaluation, logging, saving), a data-"
                 "dependent early exit, or a different number of steps per rank.")


# ---------------------------------------------------------------------------------------
# NaN / Inf and DDP unused parameters


def _nan(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("nan_loss")
    if not sigs:
        return []
    first = earliest(sigs)
    reporting = {s.rank for s in sigs if s.rank is not None}
    # a rank is the culprit only when some ranks still had finite values
    culprits = _culprit(first) if len(reporting) < max(len(ranks_seen(idx)), 2) else []
    steps = [s.fields["step"] for s in sorted(sigs, key=lambda s: s.line)
             if s.fields.get("step") is not None]
    title = "non-finite loss or gradients" + (f" from step {steps[0]}" if steps else "")
    title += f", first on {fmt_ranks(culprits)}" if culprits else ""
    return [make(Category.NAN_INF, title, _FIX_NAN, DETECTOR, Basis.EMITTER, sigs,
                 ranks=culprits)]


def _unused_parameters(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("ddp_unused_params")
    if not sigs:
        return []
    named = sorted({s.fields["named_rank"] for s in sigs if s.fields.get("named_rank") is not None})
    who = f" on {fmt_ranks(named)}" if named else ""
    return [make(_UNUSED.category, f"DDP parameters received no gradient{who}",
                 _UNUSED.fix, DETECTOR, _UNUSED.basis, sigs, ranks=named)]


# ---------------------------------------------------------------------------------------
# Hardware, driver, CUDA


def _hardware(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("xid", "hardware_error")
    if not sigs:
        return []
    kinds = {s.fields.get("what") for s in sigs}
    fix = next((_FIX_HARDWARE[k] for k in kinds if k in _FIX_HARDWARE), _FIX_HARDWARE[None])
    first = earliest(sigs)
    title = f"GPU hardware or driver error: {first.text.strip()[:120]}"
    return [make(Category.OTHER, title, fix, DETECTOR, Basis.EMITTER, sigs, ranks=_culprit(first),
                 hosts=[s.host for s in sigs])]


def _nccl_cuda(idx: SignalIndex) -> list[Finding]:
    # out of memory is the OOM rule's; a kernel that cannot launch at all, config's
    # (a version mismatch)
    sigs = [s for s in idx.of("nccl_cuda_failure")
            if "out of memory" not in s.fields.get("error", "")
            and not nccl_launch_incompatible(s, idx)]
    if not sigs:
        return []
    first = earliest(sigs)
    error = str(first.fields.get("error"))
    where = ("peer" if "peer access" in error
             else "nvls" if "nvls" in str(first.fields.get("src")).lower() else None)
    title = f"CUDA failure inside NCCL ('{error}'{' in NVLS setup' if where == 'nvls' else ''})"
    return [make(Category.OTHER, title, _FIX_NCCL_CUDA[where], DETECTOR, Basis.LINE, sigs,
                 ranks=_culprit(first), hosts=[s.host for s in sigs])]


# A finding that quotes a message without knowing it: a template that knows the message
# says more (detectors/emitted.prune)
GENERIC = {"generic": True}


def _cuda_errors(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("cuda_error")
    if not sigs:
        return []
    first = earliest(sigs)
    who = fmt_ranks([first.rank]) if first.rank is not None else "a rank"
    title = f"CUDA error on {who}: {first.fields.get('message', '')[:100]}"
    return [make(Category.OTHER, title, _FIX_CUDA_ERROR, DETECTOR, Basis.LINE, sigs,
                 ranks=_culprit(first), details=GENERIC)]


def _slurm_nodes(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("slurm_node_failure")
    sigs += [s for s in idx.of("slurm_cancelled") if "NODE" in s.fields.get("reason", "")]
    if not sigs:
        return []
    fix = ("Ask the admins to drain and check the node (sinfo -R); exclude it with --exclude "
           "until it is fixed.")
    return [make(Category.OTHER, "Slurm reports a node failure", fix, DETECTOR, Basis.LINE, sigs,
                 hosts=[s.fields.get("node") for s in sigs])]


# ---------------------------------------------------------------------------------------
# API misuse, signals from outside the job, a command line the script rejects

_BACKEND = implied("tensor_device_backend")


def _tensor_device(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("tensor_device_backend")
    if not sigs:
        return []
    first = earliest(sigs)
    device = first.fields.get("device") or "a non-CUDA device"
    caller = call_site(idx, first)
    where = f" in {caller}" if caller else ""
    title = f"a collective got a tensor on {device}, which its process group has no backend " \
            f"for{where}"
    return [make(_BACKEND.category, title, _BACKEND.fix, DETECTOR, _BACKEND.basis, sigs)]


def call_site(idx: SignalIndex, sig: Signal) -> str | None:
    """"func (file:line)" of the innermost frame outside torch of the traceback that ended
    on ``sig``'s line: the code that made the failing call."""
    frame = next((f for f in reversed(traceback_of(idx, sig)) if not is_torch_frame(f)), None)
    return f"{frame['func']} ({frame['file']}:{frame['line']})" if frame else None


def traceback_of(idx: SignalIndex, sig: Signal) -> list[dict]:
    """The frames (outermost first: file, line, func, code) of the exception printed on
    ``sig``'s line; [] when the log shows no traceback for it."""
    for exc in idx.of("exception"):
        if exc.file == sig.file and exc.line == sig.line:
            return exc.fields.get("stack") or []
    return []


def is_torch_frame(frame: dict) -> bool:
    return "/torch/" in str(frame.get("file", "")).replace("\\", "/")


# choosing the process's GPU at start: torch.cuda.set_device(local_rank), .cuda(rank),
# f"cuda:{local_rank}", init_process_group(device_id=...), torch.cuda.device(i)
_DEVICE_SELECTION_FUNCS = frozenset({"set_device", "init_process_group", "_get_device_index"})
# (a device built from another rank, e.g. f"cuda:{self.tp_rank}", is not: that is code
# computing the index, wherever it runs)
_DEVICE_SELECTION_CODE = re.compile(r"set_device|device_id\s*=|torch\.cuda\.device\(|local_rank"
                                    r"|LOCAL_RANK|\.cuda\(\s*(?:args\.)?gpu\b"
                                    r"|cuda:\s*\{\s*(?:args\.)?gpu\b")


# the caller's function when the failing call is part of starting up
_STARTUP_FUNC = re.compile(r"<module>|main|__init__|_?(?:setup|init|build|prepare|create)\w*"
                           r"|\w*device\w*")


def selects_device(stack: list[dict]) -> bool:
    """Whether a traceback runs through the start-up choice of the process's GPU: a
    device-selection call anywhere, or the user's code that failed is start-up code
    (``main``, ``setup``, ``__init__`` ...) rather than a step of the running job or an
    installed library's own computation."""
    if any(f.get("func") in _DEVICE_SELECTION_FUNCS
           or _DEVICE_SELECTION_CODE.search(f.get("code") or "") for f in stack):
        return True
    caller = next((f for f in reversed(stack) if not is_torch_frame(f)), None)
    return caller is not None and not _in_library(caller) \
        and bool(_STARTUP_FUNC.fullmatch(str(caller.get("func"))))


def _in_library(frame: dict) -> bool:
    return any(p in str(frame.get("file", "")) for p in ("site-packages", "dist-packages"))


_SIGNAL_FINDINGS = {
    # signal -> (category, basis, severity, why, fix)
    "SIGHUP": (Category.ENV_MISCONFIG, Basis.EMITTER, Severity.ERROR,
               "its terminal or SSH session closed (the launch was not detached from it)",
               "Detach the launcher from the terminal: run it in tmux/screen, or "
               "`setsid nohup torchrun ... > train.log 2>&1 &` (or `nohup ... & disown`), or "
               "submit it through the scheduler. nohup alone does not protect the whole "
               "process tree."),
    "SIGTERM": (Category.OTHER, Basis.LINE, Severity.ERROR,
                "something outside the job terminated it (scheduler, preemption, the host's "
                "OOM handling, an operator)",
                "Find the sender: the scheduler's log (time limit, preemption, scancel), "
                "`dmesg` for the OOM killer, Kubernetes events (eviction); then raise the "
                "limit or resubmit."),
    "SIGINT": (Category.OTHER, Basis.HEURISTIC, Severity.WARN, "it was interrupted (Ctrl-C)",
               "The run was interrupted by hand; nothing in the job failed."),
    "SIGQUIT": (Category.OTHER, Basis.HEURISTIC, Severity.WARN, "it received SIGQUIT",
                "The run was stopped from outside; nothing in the job failed."),
}


def _death_signal(idx: SignalIndex) -> list[Finding]:
    """torchrun's agent was signalled and took its workers down: the cause is whoever sent
    the signal; the workers' errors that follow are its victims."""
    sigs = idx.of("elastic_death_signal")
    if not sigs:
        return []
    name = earliest(sigs).fields.get("signal")
    if name not in _SIGNAL_FINDINGS or (name == "SIGTERM" and idx.has("slurm_cancelled")):
        return []  # a Slurm cancellation names its own reason (slurm rules)
    category, basis, severity, why, fix = _SIGNAL_FINDINGS[name]
    title = f"the launcher (torchrun agent) received {name} and shut down all workers: {why}"
    return [make(category, title, fix, DETECTOR, basis, sigs + idx.of("elastic_closing"),
                 severity=severity)]


def _launcher_args(idx: SignalIndex) -> list[Finding]:
    """argparse rejected the command line the launcher built."""
    sigs = idx.of("argparse_error")
    if not sigs:
        return []
    args = [a for s in sigs for a in s.fields.get("args") or []]
    if any(a.startswith("--local-rank") for a in args):
        return [make(Category.VERSION_MISMATCH, _LOCAL_RANK_DASH, _FIX_LOCAL_RANK_DASH, DETECTOR,
                     Basis.EMITTER, sigs)]
    if any(a.startswith("--local_rank") for a in args):
        return [make(Category.ENV_MISCONFIG, "the launcher passes --local_rank, which the script "
                     "does not declare", _FIX_LOCAL_RANK, DETECTOR, Basis.LINE, sigs)]
    title = f"the script rejects its command line: {sigs[0].fields.get('message', '')[:120]}"
    return [make(Category.ENV_MISCONFIG, title, "Fix the launch command or the script's "
                 "arguments (every worker exits with code 2 before any training).", DETECTOR,
                 Basis.HEURISTIC, sigs)]


# faulthandler's names of the signals that mean the process itself crashed; "Aborted" is
# left out: torch's watchdog aborts a rank whose collective failed elsewhere, and "Bus
# error" is shared memory running out (config._shm)
_CRASHES = ("Segmentation fault", "Illegal instruction", "Floating-point exception")


def _native_crash(idx: SignalIndex) -> list[Finding]:
    """A rank died on a fatal signal in native code (faulthandler's "Fatal Python error:
    Segmentation fault" and the crashing thread's stack)."""
    sigs = [s for s in idx.of("fatal_python_error")
            if s.fields.get("message", "").startswith(_CRASHES)]
    if not sigs:
        return []
    first = earliest(sigs)
    stack = next((t for t in idx.of("thread_stack") if t.file == first.file
                  and t.line > first.line and t.fields.get("current")), None)
    frames = stack.fields["frames"] if stack else []
    where = f" in {frames[0]['func']} ({frames[0]['file']}:{frames[0]['line']})" if frames else ""
    who = fmt_ranks([first.rank]) if first.rank is not None else "a rank"
    title = f"{who} crashed: {first.fields['message']}{where}"
    fix = ("A crash in native code (a C++/CUDA extension, a custom kernel, a library ABI "
           "mismatch): rerun that rank under gdb or with TORCH_SHOW_CPP_STACKTRACES=1, check "
           "that compiled extensions match the installed torch/CUDA.")
    return [make(Category.OTHER, title, fix,
                 DETECTOR, Basis.LINE, sigs + ([stack] if stack else []),
                 ranks=_culprit(first))]


_LOCAL_RANK_DASH = ("the launcher passes --local-rank=N (torch >= 2.0) but the script parses "
                    "only --local_rank (written for torch 1.x)")
_FIX_LOCAL_RANK_DASH = (
    "torch >= 2.0's torch.distributed.launch passes the dashed --local-rank. Launch with "
    "torchrun and read os.environ['LOCAL_RANK'], or declare both spellings: "
    "parser.add_argument('--local-rank', '--local_rank', type=int).")
_FIX_LOCAL_RANK = (
    "Declare --local_rank in the script (or read os.environ['LOCAL_RANK']), or launch with "
    "torchrun / --use-env so no argument is passed.")


# ---------------------------------------------------------------------------------------
# Nothing specific: the first rank's own exception, or NCCL's bare error code


def _unexplained(idx: SignalIndex) -> list[Finding]:
    own = [s for s in idx.of("exception") if not is_consequence(s)]
    if own:
        return [_first_exception(idx, own)]
    first = [s for s in idx.of("launcher_first_failure") if s.rank is not None]
    if first:
        return [_launcher_first(first[0])]
    codes = idx.of("nccl_error")
    if not codes:
        return []
    code = codes[0].fields.get('code')
    if idx.has("nccl_warn"):  # the detail is there: a WARN no rule or template explains
        title = f"NCCL {code} error; the NCCL WARN line before it says why"
        fix = "Read the NCCL WARN line quoted before the error: it names the cause."
    else:
        title = f"NCCL {code} error with no detail in the log"
        fix = ("Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV: the WARN line "
               "before the error names the cause.")
    return [make(Category.OTHER, title, fix,
                 DETECTOR, Basis.HEURISTIC, codes, severity=Severity.WARN,
                 details=GENERIC)]


def _launcher_first(sig: Signal) -> Finding:
    """The launcher names the first rank to exit non-zero (mpirun's help text) and nothing
    says why: that rank is where to look."""
    code = sig.fields.get("exit_code")
    title = (f"{sig.fields.get('launcher')}: rank {sig.rank} exited first"
             + (f" (exit code {code})" if code is not None else "")
             + "; the log holds no error of its own")
    fix = (f"Read rank {sig.rank}'s own output (its stderr, or rerun with NCCL_DEBUG=WARN): "
           "the other ranks were terminated because it exited.")
    return make(Category.OTHER, title, fix, DETECTOR, Basis.HEURISTIC, [sig], ranks=[sig.rank])


def _first_exception(idx: SignalIndex, own: list[Signal]) -> Finding:
    first = earliest(own)
    rank = first.rank if first.rank is not None else _elastic_root_rank(idx)
    who = fmt_ranks([rank]) if rank is not None else "a rank"
    title = f"{first.fields.get('type')} on {who}: {first.fields.get('message', '')[:120]}"
    fix = ("Fix this exception first: the other ranks' errors are consequences of this rank "
           "leaving the job.")
    ranks = [rank] if rank is not None else []
    return make(Category.OTHER, title, fix, DETECTOR, Basis.HEURISTIC, [first], ranks=ranks,
                details=GENERIC)


def _elastic_root_rank(idx: SignalIndex) -> int | None:
    roots = [s for s in idx.of("elastic_failure") if s.fields.get("root")]
    return roots[0].rank if roots else None
