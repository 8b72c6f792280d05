"""``ddiag watch``: notice a hang within seconds, from the ranks' heartbeats.

The decision is a pure function of successive heartbeat snapshots (``Watcher.observe``);
capturing stacks and Flight Recorder dumps, and ending the job, are edges in
``diag.watch.capture``.

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

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from diag.format import schema
from diag.format.infile import NotRegularFile, open_regular
from diag.format.names import STEP_PHASES
from diag.format.rundir import RunDir

HEARTBEAT_STALE_S = 10.0  # a writer thread beats every second; this long silent = gone
MAX_HEARTBEAT_BYTES = 1 << 20  # a heartbeat is under a kilobyte; more is not one


@dataclass(frozen=True)
class RankBeat:
    """What one heartbeat says about a rank's progress and liveness."""

    rank: int
    pid: int | None
    host: str | None
    t: float
    step: int
    seqs: tuple
    pending: dict | None
    span: str | None
    fr_signal: str | None
    started: float | None = None  # when the rank's process says it began (wall time)

    @property
    def progress(self) -> tuple:
        return (self.step, self.seqs)

    @property
    def total_seq(self) -> int:
        return sum(seq for _, seq in self.seqs)


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


def parse_beat(doc) -> RankBeat | None:
    """One heartbeat document as a RankBeat (None for no document); ValueError naming
    the first field that is missing or of the wrong type (a hostile or broken file must
    not reach the watcher)."""
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise ValueError(f"a heartbeat is a JSON object, got {type(doc).__name__}")
    schema.check(doc, schema.HEARTBEAT, "heartbeat")
    rank = _typed(doc, "rank", int, required=True)
    if rank < 0:
        raise ValueError(f"rank must be >= 0, got {rank}")
    seq = _typed(doc, "seq", dict, {})
    if not all(type(v) is int for v in seq.values()):
        raise ValueError(f"seq must map each group to an integer, got {_short(seq)}")
    span = _typed(doc, "span", dict)
    name = _typed(span, "name", str) if span else None
    return RankBeat(rank, _typed(doc, "pid", int), _typed(doc, "host", str),
                    _typed(doc, "t", float, required=True), _typed(doc, "step", int, -1),
                    tuple(sorted(seq.items())), _typed(doc, "pending", dict), name,
                    _typed(doc, "fr_signal", str), _typed(doc, "started", float))


_KINDS = {int: "an integer", float: "a finite number", str: "a string", dict: "an object"}


def _typed(doc: dict, name: str, kind: type, default=None, required: bool = False):
    """``doc[name]`` when it is of ``kind`` (float: any finite number; never a bool);
    ``default`` when absent or null."""
    value = doc.get(name)
    if value is None:
        if required:
            raise ValueError(f"{name} is missing")
        return default
    ok = (isinstance(value, (int, float)) and math.isfinite(value) if kind is float
          else isinstance(value, kind))
    if not ok or isinstance(value, bool):
        raise ValueError(f"{name} must be {_KINDS[kind]}, got {_short(value)}")
    return float(value) if kind is float else value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def scan_beats(run_dir: Path) -> tuple[dict[int, RankBeat], dict[Path, str]]:
    """Every rank's latest heartbeat, and the heartbeat files that are malformed (with
    why); those are left out, as if the rank had not beaten."""
    beats, malformed = {}, {}
    for path in sorted(RunDir(run_dir).path("heartbeat").glob("rank*.json")):
        try:
            with open_regular(path) as fh:  # a named pipe would block the watch forever
                text = fh.read(MAX_HEARTBEAT_BYTES + 1)
        except NotRegularFile as exc:
            malformed[path] = str(exc)
            continue
        except OSError:
            continue  # replaced or removed since the listing: the next poll reads it
        try:
            if len(text) > MAX_HEARTBEAT_BYTES:
                raise ValueError(f"larger than {MAX_HEARTBEAT_BYTES} bytes")
            beat = parse_beat(_json_or_none(text))
        except ValueError as exc:  # SchemaError included
            malformed[path] = str(exc)
            continue
        if beat is not None:
            beats[beat.rank] = beat
    return beats, malformed


def _json_or_none(text: bytes):
    try:
        return json.loads(text)
    except ValueError:
        return None  # torn: the writers replace whole files, so the next poll reads it


def read_beats(run_dir: Path) -> dict[int, RankBeat]:
    return scan_beats(run_dir)[0]


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
