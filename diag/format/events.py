"""Reads per-rank event logs back, tolerating what a killed or full-disk writer leaves.

A file may hold several segments (a rank restarted into the same run directory); each
starts at a header record. A torn or corrupt line is skipped and reported with its line
number, never raised. Headers and records are checked here, once, for the types every
consumer relies on (rank, world_size, host, run_id, group, seq), so what comes out is
clean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from diag.format import schema
from diag.format.infile import open_regular, reason
from diag.format.rundir import RunDir

try:  # a 512-rank run is ~10^6 lines: orjson parses them ~4x faster than json
    from orjson import loads as json_loads
except ImportError:  # pragma: no cover - orjson is a dependency; stay usable without it
    from json import loads as json_loads

# A corrupt million-line log must not become a million problems: the first ones are kept
# and the rest counted.
MAX_PROBLEMS_PER_FILE = 100


@dataclass
class Problem:
    """Something wrong with an input file; reported, never fatal."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


@dataclass
class RankLog:
    """One segment of one rank's event log: its header and records in file order.

    ``lines[i]`` is the 1-based line number of ``records[i]``, so findings can quote
    file:line evidence. A header's rank is an int in [0, world_size), world_size an int
    in [1, schema.MAX_WORLD_SIZE] or None, host and run_id a str or None.
    """

    path: str
    header: dict | None
    records: list[dict] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)

    @property
    def rank(self) -> int | None:
        return self.header.get("rank") if self.header else None

    def of_kind(self, kind: str) -> list[dict]:
        return [r for r in self.records if r.get("kind") == kind]


class _Problems:
    """One file's problems: the first MAX_PROBLEMS_PER_FILE, then a count of the rest."""

    def __init__(self, source: str) -> None:
        self.source, self.kept, self.more = source, [], 0

    def add(self, line: int | None, message: str) -> None:
        if len(self.kept) < MAX_PROBLEMS_PER_FILE:
            self.kept.append(Problem(self.source, line, message))
        else:
            self.more += 1

    def all(self) -> list[Problem]:
        if not self.more:
            return self.kept
        return self.kept + [Problem(self.source, None, f"{self.more} more problems not listed")]


def read_events(path: str | Path) -> tuple[list[RankLog], list[Problem]]:
    """All segments of one events file, and the problems met while reading it."""
    path = Path(path)
    segments: list[RankLog] = []
    problems = _Problems(str(path))
    current: RankLog | None = None
    rejected = False  # the segment's header was unusable: its records go with it
    with open_regular(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            record = _parse(raw, lineno, problems)
            if record is None:
                continue
            if record.get("kind") == "header":
                header = _clean_header(record, lineno, problems)
                rejected, current = header is None, None
                if header is not None:
                    current = RankLog(str(path), header)
                    segments.append(current)
                continue
            if rejected or not _record_ok(record, lineno, problems):
                continue
            if current is None:
                current = RankLog(str(path), None)
                segments.append(current)
                problems.add(lineno, "records before any header")
            current.records.append(record)
            current.lines.append(lineno)
    return segments, problems.all()


def _parse(raw: bytes, lineno: int, problems: _Problems) -> dict | None:
    if not raw.strip():
        return None
    try:
        record = json_loads(raw)
    except ValueError:
        torn = not raw.endswith(b"\n")
        problems.add(lineno, "torn last line (writer killed mid-write)"
                     if torn else "line is not valid JSON; skipped")
        return None
    if not isinstance(record, dict):
        problems.add(lineno, "line is not a JSON object; skipped")
        return None
    return record


def _clean_header(header: dict, lineno: int, problems: _Problems) -> dict | None:
    """The header with its types checked: None (the segment skipped) when its rank is
    unusable; a wrongly typed optional field is dropped with a problem."""
    try:
        schema.check(header, schema.EVENTS, problems.source)
    except schema.SchemaError as exc:
        problems.add(lineno, exc.reason)
        return None
    rank, world = header.get("rank"), header.get("world_size")
    if not _is_int(rank) or not 0 <= rank < schema.MAX_WORLD_SIZE:
        problems.add(lineno, f"header: rank must be an integer in [0, "
                     f"{schema.MAX_WORLD_SIZE}), got {_short(rank)}; its records are skipped")
        return None
    header = {**header, **_dropped_fields(header, lineno, problems)}
    world = header.get("world_size")
    if world is not None and rank >= world:
        problems.add(lineno, f"header: rank {rank} is not below world_size {world}; "
                     "its records are skipped")
        return None
    return header


def _dropped_fields(header: dict, lineno: int, problems: _Problems) -> dict:
    dropped = {}
    for name, ok, want in _HEADER_FIELDS:
        value = header.get(name)
        if value is not None and not ok(value):
            problems.add(lineno, f"header: {name} must be {want}, got {_short(value)}; "
                         "read as unknown")
            dropped[name] = None
    return dropped


def _is_int(value) -> bool:
    return type(value) is int  # bool is an int subclass, and no rank


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_HEADER_FIELDS = (
    ("world_size", lambda v: _is_int(v) and 1 <= v <= schema.MAX_WORLD_SIZE,
     f"an integer in [1, {schema.MAX_WORLD_SIZE}]"),
    ("host", lambda v: isinstance(v, str), "a string"),
    ("run_id", lambda v: isinstance(v, str), "a string"),
    ("pid", _is_int, "an integer"),
    ("local_rank", _is_int, "an integer"),
)


_RECORD_TYPES = (("rank", int, "an integer"), ("seq", int, "an integer"),
                 ("group", str, "a string"))


def _record_ok(record: dict, lineno: int, problems: _Problems) -> bool:
    """Records whose rank, seq or group has the wrong type are skipped: detectors key
    tables on them and compare them."""
    for name, kind, want in _RECORD_TYPES:
        value = record.get(name)
        if value is not None and type(value) is not kind:
            problems.add(lineno, f"{record.get('kind')!s:.20} record: {name} must be {want}, "
                         f"got {_short(value)}; skipped")
            return False
    return True


def read_run_events(run_dir: str | Path, all_segments: bool = False, read_all=None
                    ) -> tuple[dict[int, RankLog], list[Problem]]:
    """The latest segment of every rank's log in a run directory, keyed by rank.
    ``read_all(paths)`` reads the files, giving (segments, problems) per path (default:
    ``read_events``, one after the other)."""
    logs: dict[int, RankLog] = {}
    problems: list[Problem] = []
    paths = sorted(RunDir(Path(run_dir)).path("events").glob("rank*.jsonl"))
    for path, (segments, found) in zip(paths, (read_all or _read_each)(paths)):
        problems.extend(found)
        for seg in segments if all_segments else segments[-1:]:
            if seg.rank is None:
                continue
            if seg.rank in logs and logs[seg.rank].path != seg.path:
                problems.append(Problem(seg.path, None, f"rank {seg.rank} is logged in "
                                        f"{logs[seg.rank].path} too; this file is read"))
            logs[seg.rank] = seg
    return logs, problems


def _read_each(paths: list[Path]) -> list[tuple[list[RankLog], list[Problem]]]:
    out = []
    for path in paths:
        try:
            out.append(read_events(path))
        except OSError as exc:
            out.append(([], [Problem(str(path), None, reason(exc))]))
    return out
