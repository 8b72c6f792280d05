"""Per-rank collective progress, from whichever structured sources a run left behind.

Our event logs give the collectives each rank *finished*; its heartbeat adds the one it
was inside when it last beat. Flight Recorder dumps give torch's view, including the
collectives DDP issues in C++. Both become ``CollOp`` rows, per source, so detectors
can compare ranks seq by seq without caring where a row came from.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from diag.analyze.inputs import Inputs
from diag.analyze.types import Evidence

PENDING = "pending"
DONE = "done"


@dataclass(slots=True)
class CollOp:
    """One collective as one rank issued it. ``t`` is the wall time it was issued.

    Built for every collective of every rank (10^6 of them at 512 ranks), so it is a
    slotted class whose evidence text is only composed when a finding quotes it.
    """

    rank: int
    group: str
    seq: int
    op: str
    in_numel: int | None
    out_numel: int | None
    dtype: str | None
    group_size: int | None
    state: str
    t: float | None
    file: str
    line: int | None
    note: str = ""

    @property
    def signature(self) -> tuple:
        return (self.op, self.in_numel, self.out_numel, self.dtype)

    @property
    def evidence(self) -> Evidence:
        text = self.note or (f"{self.op} group={self.group} seq={self.seq} "
                             f"numel={self.in_numel} dtype={self.dtype}")
        return Evidence(self.file, self.line, text)


def from_events(inputs: Inputs) -> dict[int, list[CollOp]]:
    """rank -> its non-p2p collectives in issue order, the pending one (if any) last.
    Computed once per ``Inputs``: every detector asks."""
    cached = inputs.cache.get("events_ops")
    if cached is None:
        cached = inputs.cache["events_ops"] = _events_ops(inputs)
    return cached


def _events_ops(inputs: Inputs) -> dict[int, list[CollOp]]:
    beats = heartbeats(inputs)
    out: dict[int, list[CollOp]] = {}
    for rank, log in inputs.events.items():
        ops = [_from_record(rank, r, log.path, line) for r, line in zip(log.records, log.lines)
               if r.get("kind") == "collective" and not r.get("p2p")]
        pending = (beats.get(rank) or {}).get("pending")
        if isinstance(pending, dict) and not _has(ops, pending):
            ops.append(_from_pending(rank, pending, beats[rank]))
        out[rank] = ops
    return out


def as_int(value, default: int = 0) -> int:
    """Integers from hostile input: anything that is not one becomes ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value) -> str | None:
    return None if value is None else str(value)


def _from_record(rank: int, r: dict, path: str, line: int) -> CollOp:
    get = r.get
    return CollOp(rank, str(get("group", "")), as_int(get("seq")), str(get("op")),
                  _number(get("in_numel")), _number(get("out_numel")), _str(get("in_dtype")),
                  _number(get("group_size")), DONE, _number(get("t")), path, line)


def _from_pending(rank: int, p: dict, beat: dict) -> CollOp:
    text = (f"rank {rank} inside {p.get('op')} group={p.get('group')} seq={p.get('seq')} "
            f"since t={p.get('t')}")
    return CollOp(rank, str(p.get("group", "")), as_int(p.get("seq")), str(p.get("op")),
                  None, None, None, None, PENDING, _number(p.get("t")),
                  beat.get("_path", "heartbeat"), None, text)


def _has(ops: list[CollOp], pending: dict) -> bool:
    group, seq = str(pending.get("group")), pending.get("seq")
    return any(o.group == group and o.seq == seq for o in reversed(ops[-64:]))


def heartbeats(inputs: Inputs) -> dict[int, dict]:
    beats = {}
    for doc in inputs.docs_of("ddiag.heartbeat"):
        if isinstance(doc.doc, dict) and isinstance(doc.doc.get("rank"), int):
            beats[doc.doc["rank"]] = {**doc.doc, "_path": doc.path}
    return beats


def from_flight_recorder(inputs: Inputs) -> dict[int, list[CollOp]]:
    """rank -> its non-p2p Flight Recorder entries, in record order."""
    cached = inputs.cache.get("fr_ops")
    if cached is None:
        cached = inputs.cache["fr_ops"] = _fr_ops(inputs)
    return cached


def _fr_ops(inputs: Inputs) -> dict[int, list[CollOp]]:
    out: dict[int, list[CollOp]] = {}
    for rank, dump in inputs.fr.items():
        if dump.rank is None:
            continue
        entries = [e for e in dump.doc.get("entries", []) if isinstance(e, dict)]
        out[rank] = [_from_entry(rank, e, dump.path, i) for i, e in enumerate(entries)
                     if not e.get("is_p2p")]
    return out


def _from_entry(rank: int, e: dict, path: str, index: int) -> CollOp:
    name = str(e.get("profiling_name", "?"))
    op = name.split(":", 1)[-1]
    pg = e.get("process_group")
    pg = pg if isinstance(pg, (list, tuple)) and pg else ("", "")
    done = e.get("state") == "completed" or bool(e.get("retired"))
    text = (f"entries[{index}] {name} pg={pg[0]} seq={e.get('collective_seq_id')} "
            f"in={e.get('input_sizes')} state={e.get('state')} retired={e.get('retired')}")
    created = e.get("time_created_ns")
    return CollOp(rank, str(pg[0]), as_int(e.get("collective_seq_id")), op,
                  _numel(e.get("input_sizes")), _numel(e.get("output_sizes")),
                  _str(_first(e.get("input_dtypes"))), None, DONE if done else PENDING,
                  created / 1e9 if _number(created) is not None else None,
                  path, None, text)


def _numel(sizes) -> int | None:
    if not isinstance(sizes, list):
        return None
    try:
        return sum(math.prod(s) for s in sizes)
    except (TypeError, ValueError, OverflowError):
        return None


def _first(values):
    return values[0] if isinstance(values, list) and values else None


def by_group(ops: dict[int, list[CollOp]]) -> dict[str, dict[int, dict[int, CollOp]]]:
    """group -> rank -> seq -> op (the last one wins when a seq repeats)."""
    out: dict[str, dict[int, dict[int, CollOp]]] = {}
    for rank, rows in ops.items():
        for row in rows:
            out.setdefault(row.group, {}).setdefault(rank, {})[row.seq] = row
    return out


def group_members(inputs: Inputs, group: str, seen: set[int]) -> set[int]:
    """Who should take part in a group: the FR's pg_config when present, else every
    rank that logged anything for it (plus missing ranks of the world group)."""
    for dump in inputs.fr.values():
        cfg = dump.doc.get("pg_config", {})
        entry = cfg.get(group) or (cfg.get("") if group == "0" else None)
        if isinstance(entry, dict):
            ranks = entry.get("ranks")
            try:
                return set(json.loads(ranks) if isinstance(ranks, str) else ranks)
            except (TypeError, ValueError):
                pass
    return seen
