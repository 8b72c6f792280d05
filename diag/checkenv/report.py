"""Run the checks and merge them into one report: per rank, then across ranks.

Identical results of many ranks become one row listing those ranks and nodes, so a
healthy 1000-rank job reads as a few dozen rows and a broken node stands out.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from diag.format import schema
from diag.checkenv import (
    checks_gpu, checks_host, checks_launch, checks_master, checks_net, checks_vars,
)
from diag.checkenv.checks_cross import run_cross
from diag.checkenv.facts import RankFacts
from diag.checkenv.snapshot import Snapshot
from diag.checkenv.types import CheckResult, warn
from diag.verdict import Status

LOCAL_CHECKS = (checks_vars.CHECKS + checks_net.CHECKS + checks_master.CHECKS +
                checks_launch.CHECKS + checks_host.CHECKS + checks_gpu.CHECKS)
ORDER = {Status.FAIL: 0, Status.WARN: 1, Status.OK: 2, Status.SKIP: 3}


def run_local(facts: RankFacts) -> tuple[CheckResult, ...]:
    """Every per-rank check; one that raises is reported, never stops the others."""
    out: list[CheckResult] = []
    for check in LOCAL_CHECKS:
        try:
            out += check(facts)
        except Exception as exc:  # noqa: BLE001 - a check's bug must not hide the rest
            out.append(warn(f"internal.{check.__name__}", f"check raised {type(exc).__name__}:"
                            f" {exc}", "report this as a ddiag bug"))
    return tuple(out)


def attach(results: Sequence[CheckResult], rank: int, node: str) -> list[CheckResult]:
    """Stamp per-rank results with the rank and node they came from."""
    return [_placed(r, r.culprit.ranks or (rank,), r.culprit.hosts or (node,)) for r in results]


def _placed(result: CheckResult, ranks: tuple[int, ...], nodes: tuple[str, ...]) -> CheckResult:
    return dataclasses.replace(result, culprit=dataclasses.replace(
        result.culprit, ranks=ranks, hosts=nodes))


def merge(results: Sequence[CheckResult]) -> list[CheckResult]:
    """Collapse results that differ only in rank/node; worst first, then by check."""
    rows: dict[tuple, tuple[set, set]] = defaultdict(lambda: (set(), set()))
    first: dict[tuple, CheckResult] = {}
    for r in results:
        key = (r.check, r.status, r.summary, r.fix, r.culprit.env_var, r.category, r.evidence)
        first.setdefault(key, r)
        rows[key][0].update(r.culprit.ranks)
        rows[key][1].update(r.culprit.hosts)
    merged = [_placed(first[k], tuple(sorted(rk)), tuple(sorted(nd)))
              for k, (rk, nd) in rows.items()]
    return sorted(merged, key=lambda r: (ORDER[r.status], r.check, r.culprit.hosts, r.summary))


@dataclass(frozen=True)
class Report:
    """The merged verdict of one check-env run."""

    results: tuple[CheckResult, ...]
    world_size: int | None
    nodes: dict[str, list[int]]
    """node -> ranks on it, from the snapshots that arrived."""
    missing_ranks: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()
    """Snapshots that could not be read, and why."""
    run_dir: str | None = None
    mode: str = "local"

    @property
    def status(self) -> Status:
        statuses = {r.status for r in self.results}
        return next((s for s in (Status.FAIL, Status.WARN) if s in statuses), Status.OK)

    def count(self, status: Status) -> int:
        return sum(r.status is status for r in self.results)

    def to_json(self) -> dict:
        return {**schema.stamp(schema.CHECK_ENV), "status": self.status.value,
                "mode": self.mode, "run_dir": self.run_dir, "world_size": self.world_size,
                "nodes": self.nodes, "missing_ranks": list(self.missing_ranks),
                "summary": {s.value: self.count(s) for s in Status},
                "problems": list(self.problems),
                "results": [r.to_json() for r in self.results]}


def build_report(snaps: Sequence[Snapshot], world_size: int | None, *, cross: bool = True,
                 problems: Sequence[str] = (), run_dir: str | None = None,
                 mode: str = "local", launch: Sequence[CheckResult] = ()) -> Report:
    """``launch``: results about the launch itself, from outside the ranks (the
    rendezvous pre-flight, ranks that never wrote a snapshot)."""
    local = list(launch) + [r for s in snaps for r in attach(s.results, s.rank, s.node)]
    across = run_cross(snaps, world_size) if cross else []
    nodes: dict[str, list[int]] = defaultdict(list)
    for s in sorted(snaps, key=lambda s: s.rank):
        nodes[s.node].append(s.rank)
    missing = sorted(set(range(world_size or 0)) - {s.rank for s in snaps})
    return Report(tuple(merge(local + across)), world_size, dict(nodes), tuple(missing),
                  tuple(problems), run_dir, mode)
