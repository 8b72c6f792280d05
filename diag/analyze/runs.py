"""Which runs the event logs under a path come from, and whether they are one job.

Merging two runs makes up findings: rank 0 of one run against rank 1 of another is a
shape mismatch, and their clocks make a straggler late by hours. So ``analyze`` takes a
folder as one run only when its event logs are:

- one ``run_id`` (logs without one go with the rest), and no rank logged twice: a rank
  that restarts appends to its own file, so two logs of one rank are two runs even under
  one id (a scale test's stages, a reused ``DDIAG_RUN_ID``, a copied run directory);
- or several ids that each host generated for itself (no launcher id, a run directory
  per host), when their world sizes agree and no rank or host is in two of them.

Anything else is refused, naming each run and its folder.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from diag.format.events import RankLog
from diag.format.ranks import as_ranges, ranges_text
from diag.format.rundir import is_generated_run_id


@dataclass(frozen=True)
class Run:
    """One run's event logs: its id, the folder that holds them, its ranks."""

    run_id: str | None
    path: str
    ranks: tuple[int, ...]
    world_size: int | None
    hosts: frozenset[str]
    logs: int

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "path": self.path, "ranks": ranges_text(as_ranges(
            self.ranks)), "world_size": self.world_size, "event_logs": self.logs}

    def __str__(self) -> str:
        return (f"run {self.run_id or '(no id)'} in {self.path} (ranks "
                f"{ranges_text(as_ranges(self.ranks))})")


def runs_of(logs: list[RankLog]) -> list[Run]:
    """The runs the logs come from: grouped by run_id, and a group that logs a rank
    twice split by the folder each log is in."""
    by_id: dict[str | None, list[RankLog]] = defaultdict(list)
    ids = {log.header.get("run_id") for log in logs} - {None}
    for log in logs:
        run_id = log.header.get("run_id")
        by_id[run_id if run_id is not None or len(ids) != 1 else next(iter(ids))].append(log)
    runs = []
    for run_id, group in by_id.items():
        if _ranks_repeat(group):
            by_folder: dict[str, list[RankLog]] = defaultdict(list)
            for log in group:
                by_folder[run_folder(log.path)].append(log)
            runs += [_run(run_id, g) for g in by_folder.values()]
        else:
            runs.append(_run(run_id, group))
    return sorted(runs, key=lambda r: (r.path, str(r.run_id)))


def run_folder(path: str) -> str:
    """The run directory an event log belongs to: the folder above ``events/``."""
    folder = Path(path).parent
    return str(folder.parent if folder.name == "events" else folder)


def _ranks_repeat(logs: list[RankLog]) -> bool:
    return len({log.rank for log in logs}) < len(logs)


def _run(run_id: str | None, logs: list[RankLog]) -> Run:
    folders = sorted({run_folder(log.path) for log in logs})
    sizes = {log.header.get("world_size") for log in logs} - {None}
    return Run(run_id, os.path.commonpath(folders) if len(folders) > 1 else folders[0],
               tuple(sorted(log.rank for log in logs)), max(sizes) if sizes else None,
               frozenset(h for log in logs if (h := log.header.get("host"))), len(logs))


def one_job(runs: list[Run]) -> bool:
    """Whether the runs can be analysed together (see the module docstring)."""
    if len(runs) <= 1:
        return not any(len(set(r.ranks)) < len(r.ranks) for r in runs)
    ranks = [rank for r in runs for rank in r.ranks]
    hosts = [host for r in runs for host in r.hosts]
    return (all(is_generated_run_id(r.run_id) for r in runs)
            and len({r.world_size for r in runs}) == 1
            and len(set(ranks)) == len(ranks) and len(set(hosts)) == len(hosts))


def refusal(root: str, runs: list[Run]) -> str:
    """Why ``root`` is not analysed as one run, and what to pass instead."""
    if len(runs) == 1:
        twice = sorted({r for r in runs[0].ranks if runs[0].ranks.count(r) > 1})
        return (f"{root}: ranks {ranges_text(as_ranges(twice))} each have two event logs "
                f"in {runs[0].path}, so they are from two runs; keep one log per rank "
                "(a restarted rank appends to its own file)")
    return (f"{root} holds {len(runs)} runs, which ddiag analyses one at a time: "
            + "; ".join(map(str, runs)) + f". Pass one of them: ddiag analyze {runs[0].path}")
