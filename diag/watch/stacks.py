"""Every rank's Python stack, now, for a job that imports nothing of ddiag.

The ranks come from ``diag.watch.discover`` (the descendants of a pid that carry a
launcher's RANK/LOCAL_RANK/WORLD_SIZE); each is re-checked to be the same process right
before ``py-spy dump`` attaches to it. The dumps land in ``RUN_DIR/stacks/rankNNNNN.json``
(py-spy's own JSON, which ``ddiag analyze`` reads) beside ``stacks/capture.json``, which
says which pid was which rank and what could not be captured.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from diag.analyze import stackgroups
from diag.format import schema
from diag.format.rundir import RunDir
from diag.verdict import Finding, Severity
from diag.watch.capture import pyspy_dump, write_replacing
from diag.watch.discover import RankProcess, still_rank

CAPTURE_SCHEMA = 1
MAX_PARALLEL = 8  # py-spy attaches stop the rank for a moment; a few at a time


@dataclass(frozen=True)
class StackCapture:
    process: RankProcess
    path: Path | None
    error: str | None

    def to_json(self) -> dict:
        return {**self.process.to_json(), "path": str(self.path) if self.path else None,
                "error": self.error}


def capture(procs: list[RankProcess], run_dir: Path) -> list[StackCapture]:
    """One ``py-spy dump --json`` per rank, a few at a time; then the capture record."""
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(procs)))) as pool:
        out = list(pool.map(lambda p: capture_one(p, run_dir), procs))
    write_record(run_dir, out)
    return out


def capture_one(proc: RankProcess, run_dir: Path) -> StackCapture:
    if not still_rank(proc):
        return StackCapture(proc, None, f"pid {proc.pid} is no longer rank {proc.rank} "
                                        "(it exited, or its pid was reused): not traced")
    dump, why = pyspy_dump(proc.pid)
    if dump is None:
        return StackCapture(proc, None, why)
    path = RunDir(run_dir).path("stacks", proc.rank, ".json")
    write_replacing(path, dump)
    return StackCapture(proc, path, None)


def write_record(run_dir: Path, captures: list[StackCapture]) -> Path:
    path = RunDir(run_dir).path("stacks") / "capture.json"
    doc = {"format": schema.STACKS, "schema": CAPTURE_SCHEMA, "t": time.time(),
           "ranks": [c.to_json() for c in captures]}
    write_replacing(path, json.dumps(doc, indent=1) + "\n")
    return path


@dataclass
class StacksResult:
    """What ``ddiag stacks`` found: the captures, the groups (largest first) and the
    verdict (``stackgroups.verdict``): the odd ones out as a finding, an INFO note when
    every rank waits in one collective, None otherwise."""

    run_dir: Path
    captures: list[StackCapture]
    groups: list[stackgroups.Group]
    finding: Finding | None

    @property
    def names_a_cause(self) -> bool:
        return self.finding is not None and self.finding.severity > Severity.INFO

    @property
    def captured(self) -> int:
        return sum(1 for c in self.captures if c.path is not None)

    def to_json(self) -> dict:
        return {"format": schema.STACKS, "schema": CAPTURE_SCHEMA, "run_dir": str(self.run_dir),
                "captured": self.captured, "ranks": [c.to_json() for c in self.captures],
                "groups": [g.to_json() for g in self.groups],
                "finding": self.finding.to_json() if self.finding else None}


def grouped(captures: list[StackCapture], run_dir: Path) -> StacksResult:
    """Group the captured main-thread stacks and name the odd ones out."""
    stacks = []
    for c in captures:
        if c.path is None:
            continue
        try:
            doc = json.loads(c.path.read_text())
        except (OSError, ValueError):
            continue
        stack = stackgroups.from_pyspy(doc, c.process.rank, str(c.path), c.process.host)
        if stack is not None:
            stacks.append(stack)
    groups = stackgroups.group(stacks)
    return StacksResult(Path(run_dir), captures, groups,
                        stackgroups.verdict(groups, not_captured(captures, stacks)))


def not_captured(captures: list[StackCapture], stacks: list[stackgroups.Stack]) -> tuple:
    """The job's ranks (0 .. WORLD_SIZE-1, as the ranks found say) without a stack: not
    found under the pid (other hosts), or found and not captured."""
    world = max((c.process.world_size for c in captures
                 if type(c.process.world_size) is int), default=0)
    seen = {s.rank for s in stacks}
    return tuple(r for r in range(min(world, 1 << 16)) if r not in seen)
