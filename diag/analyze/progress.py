"""Per-rank collective progress, from whichever structured sources a run left behind.

Our event logs give the collectives each rank *finished*; its heartbeat adds the one it
was inside when it last beat. Flight Recorder dumps give torch's view, including the
collectives DDP issues in C++. Both become ``CollOp`` rows, per source, so detectors
can compare ranks seq by seq without caring where a row came from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from diag.analyze.collops import PENDING, CollOp, OpTable, as_int, number, ops_table, \
    text_or_none
from diag.analyze.eventcols import ops_of
from diag.analyze.inputs import Inputs
from diag.format import schema
from diag.format.heartbeat import RankBeat, parse_beat


def from_events(inputs: Inputs) -> dict[int, list[OpTable]]:
    """rank -> its non-p2p collectives in issue order: the log's table, then a one-row
    table of the pending collective its heartbeat names, if the log lacks it. Computed
    once per ``Inputs``: every detector asks."""
    cached = inputs.cache.get("events_ops")
    if cached is None:
        cached = inputs.cache["events_ops"] = _events_ops(inputs)
    return cached


def _events_ops(inputs: Inputs) -> dict[int, list[OpTable]]:
    beats = heartbeats(inputs)
    out: dict[int, list[OpTable]] = {}
    for rank, log in inputs.events.items():
        out[rank] = [ops_of(log)]
        pending = beats[rank].pending if rank in beats else None
        if pending is not None and not _has(out[rank][0], pending):
            out[rank].append(ops_table([_from_pending(rank, pending, beats[rank])], rank,
                                       log.path))
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


def from_flight_recorder(inputs: Inputs) -> dict[int, list[OpTable]]:
    """rank -> its non-p2p Flight Recorder entries, in record order."""
    return {rank: [dump.ops] for rank, dump in inputs.fr.items()
            if dump.rank is not None and dump.ops is not None}


def groups_of(inputs: Inputs, source: str) -> dict[str, dict[int, "RankSeqs"]]:
    """``by_group`` of one source ("events" or "fr"), built once per ``Inputs``."""
    key = f"groups_{source}"
    if key not in inputs.cache:
        tables = from_events(inputs) if source == "events" else from_flight_recorder(inputs)
        inputs.cache[key] = by_group(tables)
    return inputs.cache[key]


def by_group(tables: dict[int, list[OpTable]]) -> dict[str, dict[int, "RankSeqs"]]:
    """group -> rank -> that rank's collectives in the group, seq -> op (the last one
    wins when a seq repeats). Ops and dtypes get codes shared by every rank, so columns
    of different ranks compare directly."""
    vocab: dict[str, dict] = {"op": {}, "dtype": {}}
    out: dict[str, dict[int, RankSeqs]] = {}
    for rank, parts in tables.items():
        by_name: dict[str, list] = {}
        for table in parts:
            ops = _shared_codes(vocab["op"], table.op_names)
            dtypes = _shared_codes(vocab["dtype"], table.dtype_names, none=True)
            for code, group in enumerate(table.group_names):
                rows = slice(None) if len(table.group_names) == 1 else \
                    np.flatnonzero(table.group == code)
                if len(table) if type(rows) is slice else len(rows):
                    by_name.setdefault(group, []).append(
                        Part(table, rows, ops, dtypes, vocab["op"]))
        for group, found in by_name.items():
            out.setdefault(group, {})[rank] = RankSeqs(found)
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


@dataclass(frozen=True)
class Part:
    """Rows of one table in one group, with the table's shared op and dtype codes."""

    table: OpTable
    rows: np.ndarray | slice  # slice(None): all of them (a view, not a copy)
    op_codes: np.ndarray  # local op code -> shared
    dtype_codes: np.ndarray  # local dtype code + 1 -> shared (-1: not known)
    op_vocab: dict  # op name -> shared code, the one dict every part of a source shares


class RankSeqs(Mapping):
    """One rank's collectives in one group: a mapping seq -> ``CollOp`` whose rows are
    built only when asked for, over columns sorted by seq that the detectors compare
    whole (``seqs``, ``ops``, ``dtypes``, ``col(name)``). The rows may come from several
    tables (a log's, and its heartbeat's pending collective)."""

    def __init__(self, parts: list[Part]) -> None:
        self.parts = parts
        seqs = _joined([p.table.seq[p.rows] for p in parts])
        keep = slice(None)  # the rows in order, as a view
        if len(seqs) > 1 and not np.all(seqs[1:] > seqs[:-1]):
            # Repeated or out-of-order seqs: keep each seq's last row, in seq order.
            keep = len(seqs) - 1 - np.unique(seqs[::-1], return_index=True)[1]
        self.keep, self.seqs = keep, seqs[keep]
        self.ops = self._joined(lambda p: p.op_codes[p.table.op[p.rows]])
        self.dtypes = self._joined(lambda p: p.dtype_codes[p.table.dtype[p.rows] + 1])
        self._cols: dict[str, np.ndarray] = {}

    def _joined(self, column) -> np.ndarray:
        return _joined([column(p) for p in self.parts])[self.keep]

    @property
    def rank(self) -> int:
        return self.parts[0].table.rank

    def with_ops(self, names) -> np.ndarray:
        """Positions whose op is one of ``names``."""
        codes = [c for n, c in self.parts[0].op_vocab.items() if n in names]
        return np.flatnonzero(np.isin(self.ops, codes))

    @property
    def last(self) -> int:
        return int(self.seqs[-1])

    def col(self, name: str) -> np.ndarray:
        """A column of the tables (``COLUMNS``), in this mapping's (seq) order."""
        found = self._cols.get(name)
        if found is None:
            found = self._cols[name] = self._joined(lambda p: getattr(p.table, name)[p.rows])
        return found

    def at(self, seqs: np.ndarray) -> np.ndarray | slice:
        """Positions of ``seqs`` (all present) in this mapping's columns: a slice when
        they are a run of consecutive positions (the usual case), else an array."""
        if not len(seqs):
            return slice(0, 0)
        start = int(np.searchsorted(self.seqs, seqs[0]))
        end = start + len(seqs)
        if end <= len(self.seqs) and self.seqs[end - 1] == seqs[-1]:
            return slice(start, end)  # sorted, unique and all present: these very seqs
        return np.searchsorted(self.seqs, seqs)

    def row(self, i: int) -> CollOp:
        """The op at position ``i`` of the columns."""
        i = i if type(self.keep) is slice else int(self.keep[i])
        for p in self.parts:
            whole = type(p.rows) is slice  # all of the table's rows, in order
            n = len(p.table) if whole else len(p.rows)
            if i < n:
                return p.table.row(i if whole else int(p.rows[i]))
            i -= n
        raise IndexError(i)

    def __getitem__(self, seq) -> CollOp:
        i = int(np.searchsorted(self.seqs, seq)) if type(seq) is int else len(self.seqs)
        if i >= len(self.seqs) or self.seqs[i] != seq:
            raise KeyError(seq)
        return self.row(i)

    def __iter__(self):
        return iter(self.seqs.tolist())

    def __len__(self) -> int:
        return len(self.seqs)

    def __contains__(self, seq) -> bool:
        i = int(np.searchsorted(self.seqs, seq)) if type(seq) is int else len(self.seqs)
        return i < len(self.seqs) and self.seqs[i] == seq


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


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
