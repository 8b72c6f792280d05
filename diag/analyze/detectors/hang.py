"""Hangs: a rank stopped issuing collectives while its peers went on and now wait.

The ranks that wait are victims; the culprit is the rank they wait for. ``detect`` reads
ddiag's own records: the event logs plus heartbeats first, Flight Recorder dumps as the
fallback (and the only source for runs without ddiag's decorator); the culprit is the rank
furthest behind in the group's sequence. ``detect_text`` reads text logs: the ranks that
time out name the collective, and this names the rank they waited for and why it did not
come (it hung, it issued a different collective, or it was busy for longer than the
process-group timeout).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from diag.analyze import stackgroups
from diag.analyze.catalog import collective_frames
from diag.analyze.detectors.common import (SignalIndex, blocking_frame, closed_ranks,
                                           comm_wait_frame, earliest, exception_ranks, fmt_ranks,
                                           index, make, own_failures, ranks_seen,
                                           stack_evidence, world_size)
from diag.analyze.inputs import Inputs
from diag.analyze.collops import NO_INT
from diag.analyze.progress import PENDING, CollOp, RankSeqs, group_members, groups_of, heartbeats
from diag.analyze.signals import Signal
from diag.format.heartbeat import RankBeat
from diag.format.names import STEP_PHASES
from diag.verdict import Basis, Category, Culprit, Evidence, Finding, Severity, graded

# =======================================================================================
# From event logs, heartbeats and Flight Recorder dumps


def detect(inputs: Inputs) -> list[Finding]:
    for source in ("events", "fr"):
        found = [f for group, ranks in groups_of(inputs, source).items()
                 for f in _hang_in_group(inputs, source, group, ranks)]
        if found:
            return _follow_waits(inputs, _lone_collectives(inputs, source, found))
    return []


def _lone_collectives(inputs: Inputs, source: str, found: list[Finding]) -> list[Finding]:
    """A rank that holds a group up while it sits in a collective of another group that
    no other member has reached issued a collective the others never will (a barrier
    inside `if rank == ...`, an extra all_reduce): that is the cause, and the groups
    stuck behind it are its victims."""
    groups = groups_of(inputs, source)
    lone = {}
    for f in found:
        if f.detector == "hangs" and f.root_cause and f.category in (
                Category.RANK_HANG, Category.TIMEOUT_TOO_SHORT):
            for r in f.culprit.ranks:
                if (op := _alone_in(groups, r)) is not None:
                    lone[r] = (op, f)
    if not lone:
        return found
    out = [_lone_finding(inputs, r, op, f) for r, (op, f) in sorted(lone.items())]
    return out + [replace(f, root_cause=False, severity=Severity.ERROR, **graded(Basis.LINE))
                  if f.root_cause and f.detector == "hangs" else f for f in found]


def _alone_in(groups: dict[str, dict[int, RankSeqs]], rank: int) -> CollOp | None:
    """The collective the rank is inside that every other member of its group is behind
    of, and that the group never ran before. A training loop repeats its collectives
    step after step: a rank waiting in the group's usual all_reduce for a slow peer is
    not alone in anything new; a barrier nobody else ever issued is."""
    for ranks in groups.values():
        mine = ranks.get(rank)
        if not mine or len(ranks) < 2:
            continue
        last = mine.last
        op = mine[last]
        if op.state == PENDING and all(
                seqs.last < last for r, seqs in ranks.items() if r != rank) \
                and not _ran_before(ranks, mine, last):
            return op
    return None


def _ran_before(ranks: dict[int, RankSeqs], mine: RankSeqs, last: int) -> bool:
    """Whether any rank issued, before seq ``last``, the same op as ``mine``'s last with
    the same input size where both are known (a heartbeat's pending row may lack the
    size, and has no output side yet)."""
    code, numel = mine.ops[-1], mine.col("in_numel")[-1]
    for seqs in ranks.values():
        same = (seqs.seqs < last) & (seqs.ops == code)
        if numel != NO_INT:
            sizes = seqs.col("in_numel")
            same &= (sizes == numel) | (sizes == NO_INT)
        if same.any():
            return True
    return False


def _lone_finding(inputs: Inputs, rank: int, op: CollOp, held: Finding) -> Finding:
    stacks = stack_evidence(inputs, rank)
    others = (held.details or {}).get("waiting") or []
    missed = (held.details or {}).get("missed_seq")
    instead = (f" instead of the collective #{missed} of group {held.details.get('group')} "
               f"that rank{'s' if len(others) > 1 else ''} {_ranks(others)} "
               f"wait{'' if len(others) > 1 else 's'} in"
               if missed is not None and others else "")
    return Finding(
        category=Category.COLLECTIVE_MISMATCH, severity=Severity.CRITICAL,
        **graded(Basis.MINORITY),
        title=(f"rank {rank} is inside {op.op} #{op.seq} (group {op.group}), which no other "
               f"rank issued{instead}"),
        culprit=Culprit(ranks=(rank,), hosts=_hosts(inputs, [rank])),
        evidence=(op.evidence, *held.evidence[:2], *stacks[:4]),
        fix=(f"rank {rank} runs a collective the others do not: look for a collective under "
             "a rank-dependent branch (e.g. a barrier or all_reduce inside `if rank == 0:` "
             "such as a checkpoint save or logging) and run it on every rank of the group, "
             "or on none"),
        detector="hangs", details={"group": op.group, "seq": op.seq, "op": op.op})


def _follow_waits(inputs: Inputs, found: list[Finding]) -> list[Finding]:
    """Several groups each held up by a different rank (a pipeline: a stage stops, its
    neighbour waits on it in a p2p recv and so never reaches its own data-parallel
    all_reduce). A rank whose stack is inside torch.distributed waits on someone else;
    when another held-up group's rank is not, that one is the culprit."""
    culprits = [f for f in found if f.detector == "hangs" and f.root_cause
                and f.category in (Category.RANK_HANG, Category.TIMEOUT_TOO_SHORT)]
    if len(culprits) < 2:
        return found
    waits = {id(f): [w for r in f.culprit.ranks if (w := comm_wait_frame(inputs, r))]
             for f in culprits}
    free = [f for f in culprits if len(waits[id(f)]) < len(f.culprit.ranks)]
    if not free or len(free) == len(culprits):
        return found
    return [_waiting_too(f, waits[id(f)][0]) if f in culprits and f not in free else f
            for f in found]


def _waiting_too(finding: Finding, frame: str) -> Finding:
    return replace(finding, severity=Severity.ERROR, **graded(Basis.LINE), root_cause=False,
                   title=f"{finding.title.split('; its stack')[0]}; it is itself blocked in "
                         f"{frame}, waiting on another rank")


def _hang_in_group(inputs: Inputs, source: str, group: str,
                   ranks: dict[int, RankSeqs]) -> list[Finding]:
    members = group_members(inputs, group, set(ranks)) | set(ranks)
    last = {r: ranks[r].last if r in ranks else 0 for r in members}
    top = max(last.values())
    laggards = sorted(r for r in members if last[r] < top)
    raised = exception_ranks(inputs)
    finished = closed_ranks(inputs) - raised if source == "events" else set()
    # Ahead and not finished cleanly: inside the collective, past an async launch and
    # blocked in its wait (DDP, NCCL), or timed out there and raised.
    waiting = sorted(r for r in members if last[r] == top and (
        _pending(ranks.get(r, {}), last[r]) or (source == "events" and r not in finished)))
    if not laggards or not waiting or set(laggards) & raised:
        return []  # nobody is stuck, or a crash explains it (failures detector)
    if set(laggards) <= finished:
        return [_waiting_alone(group, waiting, ranks, laggards)]
    behind = min(last[r] for r in laggards)
    culprits = [r for r in laggards if last[r] == behind]
    missed = _first_op_at(ranks, behind + 1)
    return [_culprit_finding(inputs, source, group, culprits, missed, waiting),
            _victim_finding(group, waiting, ranks, missed)]


def _waiting_alone(group: str, waiting: list[int], ranks, finished: list[int]) -> Finding:
    """The others finished cleanly and these ranks still wait in one more collective:
    they issued a collective nobody else did (the rank-0-only barrier)."""
    rows = [ranks[r][ranks[r].last] for r in waiting]
    ops = ", ".join(f"rank {row.rank}: {row.op} #{row.seq}" for row in rows)
    return Finding(
        category=Category.COLLECTIVE_MISMATCH, severity=Severity.CRITICAL,
        **graded(Basis.MINORITY),
        title=(f"ranks {_ranks(waiting)} wait in a collective that ranks {_ranks(finished)} "
               f"never issued; they finished cleanly ({ops})"),
        culprit=Culprit(ranks=tuple(waiting)), evidence=tuple(row.evidence for row in rows),
        fix=("the waiting rank runs a collective the others do not (e.g. a barrier inside "
             "`if rank == 0:` such as a checkpoint save): run it on every rank or not at all"),
        detector="hangs", details={"group": group},
    )


def _pending(seqs: RankSeqs | dict, last: int) -> bool:
    return bool(seqs) and seqs[last].state == PENDING


def _first_op_at(ranks: dict[int, RankSeqs], seq: int) -> CollOp | None:
    return next((s[seq] for s in ranks.values() if seq in s), None)


def _culprit_finding(inputs: Inputs, source: str, group: str, culprits: list[int],
                     missed: CollOp | None, waiting: list[int]) -> Finding:
    beats = heartbeats(inputs)
    span = _open_span(beats, culprits)
    op = f"{missed.op} #{missed.seq}" if missed else "the next collective"
    evidence = [missed.evidence] if missed else []
    evidence += [Evidence(beats[r].path, None, _beat_text(beats[r]))
                 for r in culprits if r in beats]
    stacks = [e for r in culprits for e in stack_evidence(inputs, r)]
    frame = blocking_frame(stacks)
    where = f"; its stack is in {frame.text}" if frame else ""
    busy = span is not None
    return Finding(
        category=Category.TIMEOUT_TOO_SHORT if busy else Category.RANK_HANG,
        severity=Severity.CRITICAL, **graded(Basis.MINORITY),
        title=(f"rank{'s' if len(culprits) > 1 else ''} {_ranks(culprits)} never joined "
               f"{op} (group {group}); ranks {_ranks(waiting)} wait in it"
               + (f"; busy in span '{span}'" if busy else "") + where),
        culprit=Culprit(ranks=tuple(culprits), hosts=_hosts(inputs, culprits)),
        evidence=tuple(evidence + stacks[:6]),
        fix=(f"rank {culprits[0]} is busy in '{span}' longer than the process-group "
             "timeout: raise timeout= in init_process_group, or do that work before "
             "init / on every rank" if busy else
             f"find why rank {culprits[0]} stopped before {op}: look at its stack "
             "(py-spy dump --pid PID); common causes are a deadlocked DataLoader worker, "
             "a rank-conditional code path, or a blocking I/O call"),
        detector="hangs", details={"group": group, "source": source, "missed_seq":
                                   missed.seq if missed else None, "waiting": waiting},
    )


def _victim_finding(group: str, waiting: list[int], ranks, missed: CollOp | None) -> Finding:
    ev = [ranks[r][ranks[r].last].evidence for r in waiting[:8]]
    return Finding(
        category=Category.RANK_HANG, severity=Severity.ERROR, **graded(Basis.MINORITY),
        title=f"ranks {_ranks(waiting)} are waiting in group {group} (victims, not causes)",
        culprit=Culprit(), evidence=tuple(ev), fix="nothing to fix on these ranks",
        detector="hangs", root_cause=False, details={"waiting": waiting},
    )


def _open_span(beats: dict[int, RankBeat], culprits: list[int]) -> str | None:
    for r in culprits:
        span = beats[r].span if r in beats else None
        if span and span not in STEP_PHASES:
            return span
    return None


def _beat_text(beat: RankBeat) -> str:
    return (f"rank {beat.rank} heartbeat: step {beat.step}, "
            f"in_step={beat.in_step}, seq={dict(beat.seqs)}, "
            f"pending={beat.pending}, span={beat.span}")


def _hosts(inputs: Inputs, ranks: list[int]) -> tuple[str, ...]:
    hosts = {inputs.events[r].header.get("host") for r in ranks
             if r in inputs.events and inputs.events[r].header}
    return tuple(sorted(h for h in hosts if h))


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


# =======================================================================================
# From text logs (signals parsed by diag/analyze/textlog.py)

DETECTOR = "logs_hangs"  # the `detector` of the text-log findings
_TRAINING_WORDS = ("epoch", "train", "fit", "iteration", "step", "batch")
_LOCAL_NCCL_ERRORS = ("invalid usage", "invalid argument", "unhandled cuda error", "internal error")
_TIMEOUT_WORDS = ("timed out", "Timed out", "Timeout", "Watchdog", "watchdog", "gloo/transport")
_NAMING_KINDS = ("monitored_barrier_failed", "desync_report", "fr_missing_ranks", "blamed_rank",
                 "watchdog_status", "nccl_ras")
SHORT_TIMEOUT_MS = 120_000  # torch's defaults are 10 and 30 min; a 2-min one is a choice
# torch's default process-group timeouts: 10 min for NCCL since 2.2, 30 min before and for
# the other backends (torch/distributed/constants.py); HF and accelerate default to 30 min
DEFAULT_TIMEOUTS_MS = (600_000, 1_800_000)
MIN_SPEAKERS = 4  # ranks that print before one silent rank says something
EARLY_SEQ = 5  # the first few collectives of a group: setup syncs, before any training step
# hardware_error kinds that mean the GPU itself is gone or broken
_BROKEN_GPU = frozenset({"fell_off_bus", "gpu_lost", "ecc"})


@dataclass(frozen=True)
class Wait:
    """One rank seen waiting in (or failing out of) a collective."""

    rank: int | None
    seq: int | None
    op: str | None
    numel: int | None
    timeout_ms: int | None
    pg: int | None
    sig: Signal


@dataclass
class Verdict:
    category: Category
    culprits: tuple
    basis: Basis
    reason: str
    signals: list = field(default_factory=list)
    root_cause: bool = True
    # WARN when there is no culprit: a more specific cause, if any, should rank first
    severity: Severity = Severity.ERROR


def detect_text(inputs) -> list[Finding]:
    idx = index(inputs)
    waits = collect_waits(idx)
    if not waits and not idx.has(*_NAMING_KINDS):
        return _silent_rank(idx)
    verdict = judge(idx, waits)
    return [_root_finding(verdict, waits)] + ([_symptom_finding(verdict, waits)] if waits else [])


# ---------------------------------------------------------------------------------------
# Who waited


def _silent_rank(idx: SignalIndex) -> list[Finding]:
    """Nothing timed out, but the log's lines come from every rank of the job save one:
    a job where each rank prints and one never does has that rank stopped (the per-rank
    print is how a hang is bisected by hand). Said as a guess, at warning level."""
    said: Counter = Counter()
    for s in idx.of("rank_lines"):
        said.update(s.fields["ranks"])
    top = max(said, default=-1)
    world = max(world_size(idx) or 0, top + 1)
    silent = set(range(world)) - set(said)
    if len(said) < MIN_SPEAKERS or len(silent) != 1:
        return []
    rank = silent.pop()
    title = (f"rank {rank} printed nothing while {fmt_ranks(said)} printed "
             f"{sum(said.values())} lines: it is the rank that stopped")
    fix = (f"See where rank {rank} is: `py-spy dump --pid <pid>` on it (or `ddiag stacks "
           "--pid <launcher pid>`); usual causes are a stuck DataLoader worker, a deadlock or a "
           "lost GPU. If that rank only logs less, this is no hang: the log says nothing else.")
    return [make(Category.RANK_HANG, title, fix, DETECTOR, Basis.HEURISTIC,
                 idx.of("rank_lines")[:1], ranks=[rank], severity=Severity.WARN)]


def collect_waits(idx: SignalIndex) -> list[Wait]:
    waits = [_watchdog_wait(s) for s in idx.of("watchdog_timeout")]
    waits += [_bare_wait(s) for s in idx.of("gloo_error") if s.fields.get("what") == "timeout"]
    waits += [_bare_wait(s) for s in idx.of("store_wait_timeout")]
    waits += [_bare_wait(s) for s in idx.of("exception") if _collective_exception(s)]
    if not waits:  # only the watchdog's C++ frames were pasted: a timeout, no detail
        waits = [_bare_wait(s) for s in idx.of("watchdog_frame")]
    if waits:
        waits += _elastic_victims(idx)
    return waits


def _watchdog_wait(s: Signal) -> Wait:
    f = s.fields
    return Wait(s.rank, f.get("seq"), f.get("op"), f.get("numel_in"), f.get("timeout_ms"),
                f.get("pg"), s)


def _bare_wait(s: Signal) -> Wait:
    return Wait(s.rank, None, None, 1 if s.fields.get("tiny_tensor") else None,
                _gloo_timeout_ms(s), None, s)


# gloo's UnboundBuffer::waitRecv/waitSend: "Timed out waiting %dms for recv operation"
_GLOO_WAITED = re.compile(r"Timed out waiting (\d{1,12})ms for (?:recv|send)")


def _gloo_timeout_ms(s: Signal) -> int | None:
    """The process-group timeout a gloo wait ran out, from its own message."""
    m = _GLOO_WAITED.search(s.text) if s.kind == "gloo_error" else None
    return int(m.group(1)) if m else None


def _collective_exception(s: Signal) -> bool:
    # a rank that cannot connect to the store never got as far as a collective
    text = s.fields.get("message", "")
    if "connect" in text or "rendezvous" in text.lower() or "store based barrier" in text:
        return False
    # NCCL refused or failed the call on this rank itself (ncclGetErrorString's local
    # codes): the rank failed, it did not wait for another
    if any(code in text for code in _LOCAL_NCCL_ERRORS):
        return False
    return bool(s.fields.get("in_collective")) or any(w in text for w in _TIMEOUT_WORDS)


def _elastic_victims(idx: SignalIndex) -> list[Wait]:
    # torchrun's failure list, when the failures are collective errors: those ranks waited.
    # A SIGKILL (-9), or a rank with an error of its own, died by itself: not a victim; a
    # SIGTERM (-15) is the agent closing the rest once one failed: where it was is unknown.
    own = {f.rank for f in own_failures(idx)}
    return [Wait(s.rank, None, None, None, None, None, s) for s in idx.of("elastic_failure")
            if s.fields.get("exitcode") not in (-9, -15)
            and s.fields.get("signal") not in ("SIGKILL", "SIGTERM") and s.rank not in own]


# ---------------------------------------------------------------------------------------
# Whom they waited for


def judge(idx: SignalIndex, waits: list[Wait]) -> Verdict:
    victims = {w.rank for w in waits if w.rank is not None}
    world = world_size(idx)
    for rule in (_failed_first, _broken_gpu, _ras_report, _monitored_barrier, _desync_report,
                 _traceback_sides, _disagreement, _enqueue_gap, _lone_after_end, _absent_ranks, _lone_waiter,
                 _early_small_sync, _rank0_work, _small_sync):
        verdict = rule(idx, waits, victims, world)
        if verdict:
            return verdict
    reason = "no rank is visibly missing from the timeouts (the log may hold only some ranks)"
    if waits and all(w.sig.kind == "watchdog_frame" for w in waits):
        reason = ("a collective timed out (only the watchdog's C++ frames are in the log: "
                  "they name neither the collective nor the rank that did not arrive)")
    return Verdict(Category.RANK_HANG, (), Basis.HEURISTIC, reason, severity=Severity.WARN)


def _failed_first(idx, waits, victims, world) -> Verdict | None:
    failures = [f for f in own_failures(idx) if f.rank is not None and f.rank not in victims]
    first = earliest(failures)
    if first is None:
        return None
    reason = f"rank {first.rank} failed first ({first.kind}); the others timed out waiting for it"
    return Verdict(Category.RANK_HANG, (first.rank,), Basis.LINE, reason, [first],
                   root_cause=False)


def _broken_gpu(idx, waits, victims, world) -> Verdict | None:
    """A GPU that fell off the bus, lost by NVML, or an Xid on a host: the rank on it stopped
    and the others timed out waiting. The hardware is the cause (the failures detector
    reports it); which rank was on that GPU the log seldom says, so none is named."""
    broken = idx.of("xid") + [s for s in idx.of("hardware_error")
                              if s.fields.get("what") in _BROKEN_GPU]
    if not broken:
        return None
    silent = tuple(sorted(set(range(world)) - victims)) if world and victims else ()
    note = f"; {fmt_ranks(silent)} went silent" if 0 < len(silent) <= len(victims) else ""
    where = f" on {broken[0].host}" if broken[0].host else ""
    reason = (f"a GPU failed{where} ({broken[0].text.strip()[:100]}){note}: the timeouts "
              "follow from it")
    return Verdict(Category.RANK_HANG, (), Basis.LINE, reason, broken[:2], root_cause=False)


def _ras_report(idx, waits, victims, world) -> Verdict | None:
    """NCCL's RAS report compares the ranks' own counters: a rank that launched fewer
    operations of a collective than the rest never issued the one they wait in; one that
    launched more issued an extra one; one missing from the report, or in another state
    (NOCOMM, INIT, ABORT), stopped."""
    report = ras_outliers(idx.of("nccl_ras"))
    if report is None:
        return None
    if report.behind:
        return _classified(idx, waits, victims, tuple(sorted(report.behind)), Basis.EMITTER,
                           f"NCCL's RAS report: {report.describe(report.behind)}", report.sigs,
                           named=True)
    if report.ahead:
        return Verdict(Category.COLLECTIVE_MISMATCH, tuple(sorted(report.ahead)), Basis.EMITTER,
                       f"NCCL's RAS report: {report.describe(report.ahead)}", report.sigs)
    stopped = {**report.status, **{r: "missing from the report" for r in report.missing}}
    if not stopped:
        return None
    what = ", ".join(f"rank {r}: {s}" for r, s in sorted(stopped.items())[:8])
    return _classified(idx, waits, victims, tuple(sorted(stopped)), Basis.EMITTER,
                       f"NCCL's RAS report singles out {what}", report.sigs, named=True)


@dataclass
class RasReport:
    """What the ranks of NCCL's RAS report disagree on. Counts are per collective kind."""

    behind: dict = field(default_factory=dict)  # rank -> (op, its count, the others')
    ahead: dict = field(default_factory=dict)
    status: dict = field(default_factory=dict)  # rank -> its state, when not the others'
    missing: set = field(default_factory=set)
    sigs: list = field(default_factory=list)

    def describe(self, ranks: dict) -> str:
        return "; ".join(f"rank {r} launched {n} {op} operations, the others {top}"
                         for r, (op, n, top) in sorted(ranks.items())[:6])


def ras_outliers(sigs: list[Signal]) -> RasReport | None:
    """Read the report's lines in order: a rank line means what the section and the
    "N ranks have ..." line above it say (the majority is listed as a count, the outliers
    rank by rank)."""
    if not sigs:
        return None
    report, section, blocks = RasReport(), None, []
    for s in sigs:
        f, what = s.fields, s.fields.get("what")
        if what == "section":
            section = f.get("state")
            blocks.append(None)  # a new communicator: no block until it says what differs
        elif what == "differ":
            blocks.append({"op": f.get("op") or "status", "groups": [], "ranks": {},
                           "value": None})
        block = blocks[-1] if blocks else None
        if what == "group" and block is not None:
            block["value"] = f.get("status") or f.get("count") or 0
            block["groups"].append((f.get("n") or 0, block["value"]))
        elif what == "rank" and s.rank is not None and section == "INCOMPLETE":
            report.missing.add(s.rank)
        elif what == "rank" and s.rank is not None and block is not None:
            own = f.get("status") or f.get("count") or (0 if f.get("none") else None)
            block["ranks"][s.rank] = block["value"] if own is None else own
        else:
            continue
        report.sigs.append(s)
    for block in filter(None, blocks):
        _ras_block(report, block)
    return report


def _ras_block(report: RasReport, block: dict) -> None:
    ranks = block["ranks"]
    if block["groups"]:
        top = max(block["groups"], key=lambda g: g[0])[1]
    elif ranks:
        top = Counter(ranks.values()).most_common(1)[0][0]
    else:
        return
    for rank, value in ranks.items():
        if value == top:
            continue
        if block["op"] == "status":
            report.status[rank] = value
        elif isinstance(value, int) and isinstance(top, int):
            (report.behind if value < top else report.ahead)[rank] = (block["op"], value, top)


def _traceback_sides(idx, waits, victims, world) -> Verdict | None:
    """The ranks' tracebacks end waiting in different collectives (one in a barrier its
    own code called, the other in DDP's buffer broadcast): the verdict ``ddiag stacks``
    gives on live stacks (stackgroups), read from the tracebacks the timeouts printed."""
    last: dict[int, Signal] = {}
    for s in idx.of("exception"):
        if s.rank is not None and s.fields.get("in_collective") and s.fields.get("stack"):
            last[s.rank] = s
    if len(last) < 2:
        return None
    stacks = [stackgroups.Stack(rank, tuple(
        stackgroups.Frame(f["func"], f["file"], f.get("line"))
        for f in reversed(s.fields["stack"])), s.file, s.line, s.host)
        for rank, s in sorted(last.items())]
    found = stackgroups.odd_ones(stackgroups.group(stacks))
    if found is None or found.category is not Category.COLLECTIVE_MISMATCH:
        return None
    return Verdict(found.category, found.culprit.ranks, found.basis or Basis.HEURISTIC,
                   found.title, list(last.values()), severity=Severity.CRITICAL)


def _monitored_barrier(idx, waits, victims, world) -> Verdict | None:
    sigs = idx.of("monitored_barrier_failed")
    ranks = {r for s in sigs for r in s.fields.get("ranks", [])}
    if not ranks:
        return None
    return _classified(idx, waits, victims, tuple(sorted(ranks)), Basis.EMITTER,
                       f"{fmt_ranks(ranks)} failed to reach monitoredBarrier", sigs, named=True)


def _desync_report(idx, waits, victims, world) -> Verdict | None:
    sigs = idx.of("desync_report", "fr_missing_ranks", "blamed_rank")
    ranks = {r for s in sigs for r in s.fields.get("ranks", [])}
    if not ranks:
        return None
    reason = f"torch's own diagnostics name {fmt_ranks(ranks)} as the rank the others waited for"
    return _classified(idx, waits, victims, tuple(sorted(ranks)), Basis.EMITTER, reason, sigs,
                       named=True)


def _disagreement(idx, waits, victims, world) -> Verdict | None:
    """Ranks that time out on different collectives: the odd ones out are the culprits."""
    first = _first_wait_per_rank(waits)
    if len(first) < 2:
        return None
    for attr, category in (("seq", None), ("op", Category.COLLECTIVE_MISMATCH),
                           ("numel", Category.SHAPE_MISMATCH)):
        verdict = _odd_ones_out(first, attr, category)
        if verdict:
            return verdict
    return None


def _enqueue_gap(idx, waits, victims, world) -> Verdict | None:
    """Ranks whose watchdog status shows a different last enqueued collective than the rest:
    behind means it never issued the collective the others wait in."""
    last: dict[int, Wait] = {}
    for s in idx.of("watchdog_status"):
        enq = s.fields.get("last_enqueued")
        if s.rank is not None and enq is not None and (s.rank not in last
                                                       or enq > last[s.rank].seq):
            last[s.rank] = Wait(s.rank, enq, None, None, None, s.fields.get("pg"), s)
    if len(last) < 2:
        return None
    verdict = _odd_ones_out(last, "seq", None) or _behind_the_timed_out(last)
    if verdict:
        verdict.reason = verdict.reason.replace("timed out on a different sequence number than",
                                                "last enqueued an earlier collective than")
    return verdict


# torch's dump signal: "... due to a collective timeout from this local rank" / "from rank 3"
_DUMP_FROM = re.compile(r"collective timeout from\s+(?:rank\s+(?P<rank>\d+)|this local rank)")


def _behind_the_timed_out(last: dict[int, Wait]) -> Verdict | None:
    """No majority (two ranks, or an even split), but torch's dump lines name the rank
    whose watchdog fired first: it enqueued the collective and waited, so it is a victim;
    the ranks that enqueued less than it never issued that collective."""
    timed_out = set()
    for rank, w in last.items():
        m = _DUMP_FROM.search(w.sig.text)
        if m:
            timed_out.add(int(m.group("rank")) if m.group("rank") else rank)
    timed_out &= set(last)
    low = min(w.seq for w in last.values())
    behind = sorted(r for r, w in last.items() if w.seq == low)
    if not timed_out or timed_out & set(behind) or len(behind) == len(last):
        return None
    reason = (f"{fmt_ranks(behind)} last enqueued collective #{low}, behind "
              f"{fmt_ranks(timed_out)} whose watchdog fired")
    return Verdict(Category.RANK_HANG, tuple(behind), Basis.MINORITY, reason,
                   [last[r].sig for r in [*behind, *sorted(timed_out)]])


def _first_wait_per_rank(waits: list[Wait]) -> dict[int, Wait]:
    first: dict[int, Wait] = {}
    for w in waits:
        if w.rank is None or w.seq is None:
            continue
        if w.rank not in first or w.seq < first[w.rank].seq:
            first[w.rank] = w
    return first


def _odd_ones_out(first: dict[int, Wait], attr: str, category: Category | None) -> Verdict | None:
    groups: dict = defaultdict(list)
    for rank, w in first.items():
        groups[(w.pg, getattr(w, attr))].append(rank)
    by_pg = Counter(pg for pg, _ in groups)
    if all(n < 2 for n in by_pg.values()):
        return None
    (major_key, major), *rest = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    rest = [(k, r) for k, r in rest if k[0] == major_key[0]]
    if not rest or any(len(r) >= len(major) for _, r in rest):
        return None
    odd = tuple(sorted(r for _, ranks in rest for r in ranks))
    sigs = [first[r].sig for r in odd] + [first[major[0]].sig]
    if category is None:  # by seq: ahead means an extra collective, behind means stuck
        ahead = all((k[1] or 0) > (major_key[1] or 0) for k, _ in rest)
        category = Category.COLLECTIVE_MISMATCH if ahead else Category.RANK_HANG
    what = {"seq": "sequence number", "op": "collective", "numel": "tensor size"}[attr]
    reason = f"{fmt_ranks(odd)} timed out on a different {what} than {fmt_ranks(major)}"
    return Verdict(category, odd, Basis.MINORITY, reason, sigs)


def _absent_ranks(idx, waits, victims, world) -> Verdict | None:
    if not world or not victims:
        return None
    if len(victims) == 1 and not idx.has("world_size", "nccl_init", "elastic_failure"):
        return None  # one rank's paste: its number alone says nothing of the others
    absent = set(range(world)) - victims
    if not absent or len(absent) > len(victims):
        return None
    reason = f"{fmt_ranks(victims)} timed out in a collective that {fmt_ranks(absent)} never joined"
    return _classified(idx, waits, victims, tuple(sorted(absent)), Basis.MINORITY, reason, [])


def _lone_after_end(idx, waits, victims, world) -> Verdict | None:
    # training finished, so the ranks missing from the timeouts exited: not culprits
    return _lone_waiter(idx, waits, victims, world) if idx.has("training_end") else None


def _lone_waiter(idx, waits, victims, world) -> Verdict | None:
    """One rank alone in a barrier after the others finished: it issued a collective that
    only it calls (a barrier inside ``if rank == 0:``)."""
    if len(victims) != 1:
        return None
    rank = next(iter(victims))
    ends = idx.of("training_end")
    barrier = _control_collective(idx, waits)
    # "alone" needs positive evidence: the loop's end, or other ranks' lines in the log
    # (they were there and did not wait); one rank's paste says nothing about the others
    if not (ends or (barrier and ranks_seen(idx) - victims)):
        return None
    basis = Basis.LINE if ends and barrier else Basis.HEURISTIC
    why = "waits alone in a barrier-like collective" + (" after training finished" if ends else "")
    return Verdict(Category.COLLECTIVE_MISMATCH, (rank,), basis, f"rank {rank} {why}",
                   ends[:2])


def _early_small_sync(idx, waits, victims, world) -> Verdict | None:
    """Every rank that timed out did so in one of the group's first collectives, a flag or
    size sync (a barrier, a few elements), after torch's default timeout, and nothing says
    a rank died or diverged: the ranks were busy with work of their own (generation,
    preprocessing, a download) for longer than the default, which is too short for it."""
    sync = _early_default_sync(waits, world)
    if sync is None or (len(victims) > 1 and world and victims >= set(range(world))):
        return None  # every rank waits in it: none was off doing work of its own
    busy = _busy_progress(idx, victims) or idx.of("activity")[-2:]
    culprits = _printing_rank(busy, victims)
    who = f"; rank {culprits[0]}, which prints the work, did not arrive" if culprits else ""
    reason = (f"{fmt_ranks(victims) if victims else 'the ranks'} timed out in {sync}, with "
              f"no rank reported failing or running another collective{who}")
    return Verdict(Category.TIMEOUT_TOO_SHORT, culprits,
                   Basis.LINE if busy else Basis.HEURISTIC, reason,
                   busy[-3:])


def _printing_rank(busy: list[Signal], victims: set) -> tuple[int, ...]:
    """Rank 0 when the busy lines carry no rank and the ranks that timed out are others:
    rank-0-first work (tokenizing, clustering, evaluation, saving) is printed the way
    training scripts print, by rank 0 alone, and rank 0 is the one not waiting."""
    if not busy or not victims or 0 in victims or any(s.rank is not None for s in busy):
        return ()
    return (0,)


def _rank0_work(idx, waits, victims, world) -> Verdict | None:
    """The ranks that timed out are not rank 0, and before the timeouts the log shows work
    that training scripts do on rank 0 alone (validation, evaluation, saving, generating),
    in lines of no rank or of rank 0: rank 0 was busy with it, not stuck."""
    if not victims or 0 in victims:
        return None
    first = min((w.sig for w in waits), key=lambda s: (s.file, s.line))
    work = [a for a in idx.of("activity") if a.file == first.file and a.line < first.line
            and a.rank in (None, 0)]
    if not work:
        return None
    doing = work[-1]
    reason = (f"{fmt_ranks(victims)} timed out while rank 0 was '{doing.fields['verb']}' "
              "(work a script does on rank 0 alone), at the process-group timeout")
    return Verdict(Category.TIMEOUT_TOO_SHORT, (0,), Basis.HEURISTIC, reason, [doing])


def _small_sync(idx, waits, victims, world) -> Verdict | None:
    """Every timeout is in one sync of a few elements (a barrier, a flag or a metric's
    all-reduce) and nothing says a rank failed or diverged. Scripts put such syncs around
    work some ranks do alone (saving, evaluating, preparing data, mostly on rank 0): the
    ranks that arrived waited out the timeout while the others worked, and a stuck rank
    is rarer there than a busy one (a rank stuck mid-step leaves the others in the next
    step's gradient all-reduce, not in a sync). Not when every rank waits in it (nobody was
    elsewhere) or the timeout was chosen (then it was sized for the work). Rank 0 is named
    only when it is not among the waiters."""
    sync = _one_sync(waits, world)
    everyone = bool(world) and victims >= set(range(world))
    if sync is None or everyone or any(w.timeout_ms not in DEFAULT_TIMEOUTS_MS for w in waits
                                      if w.sig.kind == "watchdog_timeout"):
        return None
    culprits = (0,) if victims and 0 not in victims else ()
    who = "rank 0, not among them, was" if culprits else "a rank was"
    reason = (f"{fmt_ranks(victims) if victims else 'the ranks'} timed out in {sync}, a sync "
              f"of a few elements, with no rank reported failing: {who} likely busy with "
              "work of its own (saving, evaluating, preparing data) past the timeout")
    return Verdict(Category.TIMEOUT_TOO_SHORT, culprits, Basis.HEURISTIC, reason,
                   [w.sig for w in waits[:2]], severity=Severity.WARN)


def _one_sync(waits: list[Wait], world: int | None) -> str | None:
    """'<op> #<seq> (<n> element(s))' when the timed-out collectives are all one small
    sync; None otherwise."""
    timed = [w for w in waits if w.seq is not None and w.sig.kind == "watchdog_timeout"]
    if not timed or len({(w.seq, w.op, w.pg) for w in timed}) != 1:
        return None
    w = timed[0]
    small = (w.numel is not None and w.numel <= max(world or 0, 1)) or \
        (w.op or "").upper().lstrip("_") == "BARRIER"
    return f"{w.op} #{w.seq} ({w.numel} element(s))" if small else None


def _early_default_sync(waits: list[Wait], world: int | None) -> str | None:
    """'<op> #<seq> ...' when the timed-out collectives are all one early, small sync that
    hit a default timeout; None otherwise."""
    timed = [w for w in waits if w.seq is not None and w.sig.kind == "watchdog_timeout"]
    if not timed or len({(w.seq, w.op, w.pg) for w in timed}) != 1:
        return None
    w = timed[0]
    small = (w.numel is not None and w.numel <= max(world or 0, 1)) or \
        (w.op or "").upper().lstrip("_") == "BARRIER"
    if w.seq > EARLY_SEQ or not small or w.timeout_ms not in DEFAULT_TIMEOUTS_MS:
        return None
    return (f"{w.op} #{w.seq} of its group ({w.numel} element(s)), a sync right after startup, "
            f"at torch's default timeout of {w.timeout_ms // 60_000} min")


# ---------------------------------------------------------------------------------------
# Why the culprit did not come


def _classified(idx, waits, victims, culprits, basis, reason, sigs,
                named: bool = False) -> Verdict:
    """The culprit is known; its category comes from what it was doing. ``named``: torch
    itself named the rank that did not arrive (monitoredBarrier, desync debug), so the
    barrier-shape of the collective says nothing about a mismatch. What it was doing is
    read from lines around it: no surer than that (``Basis.LINE``) or a guess."""
    busy = _busy_progress(idx, victims)
    if busy:
        return Verdict(Category.TIMEOUT_TOO_SHORT, culprits, min(basis, Basis.LINE),
                       f"{reason}, while progress lines show it still working", sigs + busy[-3:])
    doing = _busy_activity(idx, culprits, waits)
    if doing:
        return Verdict(Category.TIMEOUT_TOO_SHORT, culprits, Basis.HEURISTIC,
                       f"{reason}; its last words were '{doing.fields['verb']}'", sigs + [doing])
    short = [w for w in waits if w.timeout_ms and w.timeout_ms <= SHORT_TIMEOUT_MS]
    if short:
        seconds = short[0].timeout_ms // 1000
        return Verdict(Category.TIMEOUT_TOO_SHORT, culprits, Basis.HEURISTIC,
                       f"{reason}; the process-group timeout is only {seconds} s", sigs)
    if any(s.fields.get("setup") for s in sigs):
        return Verdict(Category.TIMEOUT_TOO_SHORT, culprits, Basis.HEURISTIC,
                       f"{reason}; it never created the group's communicator (its first "
                       "collective), and nothing says it failed: busy with startup work of "
                       "its own (data preparation, a download) past the timeout", sigs)
    sync = None if named else _early_default_sync(waits, world_size(idx))
    if sync:
        return Verdict(Category.TIMEOUT_TOO_SHORT, culprits, Basis.HEURISTIC,
                       f"{reason}; it is {sync}: busy with startup work of its own", sigs)
    if not named and _control_collective(idx, waits):
        why = "the collective is a barrier or flag sync, which a rank-conditional path adds"
        return Verdict(Category.COLLECTIVE_MISMATCH, culprits, min(basis, Basis.LINE),
                       f"{reason}; {why}", sigs)
    return Verdict(Category.RANK_HANG, culprits, basis, reason, sigs)


def _busy_progress(idx: SignalIndex, victims: set) -> list[Signal]:
    """Progress lines that advance, from a rank that is not waiting: non-training work
    (data preparation, a download) that outlasts the timeout."""
    groups: dict = defaultdict(list)
    for p in idx.of("progress"):
        if p.rank not in victims and p.fields.get("style") == "bar":
            groups[(p.file, p.rank, p.fields.get("desc", ""))].append(p)
    for (_, _, desc), sigs in groups.items():
        counts = [s.fields.get("n", 0) for s in sigs]
        training = any(w in desc.lower() for w in _TRAINING_WORDS)
        if len(sigs) >= 2 and max(counts) > min(counts) and not training:
            return sigs
    return []


def _busy_activity(idx: SignalIndex, culprits: tuple, waits: list[Wait]) -> Signal | None:
    """The culprit's last line before the timeouts says it was doing legitimate work
    (saving, evaluating, downloading ...). Unranked lines count only right before the
    first timeout, where the busy rank's output usually sits."""
    if not waits:
        return None
    first = min(waits, key=lambda w: (w.sig.file, w.sig.line)).sig
    before = [a for a in idx.of("activity") if a.file == first.file and a.line < first.line]
    mine = [a for a in before if a.rank is not None and a.rank in culprits]
    if mine:
        return mine[-1]
    near = [a for a in before if a.rank is None and first.line - a.line <= 3]
    return near[-1] if near else None


def _control_frame(sig: Signal) -> bool:
    """A traceback through a barrier, an object collective or a group's creation (torch's
    barrier is a 1-element ALLREDUCE: the op alone does not say it)."""
    stack = sig.fields.get("stack", []) if sig.kind == "exception" else []
    return any(f.kind in collective_frames.CONTROL_KINDS
               for f in collective_frames.in_stack(stack))


def _control_collective(idx: SignalIndex, waits: list[Wait]) -> bool:
    for w in waits:
        if (w.numel is not None and w.numel <= 1) or (w.op or "").upper().lstrip("_") == "BARRIER":
            return True
        if w.sig.fields.get("tiny_tensor") or _control_frame(w.sig):
            return True
    return False


# ---------------------------------------------------------------------------------------
# Findings

_FIXES = {
    Category.RANK_HANG: (
        "Find what {who} was doing when the others timed out: `py-spy dump --pid <pid>` on it "
        "while it hangs, or rerun with TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_BUFFER_SIZE=2000 for "
        "Flight Recorder dumps (ddiag analyze reads them). Usual causes: a stuck DataLoader "
        "worker, a deadlock, a lost GPU."),
    Category.COLLECTIVE_MISMATCH: (
        "Make every rank call the same collectives in the same order: look for a barrier, "
        "save_checkpoint, evaluation, new_group or logging call inside `if rank == 0:` (or a "
        "data-dependent branch) on {who}. TORCH_DISTRIBUTED_DEBUG=DETAIL reports the first "
        "mismatching collective."),
    Category.TIMEOUT_TOO_SHORT: (
        "{who} is legitimately busy longer than the process-group timeout: do that work before "
        "init_process_group (or in a separate single-process step), or raise the timeout, e.g. "
        "init_process_group(timeout=timedelta(hours=2)) / DDPStrategy(timeout=...)."),
    Category.SHAPE_MISMATCH: (
        "{who} entered the same collective with a different tensor size: make the shapes agree "
        "(pad variable-length data, or gather sizes first); TORCH_DISTRIBUTED_DEBUG=DETAIL names "
        "the shapes."),
}


def _root_finding(v: Verdict, waits: list[Wait]) -> Finding:
    who = fmt_ranks(v.culprits) if v.culprits else "the rank that never arrived"
    fix = _FIXES.get(v.category, _FIXES[Category.RANK_HANG]).format(who=who)
    sigs = v.signals + [w.sig for w in waits][:6]
    title = f"{v.category.value.replace('_', ' ')}: {v.reason}"
    victims = sorted({w.rank for w in waits if w.rank is not None})
    return make(v.category, title, fix, DETECTOR, v.basis, sigs, ranks=v.culprits,
                root_cause=v.root_cause, severity=v.severity, details={"victims": victims})


def _symptom_finding(v: Verdict, waits: list[Wait]) -> Finding:
    victims = sorted({w.rank for w in waits if w.rank is not None})
    who = fmt_ranks(victims) if victims else "some ranks"
    return make(v.category, f"{who} timed out or failed waiting in {_collective(waits)}",
                "These ranks are victims: see the root-cause finding.", DETECTOR, Basis.MINORITY,
                [w.sig for w in waits], root_cause=False, details={"victims": victims})


def _collective(waits: list[Wait]) -> str:
    timed = next((w for w in waits if w.op or w.seq is not None), None)
    if timed is None:
        return "a collective"
    seq = f" (SeqNum {timed.seq})" if timed.seq is not None else ""
    return f"{timed.op or 'a collective'}{seq}"
