"""``ddiag watch``: notice a hang within seconds, from the ranks' heartbeats.

The decision is a pure function of successive heartbeat snapshots (``Watcher.observe``);
reading them is ``diag.format.heartbeat``; capturing stacks and Flight Recorder dumps, and
ending the job, are edges in ``diag.watch.capture``.

A stall alone is not a hang: a long first step, a checkpoint or an evaluation also stop
progress. A hang is a stall in which the ranks *disagree*: some sit in (or past) a
collective that others have not reached. So the watcher alarms when

- no rank's progress (step, collective seqs) changed for ``stall_s`` seconds, and
- the ranks' progress differs, or a rank is inside a collective call, or a rank's
  heartbeat stopped (the process died or froze),

unless the laggard is inside a span the user marked (``diag.span("checkpoint")``) that
is not a step phase, and not blocked in a collective there. Stalls with every rank at the same point are reported only after
``same_point_s`` (default 10 x ``stall_s``): that is what an all-rank network stall looks
like, and also what a long compile looks like.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diag.format.heartbeat import RankBeat
from diag.format.names import STEP_PHASES

HEARTBEAT_STALE_S = 10.0  # a writer thread beats every second; this long silent = gone


@dataclass(frozen=True)
class Alarm:
    """A detected hang: who lags, who waits, and since when (wall time)."""

    laggards: tuple[int, ...]
    waiting: tuple[int, ...]
    dead: tuple[int, ...]
    stalled_since: float
    detected_at: float
    reason: str
    beats: dict = field(default_factory=dict, compare=False)

    def to_json(self) -> dict:
        return {"laggards": list(self.laggards), "waiting": list(self.waiting),
                "dead": list(self.dead), "stalled_since": self.stalled_since,
                "detected_at": self.detected_at, "reason": self.reason}


class Watcher:
    """Feeds on heartbeat snapshots; returns an Alarm once a hang is established."""

    def __init__(self, stall_s: float, same_point_s: float | None = None,
                 world_size: int | None = None) -> None:
        self.stall_s = stall_s
        self.same_point_s = same_point_s if same_point_s is not None else 10 * stall_s
        self.world_size = world_size
        self._last_progress: tuple | None = None
        self._since: float | None = None

    def observe(self, beats: dict[int, RankBeat], now: float) -> Alarm | None:
        """``now`` is wall time, the clock heartbeats are stamped with."""
        if not beats:
            return None
        progress = tuple(sorted((r, b.progress) for r, b in beats.items()))
        if progress != self._last_progress:
            self._last_progress, self._since = progress, now
            return None
        stalled = now - self._since
        if stalled < self.stall_s:
            return None
        return self._judge(beats, now, stalled)

    def _judge(self, beats: dict[int, RankBeat], now: float, stalled: float) -> Alarm | None:
        dead = tuple(sorted(r for r, b in beats.items() if now - b.t > HEARTBEAT_STALE_S))
        lowest = min(_key(b) for b in beats.values())
        laggards = tuple(sorted(r for r, b in beats.items() if _key(b) == lowest))
        waiting = tuple(sorted(r for r, b in beats.items() if r not in laggards))
        inside = [r for r, b in beats.items() if b.pending]
        if any(beats[r].span and beats[r].span not in STEP_PHASES and not beats[r].pending
               for r in laggards):
            return None  # a marked checkpoint/eval: a pause, not a hang -- unless the rank
            # is blocked in a collective there (the rank-0-only barrier in a checkpoint)
        if waiting or inside or dead:
            reason = ("heartbeat stopped" if dead and not waiting else
                      "ranks disagree on progress" if waiting else "stuck inside a collective")
        elif stalled >= self.same_point_s:
            reason = "every rank stopped at the same point"
        else:
            return None
        return Alarm(dead or laggards, waiting, dead, self._since, now, reason, dict(beats))


def _key(beat: RankBeat) -> tuple:
    """Order ranks by how far they got: collectives issued first, then step."""
    return (beat.total_seq, beat.step)
