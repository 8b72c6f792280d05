"""Per-rank collective progress, from whichever structured sources a run left behind.

Our event logs give the collectives each rank *finished*; its heartbeat adds the one it
was inside when it last beat. Flight Recorder dumps give torch's view, including the
collectives DDP issues in C++. Both become ``CollOp`` rows, per source, so detectors
can compare ranks seq by seq without caring where a row came from.
"""

from __future__ import annotations

import json

from diag.analyze.collops import DONE, PENDING, CollOp, as_int, number, text_or_none
from diag.analyze.inputs import Inputs
from diag.format import schema
from diag.format.heartbeat import RankBeat, parse_beat


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
        pending = beats[rank].pending if rank in beats else None
        if pending is not None and not _has(ops, pending):
            ops.append(_from_pending(rank, pending, beats[rank]))
        out[rank] = ops
    return out


def _from_record(rank: int, r: dict, path: str, line: int) -> CollOp:
    get = r.get
    return CollOp(rank, str(get("group", "")), as_int(get("seq")), str(get("op")),
                  number(get("in_numel")), number(get("out_numel")), text_or_none(get("in_dtype")),
                  number(get("group_size")), DONE, number(get("t")), path, line,
                  step=as_int(get("step"), -1))


def _from_pending(rank: int, p: dict, beat: RankBeat) -> CollOp:
    text = f"heartbeat: rank {rank} inside it since t={p.get('t')}"
    return CollOp(rank, str(p.get("group", "")), as_int(p.get("seq")), str(p.get("op")),
                  number(p.get("in_numel")), None, text_or_none(p.get("in_dtype")), None,
                  PENDING, number(p.get("t")),
                  beat.path or "heartbeat", None, text)


def _has(ops: list[CollOp], pending: dict) -> bool:
    group, seq = str(pending.get("group")), pending.get("seq")
    return any(o.group == group and o.seq == seq for o in reversed(ops[-64:]))


def heartbeats(inputs: Inputs) -> dict[int, RankBeat]:
    """rank -> its heartbeat, read as ``ddiag watch`` reads it; a malformed one (a field
    of the wrong type, an unknown schema) is left out, as if the rank had not beaten."""
    beats = {}
    for doc in inputs.docs_of(schema.HEARTBEAT):
        try:
            beat = parse_beat(doc.doc, doc.path)
        except ValueError:  # SchemaError included
            continue
        if beat is not None:
            beats[beat.rank] = beat
    return beats


def from_flight_recorder(inputs: Inputs) -> dict[int, list[CollOp]]:
    """rank -> its non-p2p Flight Recorder entries, in record order."""
    cached = inputs.cache.get("fr_ops")
    if cached is None:
        cached = inputs.cache["fr_ops"] = _fr_ops(inputs)
    return cached


def _fr_ops(inputs: Inputs) -> dict[int, list[CollOp]]:
    return {rank: dump.ops for rank, dump in inputs.fr.items() if dump.rank is not None}


def groups_of(inputs: Inputs, source: str) -> dict[str, dict[int, dict[int, CollOp]]]:
    """``by_group`` of one source ("events" or "fr"), built once per ``Inputs``."""
    key = f"groups_{source}"
    if key not in inputs.cache:
        ops = from_events(inputs) if source == "events" else from_flight_recorder(inputs)
        inputs.cache[key] = by_group(ops)
    return inputs.cache[key]


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
