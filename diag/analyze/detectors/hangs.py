"""Hangs: a rank stopped issuing collectives while its peers went on and now wait.

The ranks that wait are victims; the culprit is the rank furthest behind in the
group's sequence. Our event logs plus heartbeats are read first; Flight Recorder dumps
are the fallback (and the only source for runs without ddiag's decorator).
"""

from __future__ import annotations

from dataclasses import replace

from diag.analyze.detectors.common import (blocking_frame, closed_ranks, comm_wait_frame,
                                           exception_ranks, stack_evidence)
from diag.analyze.inputs import Inputs
from diag.analyze.progress import PENDING, CollOp, group_members, groups_of, heartbeats
from diag.verdict import Category, Culprit, Evidence, Finding, Severity
from diag.format.names import STEP_PHASES


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
    return out + [replace(f, root_cause=False, severity=Severity.ERROR, confidence=0.5)
                  if f.root_cause and f.detector == "hangs" else f for f in found]


def _alone_in(groups: dict[str, dict[int, dict[int, CollOp]]], rank: int) -> CollOp | None:
    """The collective the rank is inside that every other member of its group is behind
    of, and that the group never ran before. A training loop repeats its collectives
    step after step: a rank waiting in the group's usual all_reduce for a slow peer is
    not alone in anything new; a barrier nobody else ever issued is."""
    for ranks in groups.values():
        mine = ranks.get(rank)
        if not mine or len(ranks) < 2:
            continue
        last = max(mine)
        op = mine[last]
        earlier = [o for seqs in ranks.values() for s, o in seqs.items() if s < last]
        if op.state == PENDING and not any(_same_kind(op, o) for o in earlier) and all(
                max(seqs, default=0) < last for r, seqs in ranks.items() if r != rank):
            return op
    return None


def _same_kind(a: CollOp, b: CollOp) -> bool:
    """Same op and input size where both are known (a heartbeat's pending row may lack
    the size, and has no output side yet)."""
    return a.op == b.op and (a.in_numel is None or b.in_numel is None
                             or a.in_numel == b.in_numel)


def _lone_finding(inputs: Inputs, rank: int, op: CollOp, held: Finding) -> Finding:
    stacks = stack_evidence(inputs, rank)
    others = (held.details or {}).get("waiting") or []
    missed = (held.details or {}).get("missed_seq")
    instead = (f" instead of the collective #{missed} of group {held.details.get('group')} "
               f"that rank{'s' if len(others) > 1 else ''} {_ranks(others)} "
               f"wait{'' if len(others) > 1 else 's'} in"
               if missed is not None and others else "")
    return Finding(
        category=Category.COLLECTIVE_MISMATCH, severity=Severity.CRITICAL, confidence=0.85,
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
    return replace(finding, severity=Severity.ERROR, confidence=0.5, root_cause=False,
                   title=f"{finding.title.split('; its stack')[0]}; it is itself blocked in "
                         f"{frame}, waiting on another rank")


def _hang_in_group(inputs: Inputs, source: str, group: str,
                   ranks: dict[int, dict[int, CollOp]]) -> list[Finding]:
    members = group_members(inputs, group, set(ranks)) | set(ranks)
    last = {r: max(ranks.get(r, {0: None})) for r in members}
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
    rows = [ranks[r][max(ranks[r])] for r in waiting]
    ops = ", ".join(f"rank {row.rank}: {row.op} #{row.seq}" for row in rows)
    return Finding(
        category=Category.COLLECTIVE_MISMATCH, severity=Severity.CRITICAL, confidence=0.9,
        title=(f"ranks {_ranks(waiting)} wait in a collective that ranks {_ranks(finished)} "
               f"never issued; they finished cleanly ({ops})"),
        culprit=Culprit(ranks=tuple(waiting)), evidence=tuple(row.evidence for row in rows),
        fix=("the waiting rank runs a collective the others do not (e.g. a barrier inside "
             "`if rank == 0:` such as a checkpoint save): run it on every rank or not at all"),
        detector="hangs", details={"group": group},
    )


def _pending(seqs: dict[int, CollOp], last: int) -> bool:
    return bool(seqs) and seqs[last].state == PENDING


def _first_op_at(ranks: dict[int, dict[int, CollOp]], seq: int) -> CollOp | None:
    return next((s[seq] for s in ranks.values() if seq in s), None)


def _culprit_finding(inputs: Inputs, source: str, group: str, culprits: list[int],
                     missed: CollOp | None, waiting: list[int]) -> Finding:
    beats = heartbeats(inputs)
    span = _open_span(beats, culprits)
    op = f"{missed.op} #{missed.seq}" if missed else "the next collective"
    evidence = [missed.evidence] if missed else []
    evidence += [Evidence(beats[r]["_path"], None, _beat_text(beats[r]))
                 for r in culprits if r in beats]
    stacks = [e for r in culprits for e in stack_evidence(inputs, r)]
    frame = blocking_frame(stacks)
    where = f"; its stack is in {frame.text}" if frame else ""
    busy = span is not None
    return Finding(
        category=Category.TIMEOUT_TOO_SHORT if busy else Category.RANK_HANG,
        severity=Severity.CRITICAL, confidence=0.9 if source == "events" else 0.75,
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
    ev = [ranks[r][max(ranks[r])].evidence for r in waiting[:8]]
    return Finding(
        category=Category.RANK_HANG, severity=Severity.ERROR, confidence=0.9,
        title=f"ranks {_ranks(waiting)} are waiting in group {group} (victims, not causes)",
        culprit=Culprit(), evidence=tuple(ev), fix="nothing to fix on these ranks",
        detector="hangs", root_cause=False, details={"waiting": waiting},
    )


def _open_span(beats: dict, culprits: list[int]) -> str | None:
    for r in culprits:
        span = (beats.get(r) or {}).get("span")
        if span and span.get("name") not in STEP_PHASES:
            return span.get("name")
    return None


def _beat_text(beat: dict) -> str:
    span = beat.get("span") or {}
    return (f"rank {beat.get('rank')} heartbeat: step {beat.get('step')}, "
            f"in_step={beat.get('in_step')}, seq={beat.get('seq')}, "
            f"pending={beat.get('pending')}, span={span.get('name')}")


def _hosts(inputs: Inputs, ranks: list[int]) -> tuple[str, ...]:
    hosts = {inputs.events[r].header.get("host") for r in ranks
             if r in inputs.events and inputs.events[r].header}
    return tuple(sorted(h for h in hosts if h))


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))
