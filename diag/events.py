"""Reads per-rank event logs back, tolerating what a killed or full-disk writer leaves.

A file may hold several segments (a rank restarted into the same run directory); each
starts at a header record. A torn or corrupt line is skipped and reported with its line
number, never raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from diag import schema
from diag.rundir import RunDir

try:  # a 512-rank run is ~10^6 lines: orjson parses them ~4x faster than json
    from orjson import loads as json_loads
except ImportError:  # pragma: no cover - orjson is a dependency; stay usable without it
    from json import loads as json_loads


@dataclass
class Problem:
    """Something wrong with an input file; reported, never fatal."""

    file: str
    line: int | None
    message: str


@dataclass
class RankLog:
    """One segment of one rank's event log: its header and records in file order.

    ``lines[i]`` is the 1-based line number of ``records[i]``, so findings can quote
    file:line evidence.
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


def read_events(path: str | Path) -> tuple[list[RankLog], list[Problem]]:
    """All segments of one events file, and the problems met while reading it."""
    path = Path(path)
    segments: list[RankLog] = []
    problems: list[Problem] = []
    current: RankLog | None = None
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            record = _parse(raw, str(path), lineno, problems)
            if record is None:
                continue
            if record.get("kind") == "header":
                if not _header_ok(record, str(path), lineno, problems):
                    current = None
                    continue
                current = RankLog(str(path), record)
                segments.append(current)
            elif current is None:
                current = RankLog(str(path), None)
                segments.append(current)
                problems.append(Problem(str(path), lineno, "records before any header"))
            if record.get("kind") != "header":
                current.records.append(record)
                current.lines.append(lineno)
    return segments, problems


def _parse(raw: bytes, source: str, lineno: int, problems: list[Problem]) -> dict | None:
    if not raw.strip():
        return None
    try:
        record = json_loads(raw)
    except ValueError:
        torn = not raw.endswith(b"\n")
        problems.append(Problem(source, lineno, "torn last line (writer killed mid-write)"
                                if torn else "line is not valid JSON; skipped"))
        return None
    if not isinstance(record, dict):
        problems.append(Problem(source, lineno, "line is not a JSON object; skipped"))
        return None
    return record


def _header_ok(header: dict, source: str, lineno: int, problems: list[Problem]) -> bool:
    try:
        schema.check(header, schema.EVENTS, f"{source}:{lineno}")
        return True
    except schema.SchemaError as exc:
        problems.append(Problem(source, lineno, str(exc)))
        return False


def read_run_events(run_dir: str | Path, all_segments: bool = False
                    ) -> tuple[dict[int, RankLog], list[Problem]]:
    """The latest segment of every rank's log in a run directory, keyed by rank."""
    logs: dict[int, RankLog] = {}
    problems: list[Problem] = []
    events_dir = RunDir(Path(run_dir)).path("events")
    for path in sorted(events_dir.glob("rank*.jsonl")):
        segments, found = read_events(path)
        problems.extend(found)
        for seg in segments if all_segments else segments[-1:]:
            if seg.rank is not None:
                logs[seg.rank] = seg
    return logs, problems
