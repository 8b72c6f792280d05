"""What a run directory's event logs hold, per rank: a value for the CLI to render."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from diag.events import Problem, RankLog, read_run_events
from diag.rundir import RunDir, read_run_json


@dataclass(frozen=True)
class RankSummary:
    """One rank's log. Times are seconds; ``last_seq`` is per process group name."""

    rank: int
    host: str | None
    pid: int | None
    records: int
    steps: int
    last_step: int | None
    step_p50_s: float | None
    collectives: int
    last_seq: dict
    last_loss: float | None
    last_grad_norm: float | None
    exceptions: int
    dropped: int | None


@dataclass(frozen=True)
class RunSummary:
    run_dir: str
    run_id: str | None
    world_size: int | None
    ranks: list[RankSummary]
    missing_ranks: list[int]
    problems: list[Problem]

    def to_json(self) -> dict:
        return {"schema": 1, **asdict(self)}


def summarize_rank(log: RankLog) -> RankSummary:
    steps = log.of_kind("step")
    colls = [r for r in log.of_kind("collective") if not r.get("p2p")]
    last_seq: dict = {}
    for c in colls:
        last_seq[c.get("group", "")] = c.get("seq")
    close = log.of_kind("close")
    durations = [s["dur_s"] for s in steps if isinstance(s.get("dur_s"), (int, float))]
    return RankSummary(
        rank=log.rank, host=log.header.get("host"), pid=log.header.get("pid"),
        records=len(log.records), steps=len(steps),
        last_step=steps[-1].get("step") if steps else None,
        step_p50_s=round(statistics.median(durations), 6) if durations else None,
        collectives=len(log.of_kind("collective")), last_seq=last_seq,
        last_loss=steps[-1].get("loss") if steps else None,
        last_grad_norm=next((s["grad_norm"] for s in reversed(steps) if "grad_norm" in s), None),
        exceptions=len(log.of_kind("exception")),
        dropped=close[-1].get("dropped") if close else None,
    )


def summarize(run_dir: str | Path) -> RunSummary:
    root = Path(run_dir)
    rd = RunDir(root)
    run = read_run_json(rd.run_json) if rd.run_json.exists() else {}
    logs, problems = read_run_events(root)
    ranks = [summarize_rank(logs[r]) for r in sorted(logs)]
    sizes = {log.header.get("world_size") for log in logs.values()} - {None}
    world = max(sizes) if sizes else None
    missing = sorted(set(range(world)) - set(logs)) if world else []
    return RunSummary(str(root), run.get("run_id"), world, ranks, missing, problems)
