"""Which rank keeps the others waiting, from a few rounds of stack samples (pure).

A job without the decorator records no step times per rank, but its straggler shows in
its stacks. Sampled now and then (py-spy --nonblocking, a few times a stage), it is the
rank that is busy (its own code, its data loading, its I/O) while the others wait for it
in a collective or in backward. A rank scores in a round (every rank's main-thread stack
at about one moment) when it is not waiting and more than half of the other ranks are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from diag.analyze import stackgroups
from diag.verdict import CONFIDENCE, Basis, Category, Culprit, Evidence, Finding, Severity

MIN_ROUNDS = 3
"""Rounds a rank must score in to be named: one or two can be the job's start-up (one rank
still importing while another already waits in the rendezvous)."""
MIN_SHARE_OF_WAITS = 0.5
"""...and at least this share of the rounds in which any rank waited: the others waited
for it more often than for anyone else."""
MIN_SHARE_OF_RUN = 0.25
"""...and this share of the rounds from the first in which any rank waited: the others
waited for it a quarter of the time, which costs the job at least as much. Ranks in step
wait only for the jitter between them; few samples land there, and on either side, so a
rank that logs now and then scores in a few rounds of a long run, not in a quarter."""
DETECTOR = "stack-samples"


@dataclass
class BusyTally:
    """What the rounds showed: per rank, the rounds it scored in, and where."""

    rounds: int = 0
    """Complete rounds (every rank's stack read)."""
    active: int = 0
    """Complete rounds from the first one in which any rank waited (training began)."""
    waits: int = 0
    """Complete rounds in which any rank waited."""
    busy: Counter = field(default_factory=Counter)
    """rank -> rounds in which it was busy while most others waited."""
    states: dict[int, Counter] = field(default_factory=dict)
    """rank -> state (stackgroups.state_of) -> rounds."""
    busy_at: dict[int, Counter] = field(default_factory=dict)
    """rank -> its place (stackgroups.place) while it scored -> rounds."""
    waited_at: Counter = field(default_factory=Counter)
    """Where the waiting ranks waited, as Frames (the frame that shows the wait)."""
    example: dict = field(default_factory=dict)
    """(rank, place) -> one Stack of that rank in that place, for the evidence."""

    def add(self, stacks: dict[int, stackgroups.Stack | None]) -> None:
        """One round; an incomplete one (a stack unread, fewer than two ranks) is left
        out: with a rank missing, 'most others' is unknown."""
        if len(stacks) < 2 or any(s is None for s in stacks.values()):
            return
        state = {r: stackgroups.state_of(s.frames) for r, s in stacks.items()}
        waiting = {r for r, (st, _) in state.items() if st in stackgroups.WAITING}
        self.rounds += 1
        self.active += bool(self.active or waiting)
        self.waits += bool(waiting)
        for r, (st, at) in state.items():
            self.states.setdefault(r, Counter())[st] += 1
            if r in waiting:
                self.waited_at[at] += 1
            elif len(waiting) * 2 > len(stacks) - 1:
                self._score(r, stacks[r])

    def _score(self, rank: int, stack: stackgroups.Stack) -> None:
        key = stackgroups.place(stack.frames)
        self.busy[rank] += 1
        self.busy_at.setdefault(rank, Counter())[key] += 1
        self.example.setdefault((rank, key), stack)

    def to_json(self) -> dict:
        return {"rounds": self.rounds, "active_rounds": self.active,
                "rounds_with_a_wait": self.waits,
                "busy_while_others_waited": {str(r): n for r, n in sorted(self.busy.items())},
                "states": {str(r): dict(c) for r, c in sorted(self.states.items())}}


def straggler(tally: BusyTally, source: str) -> Finding | None:
    """The rank that kept the others waiting in at least ``MIN_ROUNDS`` rounds, in
    ``MIN_SHARE_OF_WAITS`` of the rounds with a wait and in ``MIN_SHARE_OF_RUN`` of the
    active ones, when exactly one did; ``source`` is the file the tally was written to
    (the evidence's file)."""
    need = max(MIN_ROUNDS, MIN_SHARE_OF_WAITS * tally.waits, MIN_SHARE_OF_RUN * tally.active)
    ranks = [r for r, n in tally.busy.items() if n >= need]
    if len(ranks) != 1:
        return None
    rank = ranks[0]
    key, _ = tally.busy_at[rank].most_common(1)[0]
    stack = tally.example[(rank, key)]
    state, at = stackgroups.state_of(stack.frames)
    waited = tally.waited_at.most_common(1)[0][0] if tally.waited_at else None
    count = tally.busy[rank]
    title = (f"rank {rank} is the straggler: busy in {_where(at)} ({state}) in {count} of "
             f"{tally.active} stack samples while the other ranks waited in {_where(waited)}")
    return Finding(Category.STRAGGLER, Severity.WARN, CONFIDENCE[Basis.MINORITY],
                   title, Culprit((rank,), (stack.host,) if stack.host else ()),
                   _evidence(source, rank, stack, waited), _FIX, DETECTOR, True, None,
                   tally.to_json())


_FIX = ("that rank does more work per step than the others, or waits on its own input: "
        "compare its data shard and DataLoader workers, look for a rank-only branch "
        "(logging, evaluation or saving on one rank), and check its processor or device "
        "(throttled, shared with another job); `ddiag stacks --pid` shows where it is now")


def _where(frame: stackgroups.Frame | None) -> str:
    if frame is None:
        return "?"
    file = "/".join(frame.file.replace("\\", "/").split("/")[-2:])
    return f"{frame.func} ({file}:{frame.line})" if frame.line is not None else \
        f"{frame.func} ({file})"


def _evidence(source: str, rank: int, stack: stackgroups.Stack,
              waited: stackgroups.Frame | None) -> tuple[Evidence, ...]:
    shown = list(stack.frames[:3])
    user = next((f for f in stack.frames if f.user), None)
    if user is not None and user not in shown:
        shown.append(user)
    out = [Evidence(source, None, f"rank {rank}: {f}") for f in shown]
    if waited is not None:
        out.append(Evidence(source, None, f"the others waited in {waited}"))
    return tuple(out)
