"""One collective as one rank issued it: the row every progress and mismatch check uses.

Built for every collective of every rank -- 10^6 rows for a 512-rank event log, 2x10^6
for 1024 Flight Recorder dumps -- so it is a slotted class, and its evidence text is
only composed when a finding quotes it.
"""

from __future__ import annotations

import math
import operator
import sys
from dataclasses import dataclass, field

import numpy as np

from diag.verdict import Evidence

PENDING = "pending"
DONE = "done"


@dataclass(slots=True)
class CollOp:
    """``t`` is the wall time the collective was issued; ``line`` the evidence line (or
    the Flight Recorder entry index)."""

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
    entry: int | None = None  # index into a Flight Recorder dump's entries
    step: int | None = None  # the training step it was issued in (event logs only)

    @property
    def signature(self) -> tuple:
        return (self.op, self.in_numel, self.out_numel, self.dtype)

    @property
    def evidence(self) -> Evidence:
        text = f"{self.op} group={self.group} seq={self.seq}"
        if self.in_numel is not None:
            text += f" numel={self.in_numel} dtype={self.dtype}"
        if self.state == PENDING and not self.note:
            text += " (not completed)"
        if self.entry is not None:
            text = f"entries[{self.entry}]: {text}"
        return Evidence(self.file, self.line, f"{self.note}: {text}" if self.note else text)


def as_int(value, default: int = 0) -> int:
    """Integers from hostile input: anything that is not one becomes ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def text_or_none(value) -> str | None:
    return None if value is None else str(value)


def scalar_text(value) -> str | None:
    """A string, number or bool as text; None for anything else, whose text could be
    as long as a nested list unfolds."""
    return str(value) if isinstance(value, (str, int, float)) else None


def fr_ops(entries: list, rank: int, path: str) -> "OpTable":
    """A dump's non-p2p entries as a table, in record order; the dicts can then be freed.
    A dump written by torch is read field by field across all its entries; one with an
    entry of another shape, entry by entry."""
    try:
        p2p = [e.get("is_p2p") for e in entries]
    except AttributeError:  # not all dicts
        p2p = [True]
    if any(p2p):
        entries = [e for e in entries if isinstance(e, dict) and not e.get("is_p2p")]
    try:
        return table_of_columns(rank, path, _well_formed_dump(entries))
    except (KeyError, TypeError, IndexError, ValueError, AttributeError):
        return make_table(rank, path, [from_fr_entry(e, i) for i, e in enumerate(entries)])


_FR_FIELDS = operator.itemgetter("profiling_name", "process_group", "input_dtypes",
                                 "collective_seq_id", "time_created_ns", "input_sizes", "state",
                                 "retired")


def _well_formed_dump(entries: list[dict]) -> list:
    """The entries as ``COLUMNS`` columns; raises (TypeError, KeyError) unless every
    entry has the fields and types torch writes. The fields are taken in one pass over
    the entries (each entry's dict is visited once) and checked column by column."""
    if not entries:
        return [()] * len(COLUMNS)
    names, pgs, dtypes, seqs, created, sizes, states, retired = zip(*map(_FR_FIELDS, entries))
    groups = [pg[0] for pg in pgs]
    dtypes = [d[0] if d else None for d in dtypes]
    _only(names, str), _only(groups, str), _only(dtypes, str, type(None))
    _only(seqs, int), _only(created, int)
    op_of = {n: sys.intern(n.split(":", 1)[-1]) for n in set(names)}
    ops = list(map(op_of.__getitem__, names))
    outs = [_numel(e.get("output_sizes")) if op in SIZE_RULED_OPS else None
            for e, op in zip(entries, ops)] if not SIZE_RULED_OPS.isdisjoint(op_of.values()) \
        else (None,) * len(entries)
    done = [s == "completed" or r is True for s, r in zip(states, retired)]
    unknown = (None,) * len(entries)
    return [groups, seqs, ops, _numels(sizes), outs, dtypes, unknown, done,
            np.array(created, np.int64) / 1e9, unknown, unknown, np.arange(len(entries)),
            unknown]


def _numels(sizes: list) -> list[int]:
    """Each entry's input numel. When every entry has one tensor, checked to be all int
    dims and multiplied at C speed; else entry by entry."""
    if all(len(s) == 1 for s in sizes):
        dims = [s[0] for s in sizes]
        _only([d for ds in dims for d in ds], int)  # math.prod would repeat a list
        return list(map(math.prod, dims))
    return [_prod(s[0]) if len(s) == 1 else sum(map(_prod, s)) for s in sizes]


def _only(values: list, *types) -> None:
    if not set(map(type, values)) <= set(types):
        raise TypeError("not as torch writes it")


# Ops whose output size is checked against their input (see detectors.mismatch).
SIZE_RULED_OPS = frozenset({"all_gather_into_tensor", "all_gather_single", "_allgather_base",
                            "allgather_into_tensor_coalesced", "reduce_scatter_tensor",
                            "reduce_scatter_single", "_reduce_scatter_base"})
_op_names: dict[str, str] = {}


def from_fr_entry(e: dict, index: int) -> tuple:
    """One entry as ``COLUMNS`` cells. Fast path for entries shaped as torch writes them;
    anything else goes through the checked path, which tolerates every field being
    missing or of the wrong type."""
    try:
        return _well_formed_entry(e, index)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError):
        return _checked_entry(e, index)


def _well_formed_entry(e: dict, index: int) -> tuple:
    name, pg, dtypes = e["profiling_name"], e["process_group"][0], e["input_dtypes"]
    # str() of a nested list is as long as the list unfolds: only text is taken as text.
    if type(name) is not str or type(pg) is not str or (dtypes and type(dtypes[0]) is not str):
        raise TypeError("not as torch writes it")
    op = _op_names.get(name)
    if op is None:
        op = _op_names.setdefault(name, sys.intern(name.split(":", 1)[-1]))
    seq, created, sizes = e["collective_seq_id"], e["time_created_ns"], e["input_sizes"]
    numel = _prod(sizes[0]) if len(sizes) == 1 else sum(map(_prod, sizes))
    if type(seq) is not int or type(created) is not int:
        raise TypeError("not as torch writes it")
    done = e["state"] == "completed" or e["retired"] is True
    return (pg, seq, op, numel, _numel(e.get("output_sizes")) if op in SIZE_RULED_OPS else None,
            dtypes[0] if dtypes else None, None, done, created / 1e9, None, None, index, None)


def _prod(dims) -> int:
    """A tensor's numel; TypeError unless every dim is an int. math.prod alone would
    repeat a list 10**9 times for the dims [10**9, [0]]."""
    return math.prod(map(int.__index__, dims))


def _checked_entry(e: dict, index: int) -> tuple:
    name = scalar_text(e.get("profiling_name")) or "?"
    op = sys.intern(name.split(":", 1)[-1])
    pg = e.get("process_group")
    pg = pg if isinstance(pg, (list, tuple)) and pg else ("", "")
    done = e.get("state") == "completed" or bool(e.get("retired"))
    created = e.get("time_created_ns")
    return (scalar_text(pg[0]) or "", as_int(e.get("collective_seq_id")), op,
            int_or_none(_numel(e.get("input_sizes"))), int_or_none(_numel(e.get("output_sizes"))),
            scalar_text(_first(e.get("input_dtypes"))), None, done,
            created / 1e9 if number(created) is not None else None, None, None, index, None)


def _numel(sizes) -> int | None:
    if not isinstance(sizes, list):
        return None
    try:
        if len(sizes) == 1:  # the common case: one tensor
            return _prod(sizes[0])
        return sum(_prod(s) for s in sizes)
    except (TypeError, ValueError, OverflowError):
        return None


def _first(values):
    return values[0] if isinstance(values, list) and values else None




# =======================================================================================
# Columns: one rank's collectives of one source as arrays, not as 10^6 objects.

NO_INT = -(2**63)  # an integer column's "not known" (None), below any real value
_INT_MAX = 2**63 - 1


def int_or_none(value) -> int:
    """An integer column's cell: the value, or NO_INT for a missing, non-integer or
    out-of-range one (an int64 holds any real numel, seq or step)."""
    if type(value) is int and NO_INT < value <= _INT_MAX:
        return value
    if type(value) is float and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return NO_INT


def float_or_nan(value) -> float:
    return float(value) if type(value) in (int, float) else math.nan


COLUMNS = ("group", "seq", "op", "in_numel", "out_numel", "dtype", "group_size", "done",
           "t", "step", "line", "entry", "dur_s")


def make_table(rank: int, file: str, rows: list[tuple]) -> "OpTable":
    """A table from rows of ``COLUMNS`` values (strings, ints, floats or None)."""
    return table_of_columns(rank, file, list(zip(*rows)) if rows else [()] * len(COLUMNS))


def table_of_columns(rank: int, file: str, cols: list) -> "OpTable":
    """A table from ``COLUMNS`` columns (sequences of strings, ints, floats or None).

    Strings (group, op, dtype) become small integer codes into the table's lists: a run
    has a handful of each. Whole columns convert at C speed; only a column holding a
    None or an odd value is converted cell by cell."""
    group, seq, op, in_numel, out_numel, dtype, group_size, done, t, step, line, entry, \
        dur_s = cols
    (group, group_names), (op, op_names), (dtype, dtype_names) = (
        _coded(group), _coded(op), _coded(dtype))
    return OpTable(rank, file, group_names, op_names, dtype_names, group, int_column(seq, 0), op,
                   int_column(in_numel), int_column(out_numel), dtype, int_column(group_size),
                   np.array(done, bool), float_column(t), int_column(step), int_column(line),
                   int_column(entry), float_column(dur_s))


def _coded(texts) -> tuple[np.ndarray, list]:
    names = list(dict.fromkeys(texts))  # first-use order, at C speed
    index = {name: i for i, name in enumerate(n for n in names if n is not None)}
    index[None] = -1
    return np.array(list(map(index.__getitem__, texts)), np.int32), \
        [n for n in names if n is not None]


def int_column(values, default: int = NO_INT) -> np.ndarray:
    """An int64 column; a cell that is None or not an integer in range is ``default``."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64, copy=False)
    if values and values.count(None) == len(values):  # a column no row has (entry, in logs)
        return np.full(len(values), default, np.int64)
    try:
        return np.array(values, np.int64)
    except (TypeError, ValueError, OverflowError):
        cells = [int_or_none(v) for v in values]
        return np.array([default if c == NO_INT else c for c in cells], np.int64)


def float_column(values) -> np.ndarray:
    """A float64 column; a cell that is None or not a number is NaN."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    try:  # None becomes NaN
        return np.array(values, np.float64)
    except (TypeError, ValueError, OverflowError):
        return np.array([float_or_nan(v) for v in values], np.float64)


@dataclass(slots=True, eq=False)
class OpTable:
    """One rank's non-p2p collectives from one source, in record order, as columns.

    Integer cells that are not known hold NO_INT, times NaN, dtypes -1. ``row(i)`` gives
    the ``CollOp`` of row ``i`` for the few rows a finding quotes; ``notes`` carries the
    evidence text (and file) of rows that did not come from the table's file (a
    heartbeat's pending collective)."""

    rank: int
    file: str
    group_names: list
    op_names: list
    dtype_names: list
    group: np.ndarray
    seq: np.ndarray
    op: np.ndarray
    in_numel: np.ndarray
    out_numel: np.ndarray
    dtype: np.ndarray
    group_size: np.ndarray
    done: np.ndarray
    t: np.ndarray
    step: np.ndarray
    line: np.ndarray
    entry: np.ndarray
    dur_s: np.ndarray
    notes: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.seq)

    def row(self, i: int) -> CollOp:
        file, note = self.notes.get(i, (self.file, ""))
        dtype = int(self.dtype[i])
        return CollOp(self.rank, self.group_names[self.group[i]], int(self.seq[i]),
                      self.op_names[self.op[i]], _cell(self.in_numel[i]),
                      _cell(self.out_numel[i]), self.dtype_names[dtype] if dtype >= 0 else None,
                      _cell(self.group_size[i]), DONE if self.done[i] else PENDING,
                      None if math.isnan(self.t[i]) else float(self.t[i]), file,
                      _cell(self.line[i]), note, _cell(self.entry[i]), _cell(self.step[i]))

    def rows(self) -> list[CollOp]:
        return [self.row(i) for i in range(len(self))]

    def where(self, keep: np.ndarray) -> "OpTable":
        """The rows where ``keep`` is true (a window of the run)."""
        if keep.all():
            return self
        cols = {name: getattr(self, name)[keep] for name in COLUMNS}
        return OpTable(self.rank, self.file, self.group_names, self.op_names, self.dtype_names,
                       **cols)


def _cells(r: CollOp) -> tuple:
    return (r.group, r.seq, r.op, r.in_numel, r.out_numel, r.dtype, r.group_size,
            r.state == DONE, r.t, r.step, r.line, r.entry, None)


def _cell(value) -> int | None:
    value = int(value)
    return None if value == NO_INT else value


def ops_table(rows: list[CollOp], rank: int, file: str) -> OpTable:
    """A table from rows (a source that is not read column by column); a row's own file
    and note stay its evidence."""
    table = make_table(rank, file, [_cells(r) for r in rows])
    table.notes = {i: (r.file, r.note) for i, r in enumerate(rows)
                   if r.note or r.file != file}
    return table
