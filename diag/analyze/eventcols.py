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
from operator import attrgetter, itemgetter
from pathlib import Path

import msgspec
import numpy as np

from diag.analyze.collops import (NO_INT, OpTable, as_int, float_column, int_column,
                                  int_or_none, make_table, number, table_of_columns,
                                  text_or_none)
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

    def where(self, keep: np.ndarray) -> "StepTable":
        """The steps where ``keep`` is true (a window of the run)."""
        if keep.all():
            return self
        return StepTable(self.rank, self.step[keep], self.line[keep],
                         {n: v[keep] for n, v in self.floats.items()},
                         {n: v[keep] for n, v in self.phases.items()})

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
    return steps_of_columns(rank, list(zip(*rows)) if rows else [()] * (3 + len(STEP_FLOATS)))


def steps_of_columns(rank: int | None, cols: list) -> StepTable:
    """A table from (line, step, phases, *STEP_FLOATS) columns."""
    lines, steps, phases = cols[:3]
    floats = {name: float_column(values) for name, values in zip(STEP_FLOATS, cols[3:])}
    return StepTable(rank, int_column(steps), np.array(lines, np.int64), floats,
                     _phase_columns(phases))


def _phase_columns(phases) -> dict[str, np.ndarray]:
    """Phase name -> its time per step (NaN where a step lacks it). When every step has
    the first step's phases, they are taken at C speed."""
    first = next((p for p in phases if p), None)
    if first:
        names = sorted(first)
        try:
            columns = zip(*map(itemgetter(*names), phases)) if len(names) > 1 else \
                [[p[names[0]] for p in phases]]
            if all(len(p) == len(names) for p in phases):
                return {n: float_column(c) for n, c in zip(names, columns)}
        except (KeyError, TypeError):
            pass  # a step without phases, or with others
    names = sorted({n for p in phases if p for n in p})
    return {n: float_column([p.get(n) if p else None for p in phases]) for n in names}


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
    """One segment being read: its kept records, and its collective and step rows, those
    the typed decoder took (structs, with their line numbers) and the careful path's."""

    def __init__(self, path: str, header: dict | None) -> None:
        self.log = CompactLog(path, header)
        self.colls: list[_Line] = []
        self.coll_lines: list[int] = []
        self.steps: list[_Line] = []
        self.step_lines: list[int] = []
        self.careful_colls: list[tuple] = []  # COLUMNS cells
        self.careful_steps: list[tuple] = []  # (line, step, phases, *STEP_FLOATS)

    def freeze(self) -> CompactLog:
        log, rank = self.log, self.log.rank if self.log.header else -1
        colls = _coll_columns(self.colls, self.coll_lines)
        if self.careful_colls:
            rows = sorted([*zip(*colls), *self.careful_colls], key=lambda c: c[10])
            log.ops = make_table(rank, log.path, rows)
        else:
            log.ops = table_of_columns(rank, log.path, colls)
        steps = _step_columns(self.steps, self.step_lines)
        if self.careful_steps:
            rows = sorted([*zip(*steps), *self.careful_steps], key=lambda c: c[0])
            steps = list(zip(*rows)) if rows else steps
        log.steps = steps_of_columns(log.rank, steps)
        return log


_COLL_FIELDS = attrgetter("group", "seq", "op", "in_numel", "out_numel", "in_dtype",
                          "group_size", "t", "step", "dur_s")
_STEP_FIELDS = attrgetter("step", "phases", *STEP_FLOATS)


def _coll_columns(rows: list[_Line], lines: list[int]) -> list:
    """``COLUMNS`` columns of decoded collectives, with read_events' defaults (a missing
    group is "", seq 0, op "None", step -1). Fields are taken at C speed (attrgetter,
    then a transpose); a column is only walked in Python when it holds a None."""
    n = len(rows)
    if not n:
        return [()] * 13
    group, seq, op, in_numel, out_numel, dtype, group_size, t, step, dur = \
        zip(*map(_COLL_FIELDS, rows))
    group, seq, op, step = (_defaulted(c, d) for c, d in (
        (group, ""), (seq, 0), (op, "None"), (step, -1)))
    return [group, seq, op, in_numel, out_numel, dtype, group_size, (True,) * n, t, step,
            lines, (None,) * n, dur]


def _defaulted(column: tuple, default) -> tuple:
    return tuple(default if v is None else v for v in column) if None in column else column


def _step_columns(rows: list[_Line], lines: list[int]) -> list:
    """(line, step, phases, *STEP_FLOATS) columns of decoded steps."""
    if not rows:
        return [()] * (3 + len(STEP_FLOATS))
    return [lines, *zip(*map(_STEP_FIELDS, rows))]


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


BLOCK_BYTES = 16 << 20  # read and decode this much at a time: bounded, and few calls


@dataclass(frozen=True)
class Window:
    """The part of a run to analyse: steps ``first``..``last`` (either open) and records
    stamped at or after ``since`` (wall time). Rows without a step or time stay in."""

    first: int | None = None
    last: int | None = None
    since: float | None = None

    def keep(self, step: np.ndarray, t: np.ndarray) -> np.ndarray:
        keep = np.ones(len(step), bool)
        known = step != NO_INT
        if self.first is not None:
            keep &= ~known | (step >= self.first)
        if self.last is not None:
            keep &= ~known | (step <= self.last)
        if self.since is not None:
            keep &= np.isnan(t) | (t >= self.since)
        return keep

    def __str__(self) -> str:
        parts = []
        if self.first is not None or self.last is not None:
            parts.append(f"steps {'' if self.first is None else self.first}:"
                         f"{'' if self.last is None else self.last}")
        if self.since is not None:
            parts.append(f"since t={self.since:.0f}")
        return ", ".join(parts)


def read_compact(path: str | Path, window: Window | None = None
                 ) -> tuple[list[CompactLog], list[Problem]]:
    """All segments of one events file, collectives and steps as columns (only those in
    ``window`` when given), and the problems met while reading it (the same as
    ``read_events`` reports)."""
    reader = _Reader(str(path))
    with open_regular(path) as fh:
        reader.read(fh)
    logs = [s.freeze() for s in reader.segments]
    if window is not None:
        for log in logs:
            log.ops = log.ops.where(window.keep(log.ops.step, log.ops.t))
            log.steps = log.steps.where(window.keep(log.steps.step, log.steps.col("t")))
    return logs, reader.problems.all()


class _Reader:
    """The reading state of one file: its segments so far, the one being filled, and
    whether the last header was refused (its records go with it)."""

    def __init__(self, path: str) -> None:
        self.path, self.problems = path, _Problems(path)
        self.segments: list[_Segment] = []
        self.current: _Segment | None = None
        self.rejected = False

    def read(self, fh) -> None:
        """Block by block: a block whose every line the typed decoder takes is decoded
        in one pass and sorted with comprehensions; any other, line by line."""
        base, rest = 0, b""
        while data := fh.read(BLOCK_BYTES):
            data = rest + data
            cut = data.rfind(b"\n") + 1
            block, rest = data[:cut], data[cut:]
            lines = block.split(b"\n")[:-1]
            try:
                recs = list(map(_decode, lines))
            except msgspec.DecodeError:
                self.lines(base, [line + b"\n" for line in lines])
            else:
                self.block(base, lines, recs)
            base += len(lines)
        if rest:  # a last line without its newline: torn, or complete but unterminated
            self.lines(base, [rest])

    def lines(self, base: int, lines: list[bytes]) -> None:
        for lineno, raw in enumerate(lines, base + 1):
            try:
                fast = _decode(raw)
            except msgspec.DecodeError:
                fast = None
            if fast is not None and fast.kind in ("collective", "step") and not fast.p2p:
                self.rows(lineno, [fast])
            else:
                self.careful(lineno, raw)

    def block(self, base: int, lines: list[bytes], recs: list[_Line]) -> None:
        """Runs of collectives and steps go to the columns whole; the records between
        them (headers, closes, p2p, ...) through the careful path, in order."""
        special = [i for i, r in enumerate(recs)
                   if r.p2p or (r.kind != "collective" and r.kind != "step")]
        start = 0
        for i in [*special, len(recs)]:
            if i > start:
                self.rows(base + start + 1, recs[start:i])
            if i < len(recs):
                self.careful(base + i + 1, lines[i] + b"\n")
            start = i + 1

    def rows(self, first_line: int, recs: list[_Line]) -> None:
        """Consecutive collective and step records starting at ``first_line``."""
        if self.rejected:
            return
        if self.current is None:
            self.current = self.orphan(first_line)
        seg = self.current
        if all(r.kind == "collective" for r in recs):
            seg.colls += recs
            seg.coll_lines += range(first_line, first_line + len(recs))
            return
        is_coll = [r.kind == "collective" for r in recs]
        seg.colls += [r for r, c in zip(recs, is_coll) if c]
        seg.coll_lines += [n for n, c in enumerate(is_coll, first_line) if c]
        seg.steps += [r for r, c in zip(recs, is_coll) if not c]
        seg.step_lines += [n for n, c in enumerate(is_coll, first_line) if not c]

    def careful(self, lineno: int, raw: bytes) -> None:
        record = _parse(raw, lineno, self.problems)
        if record is None:
            return
        if record.get("kind") == "header":
            header = _clean_header(record, lineno, self.problems)
            self.rejected, self.current = header is None, None
            if header is not None:
                self.current = _Segment(self.path, header)
                self.segments.append(self.current)
            return
        if self.rejected or not _record_ok(record, lineno, self.problems):
            return
        if self.current is None:
            self.current = self.orphan(lineno)
        _keep(self.current, record, lineno)

    def orphan(self, lineno: int) -> _Segment:
        segment = _Segment(self.path, None)
        self.segments.append(segment)
        self.problems.add(lineno, "records before any header")
        return segment


def _keep(segment: _Segment, record: dict, lineno: int) -> None:
    """A record the typed decoder did not take: a collective or step goes into the
    columns (a step also kept whole: it may carry a non-finite value), the rest whole."""
    kind = record.get("kind")
    if kind == "collective" and not record.get("p2p"):
        segment.careful_colls.append(_careful_coll(record, lineno))
        return
    if kind == "step":
        segment.careful_steps.append(_careful_step(record, lineno))
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
