"""Per-rank collective progress, from whichever structured sources a run left behind.

Our event logs give the collectives each rank *finished*; its heartbeat adds the one it
was inside when it last beat. Flight Recorder dumps give torch's view, including the
collectives DDP issues in C++. Both become ``CollOp`` rows, per source, so detectors
can compare ranks seq by seq without caring where a row came from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from diag.analyze.collops import PENDING, CollOp, OpTable, as_int, number, text_or_none
from diag.analyze.eventcols import ops_of
from diag.analyze.inputs import Inputs
from diag.format import schema
from diag.format.heartbeat import RankBeat, parse_beat


def from_events(inputs: Inputs) -> dict[int, OpTable]:
    """rank -> its non-p2p collectives in issue order, the pending one (if any) last.
    Computed once per ``Inputs``: every detector asks."""
    cached = inputs.cache.get("events_ops")
    if cached is None:
        cached = inputs.cache["events_ops"] = _events_ops(inputs)
    return cached


def _events_ops(inputs: Inputs) -> dict[int, OpTable]:
    beats = heartbeats(inputs)
    out: dict[int, OpTable] = {}
    for rank, log in inputs.events.items():
        table = ops_of(log)
        pending = beats[rank].pending if rank in beats else None
        if pending is not None and not _has(table, pending):
            table = table.appended(_from_pending(rank, pending, beats[rank]))
        out[rank] = table
    return out


def _from_pending(rank: int, p: dict, beat: RankBeat) -> CollOp:
    text = f"heartbeat: rank {rank} inside it since t={p.get('t')}"
    return CollOp(rank, str(p.get("group", "")), as_int(p.get("seq")), str(p.get("op")),
                  number(p.get("in_numel")), None, text_or_none(p.get("in_dtype")), None,
                  PENDING, number(p.get("t")),
                  beat.path or "heartbeat", None, text)


def _has(table: OpTable, pending: dict) -> bool:
    """Whether one of the table's last 64 rows is the pending collective."""
    group, seq = str(pending.get("group")), pending.get("seq")
    if group not in table.group_names or type(seq) is not int:
        return False
    code = table.group_names.index(group)
    tail = slice(max(0, len(table) - 64), len(table))
    return bool(np.any((table.group[tail] == code) & (table.seq[tail] == seq)))


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


def from_flight_recorder(inputs: Inputs) -> dict[int, OpTable]:
    """rank -> its non-p2p Flight Recorder entries, in record order."""
    return {rank: dump.ops for rank, dump in inputs.fr.items()
            if dump.rank is not None and dump.ops is not None}


def groups_of(inputs: Inputs, source: str) -> dict[str, dict[int, "RankSeqs"]]:
    """``by_group`` of one source ("events" or "fr"), built once per ``Inputs``."""
    key = f"groups_{source}"
    if key not in inputs.cache:
        tables = from_events(inputs) if source == "events" else from_flight_recorder(inputs)
        inputs.cache[key] = by_group(tables)
    return inputs.cache[key]


def by_group(tables: dict[int, OpTable]) -> dict[str, dict[int, "RankSeqs"]]:
    """group -> rank -> that rank's collectives in the group, seq -> op (the last one
    wins when a seq repeats). Ops and dtypes get codes shared by every rank, so columns
    of different ranks compare directly."""
    vocab: dict[str, dict] = {"op": {}, "dtype": {}}
    out: dict[str, dict[int, RankSeqs]] = {}
    for rank, table in tables.items():
        ops = _shared_codes(vocab["op"], table.op_names)[table.op]
        dtypes = _shared_codes(vocab["dtype"], table.dtype_names, none=True)[table.dtype + 1]
        for code, group in enumerate(table.group_names):
            rows = np.arange(len(table)) if len(table.group_names) == 1 else \
                np.flatnonzero(table.group == code)
            if len(rows):
                out.setdefault(group, {})[rank] = RankSeqs(table, rows, ops, dtypes)
    return out


def common_seqs(ranks: dict[int, RankSeqs]) -> np.ndarray:
    """The seqs every rank of a group has, in order."""
    columns = iter(ranks.values())
    common = next(columns).seqs
    for seqs in columns:
        common = np.intersect1d(common, seqs.seqs, assume_unique=True)
    return common


def _shared_codes(vocab: dict, names: list, none: bool = False) -> np.ndarray:
    """Codes in the shared vocabulary for a table's names; with ``none``, index 0 is
    the code of "not known" (-1), so that ``codes[local + 1]`` maps -1 too."""
    codes = [vocab.setdefault(n, len(vocab)) for n in names]
    return np.array([-1, *codes] if none else codes, np.int64)


class RankSeqs(Mapping):
    """One rank's collectives in one group: a mapping seq -> ``CollOp`` whose rows are
    built only when asked for, over columns sorted by seq that the detectors compare
    whole (``seqs``, ``ops``, ``numels``, ...)."""

    def __init__(self, table: OpTable, rows: np.ndarray, ops: np.ndarray,
                 dtypes: np.ndarray) -> None:
        seqs = table.seq[rows]
        if len(seqs) > 1 and not np.all(seqs[1:] > seqs[:-1]):
            # Repeated or out-of-order seqs: keep each seq's last row, in seq order.
            last = len(seqs) - 1 - np.unique(seqs[::-1], return_index=True)[1]
            rows = rows[last]
            seqs = table.seq[rows]
        self.table, self.rows, self.seqs = table, rows, seqs
        self.ops, self.dtypes = ops[rows], dtypes[rows]

    @property
    def rank(self) -> int:
        return self.table.rank

    @property
    def last(self) -> int:
        return int(self.seqs[-1])

    def col(self, name: str) -> np.ndarray:
        """A column of the table, in this mapping's (seq) order."""
        return getattr(self.table, name)[self.rows]

    def at(self, seqs: np.ndarray) -> np.ndarray:
        """Positions of ``seqs`` (all present) in this mapping's columns."""
        return np.searchsorted(self.seqs, seqs)

    def __getitem__(self, seq) -> CollOp:
        i = int(np.searchsorted(self.seqs, seq)) if type(seq) is int else len(self.seqs)
        if i >= len(self.seqs) or self.seqs[i] != seq:
            raise KeyError(seq)
        return self.table.row(int(self.rows[i]))

    def __iter__(self):
        return iter(self.seqs.tolist())

    def __len__(self) -> int:
        return len(self.seqs)

    def __contains__(self, seq) -> bool:
        i = int(np.searchsorted(self.seqs, seq)) if type(seq) is int else len(self.seqs)
        return i < len(self.seqs) and self.seqs[i] == seq


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
