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


@dataclass(frozen=True)
class CollOp:
    """One collective as one rank issued it. ``t`` is the wall time it was issued."""

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
    evidence: Evidence

    @property
    def signature(self) -> tuple:
        return (self.op, self.in_numel, self.out_numel, self.dtype)


def from_events(inputs: Inputs) -> dict[int, list[CollOp]]:
    """rank -> its non-p2p collectives in issue order, the pending one (if any) last."""
    beats = heartbeats(inputs)
    out: dict[int, list[CollOp]] = {}
    for rank, log in inputs.events.items():
        ops = [_from_record(rank, r, log.path, line) for r, line in zip(log.records, log.lines)
               if r.get("kind") == "collective" and not r.get("p2p")]
        pending = (beats.get(rank) or {}).get("pending")
        if pending and not _has(ops, pending):
            ops.append(_from_pending(rank, pending, beats[rank]))
        out[rank] = ops
    return out


def _from_record(rank: int, r: dict, path: str, line: int) -> CollOp:
    text = f"{r.get('op')} group={r.get('group')} seq={r.get('seq')} numel={r.get('in_numel')}"
    return CollOp(rank, str(r.get("group", "")), int(r.get("seq", 0)), str(r.get("op")),
                  r.get("in_numel"), r.get("out_numel"), r.get("in_dtype"),
                  r.get("group_size"), DONE, r.get("t"), Evidence(path, line, text))


def _from_pending(rank: int, p: dict, beat: dict) -> CollOp:
    text = (f"rank {rank} inside {p.get('op')} group={p.get('group')} seq={p.get('seq')} "
            f"since t={p.get('t')}")
    return CollOp(rank, str(p.get("group", "")), int(p.get("seq", 0)), str(p.get("op")),
                  None, None, None, None, PENDING, p.get("t"),
                  Evidence(beat.get("_path", "heartbeat"), None, text))


def _has(ops: list[CollOp], pending: dict) -> bool:
    return any(o.group == str(pending.get("group")) and o.seq == pending.get("seq") for o in ops)


def heartbeats(inputs: Inputs) -> dict[int, dict]:
    beats = {}
    for doc in inputs.docs_of("ddiag.heartbeat"):
        if isinstance(doc.doc.get("rank"), int):
            beats[doc.doc["rank"]] = {**doc.doc, "_path": doc.path}
    return beats


def from_flight_recorder(inputs: Inputs) -> dict[int, list[CollOp]]:
    """rank -> its non-p2p Flight Recorder entries, in record order."""
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
    pg = e.get("process_group") or ("", "")
    done = e.get("state") == "completed" or bool(e.get("retired"))
    text = (f"entries[{index}] {name} pg={pg[0]} seq={e.get('collective_seq_id')} "
            f"in={e.get('input_sizes')} state={e.get('state')} retired={e.get('retired')}")
    created = e.get("time_created_ns")
    return CollOp(rank, str(pg[0]), int(e.get("collective_seq_id") or 0), op,
                  _numel(e.get("input_sizes")), _numel(e.get("output_sizes")),
                  _first(e.get("input_dtypes")), None, DONE if done else PENDING,
                  created / 1e9 if isinstance(created, (int, float)) else None,
                  Evidence(path, None, text))


def _numel(sizes) -> int | None:
    if not isinstance(sizes, list):
        return None
    try:
        return sum(math.prod(s) for s in sizes)
    except TypeError:
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
