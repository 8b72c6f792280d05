"""Thread-stack dumps in text logs (py-spy dump, faulthandler): which process is not where
the others are.

A hung job's ranks mostly sit in the same frames, waiting in a collective for a peer that
never arrives. With several processes' dumps, their main threads are grouped by their
innermost frames; the odd one out is the rank to look at (``rank_hang`` when it is not in a
collective at all, ``collective_mismatch`` when it is in another one). With a dump of one
process, or of processes that all agree, one shape is still telling: every rank waiting
for a ZeRO-3 (or FSDP) parameter all-gather issued from a forward hook means the ranks ran
a different number of forwards.
"""

from __future__ import annotations

from dataclasses import replace

from diag.analyze import stackgroups
from diag.analyze.detectors.common import fmt_ranks, index, make
from diag.analyze.inputs import RANK_IN_NAME
from diag.analyze.signals import Signal
from diag.verdict import Basis, Category, Evidence, Finding

DETECTOR = "logs_stacks"
_SHOWN_FRAMES = 5  # frames quoted as evidence

# processes in a dump that are not ranks: torchrun's agent, DataLoader workers
_NOT_A_RANK = ("torch/distributed/elastic/agent/", "torch/distributed/launcher/",
               "torch/distributed/run.py", "torch/utils/data/_utils/worker.py")
# ZeRO-3 (deepspeed/runtime/zero/: stage3.py up to 0.3.x, partitioned_param_coordinator.py,
# partition_parameters.py' handles since) and FSDP (torch/distributed/fsdp/) gathering a
# module's parameters before it runs
_GATHER_FUNCS = ("fetch_sub_module", "_synchronize_communication", "all_gather", "wait",
                 "_unshard", "_pre_forward_unshard", "_all_gather")
_GATHER_HOOKS = frozenset({"_pre_forward_module_hook", "pre_sub_module_forward_function",
                           "_pre_backward_module_hook", "pre_sub_module_backward_function",
                           "_post_backward_module_hook", "_pre_forward", "_pre_backward_hook",
                           "_root_pre_forward", "_pre_forward_unshard"})
_GENERATE_FUNCS = frozenset({"generate", "_generate", "sample", "_sample", "greedy_search",
                             "beam_search", "_beam_search", "rollout", "generate_sequences"})
_FIX_FORWARDS = (
    "ZeRO-3/FSDP gather parameters in every forward, so every rank must run the same number "
    "of forwards: generate(..., synced_gpus=True) (Hugging Face), equal batches per rank "
    "(drop_last, pad the dataset), no rank- or data-dependent early exit around the model.")


def detect_text(inputs) -> list[Finding]:
    idx = index(inputs)
    stacks = _main_stacks(idx.of("thread_stack"))
    if not stacks or _kept_going(idx, stacks):
        return []
    return _odd_one_out(stacks) or _parameter_gather(stacks) or _lone_dump(idx, stacks)


def _kept_going(idx, stacks: dict[tuple, Signal]) -> bool:
    """Training progressed after the dumps (faulthandler.dump_traceback_later(repeat=True)
    prints them while all is well): the stacks were a sample, not a hang."""
    last = {}
    for sig in stacks.values():
        last[sig.file] = max(last.get(sig.file, 0), sig.line)
    return any(p.line > last.get(p.file, p.line) for p in idx.of("progress"))


def _main_stacks(sigs: list[Signal]) -> dict[tuple, Signal]:
    """One stack per process (its latest dump): the main thread's."""
    dumps: dict[tuple, list[Signal]] = {}
    for sig in sigs:
        dumps.setdefault((sig.file, sig.fields.get("dump")), []).append(sig)
    out: dict[tuple, Signal] = {}
    for threads in dumps.values():
        main = _main_thread(threads)
        if main is not None and main.fields.get("frames") and not _not_a_rank(main):
            out[_process(main)] = main
    return out


def _main_thread(threads: list[Signal]) -> Signal | None:
    named = [t for t in threads if t.fields.get("thread") == "MainThread"]
    if named:
        return named[0]
    if threads[0].fields.get("format") == "py-spy":
        return threads[0]
    # faulthandler lists the newest thread first: the main thread comes last
    return threads[-1]


def _process(sig: Signal) -> tuple:
    if sig.rank is not None:
        return ("rank", sig.rank)
    if sig.fields.get("pid") is not None:
        return (sig.host, "pid", sig.fields["pid"])
    return (sig.file, "dump", sig.fields.get("dump"))


def _not_a_rank(sig: Signal) -> bool:
    return any(p in _path(f) for f in sig.fields["frames"] for p in _NOT_A_RANK)


def _path(frame: dict) -> str:
    return str(frame.get("file", "")).replace("\\", "/")


# ---------------------------------------------------------------------------------------
# Several processes: the odd one out (diag/analyze/stackgroups.py groups them)


def _odd_one_out(stacks: dict[tuple, Signal]) -> list[Finding]:
    sigs = list(stacks.values())
    found = stackgroups.odd_ones(stackgroups.group([_stack(s) for s in sigs]))
    if found is None:
        return []
    if found.category is Category.COLLECTIVE_MISMATCH:
        gathering = [s for s in sigs if _gather_frame(s) is not None]
        if gathering:
            # the others moved on to a later collective: they ran fewer forwards
            return [_forward_counts(gathering, [s for s in sigs if s not in gathering])]
    pids = found.details.get("culprit_pids") or []
    odd = [s for s in sigs if s.rank in found.culprit.ranks
           or s.rank is None and s.fields.get("pid") in pids] or sigs[:1]
    waiting = [s for s in sigs if s not in odd]
    return [_stack_finding(found.category, found.title, found.fix, found.basis, odd,
                           waiting, list(found.culprit.ranks))]


def _stack(sig: Signal) -> stackgroups.Stack:
    frames = tuple(stackgroups.Frame(str(f.get("func")), str(f.get("file") or ""),
                                     f.get("line"), f.get("at"))
                   for f in sig.fields["frames"])
    return stackgroups.Stack(sig.rank, frames, sig.file, sig.line, sig.host,
                             sig.fields.get("pid"))


def detect(inputs) -> list[Finding]:
    """py-spy JSON dumps without event logs (``ddiag stacks``, ``ddiag watch --pid``): the
    same grouping; with event logs the hang detector already says who, with these stacks
    as its evidence."""
    if inputs.events:
        return []
    stacks = []
    for doc in inputs.docs_of("pyspy"):
        m = RANK_IN_NAME.search(doc.path.rsplit("/", 1)[-1])
        stack = stackgroups.from_pyspy(doc.doc, int(m.group(1)) if m else None, doc.path)
        if stack is not None and stack.frames:
            stacks.append(stack)
    found = stackgroups.odd_ones(stackgroups.group(stacks))
    return [found] if found else []


# ---------------------------------------------------------------------------------------
# One process dumped: someone pasted the stack of a job that hung


# what a process stuck in each state is doing, for the title; and how sure that it is the
# culprit: outside communication it is stuck on its own; in a collective it waits for a
# rank nobody dumped
_LONE = {"data": ("is stuck in data loading", Basis.LINE),
         "io": ("is blocked in I/O", Basis.LINE),
         "compute": ("is busy in its own code", Basis.HEURISTIC),
         "backward": ("waits in backward (DDP/FSDP gradient communication)", Basis.HEURISTIC),
         "collective": ("waits in a collective for a rank that was not dumped",
                        Basis.HEURISTIC)}
_FIX_LONE = {
    "data": "The input pipeline is stuck: a DataLoader worker that hangs or died (shared "
            "memory, a lock taken before fork, a blocking read in __getitem__). py-spy dump "
            "the worker processes too (`py-spy dump --pid <pid> --subprocesses`), try "
            "num_workers=0 to confirm, and give the DataLoader a timeout= so it raises.",
    "io": "The rank waits on a file, a socket or a subprocess: check the filesystem or "
          "service it reads (a stale NFS mount, an object store) and give the call a timeout.",
    "compute": "The rank is in its own code, not waiting for the others: if it is "
               "legitimately long work, do it before init_process_group or raise the "
               "process-group timeout; if it loops, the quoted frame is where.",
    "backward": "Dump every rank (`ddiag stacks --pid` or py-spy on each): the ranks that are "
                "not in backward, or in another collective, are the ones the others wait for.",
    "collective": "Dump every rank (`ddiag stacks --pid` or py-spy on each): the rank that is "
                  "not in this collective is the one this process waits for.",
}


def _lone_dump(idx, stacks: dict[tuple, Signal]) -> list[Finding]:
    """One process's stack, pasted: the job hung. If its main thread is outside
    communication it is the culprit, with the frame that shows what it does."""
    if len(stacks) != 1 or idx.has("fatal_python_error"):
        return []  # a crash's dump (faulthandler on a fatal signal) is no hang
    sig = next(iter(stacks.values()))
    state, at = stackgroups.state_of(_stack(sig).frames)
    what, basis = _LONE[state]
    where = f": {at.func} ({at.file}:{at.line})" if at else ""
    caller = _user_caller(sig)
    title = f"{_who([sig])} {what}{where}" + (f", called from {caller}" if caller else "")
    category = Category.RANK_HANG
    ranks = [sig.rank] if sig.rank is not None and state not in stackgroups.WAITING else []
    return [_stack_finding(category, title, _FIX_LONE[state], basis, [sig], [], ranks)]


def _user_caller(sig: Signal) -> str | None:
    """The innermost frame of the user's own code: where in the training script."""
    frames = _stack(sig).frames
    user = next((f for f in frames if f.user), None)
    return f"{user.func} ({user.file}:{user.line})" if user else None


# ---------------------------------------------------------------------------------------
# Every stack in a parameter all-gather from a forward hook


def _parameter_gather(stacks: dict[tuple, Signal]) -> list[Finding]:
    gathering = [s for s in stacks.values() if _gather_frame(s) is not None]
    if not gathering or len(gathering) < len(stacks):
        return []
    return [_forward_counts(gathering, [])]


def _forward_counts(gathering: list[Signal], elsewhere: list[Signal]) -> Finding:
    """Ranks waiting in a ZeRO-3/FSDP gather that a forward hook issued, the others (if
    dumped) in a later collective: no single culprit, the ranks' forward counts differ."""
    first = gathering[0]
    frame = _gather_frame(first)
    which = "ZeRO-3" if "deepspeed/" in _path(frame) else "FSDP"
    generating = any(f.get("func") in _GENERATE_FUNCS for s in gathering + elsewhere
                     for f in s.fields["frames"])
    others = f" while {_who(elsewhere)} {_verb(elsewhere, 'wait')} in " \
             f"{_waits_in(elsewhere[0])}" if elsewhere else ""
    title = (f"{_who(gathering)} {_verb(gathering, 'wait')} for a {which} parameter "
             f"all-gather ({frame.get('func')}) issued from a forward hook{others}: the ranks "
             "ran a different number of forwards")
    return _stack_finding(Category.COLLECTIVE_MISMATCH, title, _FIX_FORWARDS,
                          Basis.LINE if generating else Basis.HEURISTIC,
                          [first] + elsewhere[:1], [], [])


def _waits_in(sig: Signal) -> str:
    at = stackgroups.state_of(_stack(sig).frames)[1]
    return at.func if at else "?"


def _gather_frame(sig: Signal) -> dict | None:
    """The ZeRO-3/FSDP gather frame of a stack that entered it from a module hook."""
    frames = sig.fields["frames"]
    gather = next((f for f in frames if _is_gather(f)), None)
    if gather is None or not any(f.get("func") in _GATHER_HOOKS for f in frames):
        return None
    return gather


def _is_gather(frame: dict) -> bool:
    path = _path(frame)
    return ("deepspeed/runtime/zero/" in path or "torch/distributed/fsdp/" in path) \
        and any(word in str(frame.get("func")) for word in _GATHER_FUNCS)


# ---------------------------------------------------------------------------------------
# Findings quote the frames


def _verb(sigs: list[Signal], verb: str) -> str:
    return verb + "s" if len(sigs) == 1 else verb


def _who(sigs: list[Signal]) -> str:
    ranks = [s.rank for s in sigs if s.rank is not None]
    if len(ranks) == len(sigs):
        return fmt_ranks(ranks)
    pids = [s.fields.get("pid") for s in sigs if s.fields.get("pid") is not None]
    if len(pids) == len(sigs):
        return ("process " if len(pids) == 1 else "processes ") + ", ".join(map(str, pids[:6]))
    return "the dumped process" if len(sigs) == 1 else f"{len(sigs)} dumped processes"


def _frame_text(sig: Signal, i: int) -> str:
    frame = sig.fields["frames"][i]
    line = f":{frame['line']}" if frame.get("line") is not None else ""
    return f"{frame.get('func')} ({frame.get('file')}{line})"


def _stack_evidence(sig: Signal) -> list[Evidence]:
    shown = [Evidence(sig.file, sig.line, sig.text.strip()[:400])]
    for i, frame in enumerate(sig.fields["frames"][:_SHOWN_FRAMES]):
        shown.append(Evidence(sig.file, frame.get("at"), _frame_text(sig, i)))
    return shown


def _stack_finding(category: Category, title: str, fix: str, basis: Basis,
                   odd: list[Signal], waiting: list[Signal], ranks: list[int]) -> Finding:
    finding = make(category, title, fix, DETECTOR, basis, odd + waiting[:1], ranks=ranks,
                   hosts=[s.host for s in odd if s.host])
    quoted = [e for s in odd[:2] for e in _stack_evidence(s)]
    quoted += _stack_evidence(waiting[0])[:3] if waiting else []
    return replace(finding, evidence=tuple(quoted))
