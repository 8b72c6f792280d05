"""One collective as one rank issued it: the row every progress and mismatch check uses.

Built for every collective of every rank -- 10^6 rows for a 512-rank event log, 2x10^6
for 1024 Flight Recorder dumps -- so it is a slotted class, and its evidence text is
only composed when a finding quotes it.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

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


def fr_ops(entries: list, rank: int, path: str) -> list[CollOp]:
    """A dump's non-p2p entries as rows, in record order; the dicts can then be freed."""
    return [from_fr_entry(rank, e, path, i) for i, e in enumerate(entries)
            if isinstance(e, dict) and not e.get("is_p2p")]


# Ops whose output size is checked against their input (see detectors.mismatch).
SIZE_RULED_OPS = frozenset({"all_gather_into_tensor", "all_gather_single", "_allgather_base",
                            "allgather_into_tensor_coalesced", "reduce_scatter_tensor",
                            "reduce_scatter_single", "_reduce_scatter_base"})
_op_names: dict[str, str] = {}


def from_fr_entry(rank: int, e: dict, path: str, index: int) -> CollOp:
    """Fast path for entries shaped as torch writes them; anything else goes through the
    checked path, which tolerates every field being missing or of the wrong type."""
    try:
        return _well_formed_entry(rank, e, path, index)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError):
        return _checked_entry(rank, e, path, index)


def _well_formed_entry(rank: int, e: dict, path: str, index: int) -> CollOp:
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
    return CollOp(rank, pg, seq, op, numel,
                  _numel(e.get("output_sizes")) if op in SIZE_RULED_OPS else None,
                  dtypes[0] if dtypes else None, None, DONE if done else PENDING,
                  created / 1e9, path, None, entry=index)


def _prod(dims) -> int:
    """A tensor's numel; TypeError unless every dim is an int. math.prod alone would
    repeat a list 10**9 times for the dims [10**9, [0]]."""
    return math.prod(map(int.__index__, dims))


def _checked_entry(rank: int, e: dict, path: str, index: int) -> CollOp:
    name = scalar_text(e.get("profiling_name")) or "?"
    op = sys.intern(name.split(":", 1)[-1])
    pg = e.get("process_group")
    pg = pg if isinstance(pg, (list, tuple)) and pg else ("", "")
    done = e.get("state") == "completed" or bool(e.get("retired"))
    created = e.get("time_created_ns")
    return CollOp(rank, scalar_text(pg[0]) or "", as_int(e.get("collective_seq_id")), op,
                  _numel(e.get("input_sizes")), _numel(e.get("output_sizes")),
                  scalar_text(_first(e.get("input_dtypes"))), None, DONE if done else PENDING,
                  created / 1e9 if number(created) is not None else None,
                  path, None, entry=index)


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


