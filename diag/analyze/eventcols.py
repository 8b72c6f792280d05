"""Reads event logs as ``analyze`` needs them: collectives and steps as columns.

``format.events.read_events`` gives every record as a dict; a 4096-rank run's 10^7 lines
would not fit that way, and building them is most of the time. Here the two kinds that
make up almost all of a log, non-p2p collectives and steps, are decoded by a typed
decoder (msgspec checks in C the types every consumer relies on) and kept as columns
(``OpTable``, ``StepTable``). Everything else goes through format.events' careful path,
record by record, with the same problems reported: headers, exceptions, closes, spans,
p2p collectives, steps that carry a non-finite value, and any line the typed decoder
refuses (a field of another type, a torn line, a line that is not an object).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from diag.analyze.collops import NO_INT, OpTable, _floats, _ints, as_int, int_or_none, \
    make_table, number, text_or_none
from diag.format.events import Problem, RankLog, _clean_header, _parse, _Problems, _record_ok
from diag.format.infile import open_regular

# Step record fields kept as float columns (NaN: absent); ``phases`` are columns of their own.
STEP_FLOATS = ("t", "dur_s", "iter_s", "comm_s", "comm_wait_s", "loss", "grad_norm", "mono")
# Optional step fields that a record only carries when they were measured.
_ONLY_WHEN_SET = frozenset({"comm_wait_s", "grad_norm", "mono"})


class _Line(msgspec.Struct, gc=False):
    """The fields of a collective or step record that analysis reads, with their types.
    A line where one has another type is refused and read by the careful path, which
    reports it. ``nonfinite``/``sent_nonfinite`` accept only null: a step that carries
    one is rare and kept whole."""

    kind: str | None = None
    rank: int | None = None
    group: str | None = None
    seq: int | None = None
    p2p: bool | None = None
    op: str | None = None
    t: float | None = None
    step: int | None = None
    in_numel: int | None = None
    out_numel: int | None = None
    in_dtype: str | None = None
    group_size: int | None = None
    dur_s: float | None = None
    iter_s: float | None = None
    comm_s: float | None = None
    comm_wait_s: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    mono: float | None = None
    phases: dict[str, float] | None = None
    nonfinite: None = None
    sent_nonfinite: None = None


_decode = msgspec.json.Decoder(_Line).decode


@dataclass(eq=False)
class StepTable:
    """One rank's step records as columns, in record order (NaN: not recorded)."""

    rank: int | None
    step: np.ndarray
    line: np.ndarray
    floats: dict[str, np.ndarray]
    phases: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.step)

    def col(self, name: str) -> np.ndarray:
        return self.floats[name]

    def work(self) -> np.ndarray:
        """Per step: the time in all its phases (data, forward, backward, optimizer)."""
        total = np.zeros(len(self))
        for values in self.phases.values():
            total += np.nan_to_num(values)
        return total

    def row(self, i: int) -> dict:
        rec = {"kind": "step", "rank": self.rank, "step": _int(self.step[i])}
        for name, values in self.floats.items():
            value = float(values[i])
            if not math.isnan(value):
                rec[name] = value
            elif name not in _ONLY_WHEN_SET:
                rec[name] = None
        rec["phases"] = {n: float(v[i]) for n, v in self.phases.items() if not math.isnan(v[i])}
        return rec


def _int(value) -> int | None:
    return None if int(value) == NO_INT else int(value)


def steps_table(rank: int | None, rows: list[tuple]) -> StepTable:
    """A table from (line, step, phases, *STEP_FLOATS) rows."""
    cols = list(zip(*rows)) if rows else [()] * (3 + len(STEP_FLOATS))
    lines, steps, phases = cols[:3]
    floats = {name: _float_column(values) for name, values in zip(STEP_FLOATS, cols[3:])}
    names = sorted({n for p in phases if p for n in p})
    by_phase = {n: _float_column([p.get(n) if p else None for p in phases]) for n in names}
    return StepTable(rank, _ints(steps),
                     np.array(lines, np.int64), floats, by_phase)


def _float_column(values) -> np.ndarray:
    """Cells are floats, ints or None (NaN); the careful path made them so."""
    return _floats(values)


@dataclass(eq=False)
class CompactLog(RankLog):
    """A segment read by ``read_compact``: ``records``/``lines`` hold only the records
    kept whole; collectives and steps are in ``ops`` and ``steps``."""

    ops: OpTable | None = None
    steps: StepTable | None = None

    def of_kind(self, kind: str) -> list[dict]:
        kept = super().of_kind(kind)
        if kind == "step" and self.steps is not None:
            whole = {line: rec for rec, line in zip(self.records, self.lines)
                     if rec.get("kind") == "step"}
            return [whole.get(int(line)) or self.steps.row(i)
                    for i, line in enumerate(self.steps.line)]
        if kind == "collective" and self.ops is not None:
            return kept + [_coll_dict(self.ops, i) for i in range(len(self.ops))]
        return kept

    def step_row(self, i: int) -> dict:
        """Step ``i`` as a dict: the record itself when it was kept whole."""
        line = int(self.steps.line[i])
        whole = next((r for r, n in zip(self.records, self.lines)
                      if n == line and r.get("kind") == "step"), None)
        return whole or self.steps.row(i)

    @property
    def n_records(self) -> int:
        """Records in the segment, whichever way each is kept."""
        whole_steps = sum(1 for r in self.records if r.get("kind") == "step")
        return len(self.records) + len(self.ops or ()) + len(self.steps or ()) - whole_steps

    def count(self, kind: str) -> int:
        """How many records of ``kind`` the segment holds."""
        if kind == "step" and self.steps is not None:
            return len(self.steps)
        extra = len(self.ops) if kind == "collective" and self.ops is not None else 0
        return extra + sum(1 for r in self.records if r.get("kind") == kind)


def _coll_dict(ops: OpTable, i: int) -> dict:
    row = ops.row(i)
    dur = float(ops.dur_s[i])
    return {"kind": "collective", "rank": ops.rank, "op": row.op, "group": row.group,
            "seq": row.seq, "t": row.t, "step": row.step, "in_numel": row.in_numel,
            "out_numel": row.out_numel, "in_dtype": row.dtype, "group_size": row.group_size,
            "dur_s": None if math.isnan(dur) else dur}


class _Segment:
    """One segment being read: its kept records, and its collective and step rows."""

    def __init__(self, path: str, header: dict | None) -> None:
        self.log = CompactLog(path, header)
        self.colls: list = []  # (line, _Line) fast rows or (line, cells) careful ones
        self.steps: list = []
        self.careful = False  # rows of both shapes: sort by line before building

    def freeze(self) -> CompactLog:
        log, rank = self.log, self.log.rank if self.log.header else -1
        log.ops = make_table(rank, log.path, _coll_cells(self.colls, self.careful))
        log.steps = steps_table(log.rank, _step_cells(self.steps, self.careful))
        return log


def _coll_cells(rows: list, careful: bool) -> list[tuple]:
    cells = [(r.group or "", r.seq or 0, "None" if r.op is None else r.op, r.in_numel, r.out_numel, r.in_dtype,
              r.group_size, True, r.t, -1 if r.step is None else r.step, line, None, r.dur_s)
             if type(r) is _Line else r for line, r in rows]
    return sorted(cells, key=lambda c: c[10]) if careful else cells


def _step_cells(rows: list, careful: bool) -> list[tuple]:
    cells = [(line, r.step, r.phases, r.t, r.dur_s, r.iter_s, r.comm_s, r.comm_wait_s, r.loss,
              r.grad_norm, r.mono) if type(r) is _Line else r for line, r in rows]
    return sorted(cells, key=lambda c: c[0]) if careful else cells


def _careful_coll(rec: dict, line: int) -> tuple:
    get = rec.get
    group = get("group")
    return ("" if group is None else str(group), as_int(get("seq")), str(get("op")),
            int_or_none(number(get("in_numel"))), int_or_none(number(get("out_numel"))),
            text_or_none(get("in_dtype")), int_or_none(number(get("group_size"))), True,
            number(get("t")), as_int(get("step"), -1), line, None, number(get("dur_s")))


def _careful_step(rec: dict, line: int) -> tuple:
    phases = rec.get("phases")
    phases = {k: v for k, v in phases.items() if type(v) in (int, float)} \
        if isinstance(phases, dict) else None
    return (line, rec.get("step"), phases, *(number(rec.get(n)) for n in STEP_FLOATS))


def read_compact(path: str | Path) -> tuple[list[CompactLog], list[Problem]]:
    """All segments of one events file, collectives and steps as columns, and the
    problems met while reading it (the same as ``read_events`` reports)."""
    path = str(path)
    segments: list[_Segment] = []
    problems = _Problems(path)
    current: _Segment | None = None
    rejected = False  # the segment's header was unusable: its records go with it
    with open_regular(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                fast = _decode(raw)
            except msgspec.DecodeError:
                fast = None
            if fast is not None and fast.kind in ("collective", "step") and not fast.p2p:
                if rejected:
                    continue
                if current is None:
                    current = _orphan(segments, path, lineno, problems)
                (current.colls if fast.kind == "collective" else current.steps).append(
                    (lineno, fast))
                continue
            record = _parse(raw, lineno, problems)
            if record is None:
                continue
            if record.get("kind") == "header":
                header = _clean_header(record, lineno, problems)
                rejected, current = header is None, None
                if header is not None:
                    current = _Segment(path, header)
                    segments.append(current)
                continue
            if rejected or not _record_ok(record, lineno, problems):
                continue
            if current is None:
                current = _orphan(segments, path, lineno, problems)
            _keep(current, record, lineno)
    return [s.freeze() for s in segments], problems.all()


def _orphan(segments: list, path: str, lineno: int, problems: _Problems) -> _Segment:
    segment = _Segment(path, None)
    segments.append(segment)
    problems.add(lineno, "records before any header")
    return segment


def _keep(segment: _Segment, record: dict, lineno: int) -> None:
    """A record the typed decoder did not take: a collective or step goes into the
    columns (a step also kept whole: it may carry a non-finite value), the rest whole."""
    kind = record.get("kind")
    if kind == "collective" and not record.get("p2p"):
        segment.colls.append((lineno, _careful_coll(record, lineno)))
        segment.careful = True
        return
    if kind == "step":
        segment.steps.append((lineno, _careful_step(record, lineno)))
        segment.careful = True
    segment.log.records.append(record)
    segment.log.lines.append(lineno)


def ops_of(log: RankLog) -> OpTable:
    """A log's non-p2p collectives as a table, whichever reader read it."""
    if isinstance(log, CompactLog) and log.ops is not None:
        return log.ops
    rows = [_careful_coll(r, line) for r, line in zip(log.records, log.lines)
            if r.get("kind") == "collective" and not r.get("p2p")]
    return make_table(log.rank if log.rank is not None else -1, log.path, rows)


def steps_of(log: RankLog) -> StepTable:
    """A log's steps as a table, whichever reader read it."""
    if isinstance(log, CompactLog) and log.steps is not None:
        return log.steps
    return steps_table(log.rank, [_careful_step(r, line) for r, line in
                                  zip(log.records, log.lines) if r.get("kind") == "step"])


def all_records(log: RankLog) -> list[dict]:
    """Every record of a segment as a dict, in file order, for renderers that show them
    all (the trace view); the analysis itself never asks for this."""
    if not isinstance(log, CompactLog):
        return log.records
    rows = list(zip(log.lines, log.records))
    whole_steps = {line for line, r in rows if r.get("kind") == "step"}
    if log.steps is not None:
        rows += [(int(n), log.steps.row(i)) for i, n in enumerate(log.steps.line)
                 if int(n) not in whole_steps]
    if log.ops is not None:
        rows += [(int(log.ops.line[i]), _coll_dict(log.ops, i)) for i in range(len(log.ops))]
    return [r for _, r in sorted(rows, key=lambda pair: pair[0])]
