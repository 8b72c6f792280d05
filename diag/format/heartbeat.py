"""Reads heartbeats (``heartbeat/rankNNNNN.json``) into checked ``RankBeat`` records: the
one reader ``ddiag watch`` and ``ddiag analyze`` share.

A heartbeat may be torn (mid-replace), hostile or from a newer ddiag: a field of the
wrong type is a ValueError naming it, never a value that reaches a decision.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from diag.format import schema
from diag.format.infile import NotRegularFile, open_regular
from diag.format.rundir import RunDir

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
    in_step: bool | None = None  # inside a step (between its start and end), when said
    path: str | None = field(default=None, compare=False)  # the file it was read from

    @property
    def progress(self) -> tuple:
        return (self.step, self.seqs)

    @property
    def total_seq(self) -> int:
        return sum(seq for _, seq in self.seqs)


def parse_beat(doc, path: str | None = None) -> RankBeat | None:
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
    # in_step is only quoted in analyze's evidence: another type is dropped, not refused
    in_step = doc.get("in_step") if isinstance(doc.get("in_step"), bool) else None
    return RankBeat(rank, _typed(doc, "pid", int), _typed(doc, "host", str),
                    _typed(doc, "t", float, required=True), _typed(doc, "step", int, -1),
                    tuple(sorted(seq.items())), _typed(doc, "pending", dict), name,
                    _typed(doc, "fr_signal", str), _typed(doc, "started", float), in_step,
                    path)


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
            beat = parse_beat(_json_or_none(text), str(path))
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
