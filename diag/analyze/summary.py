"""What a run directory's event logs hold, per rank: a value for the CLI to render."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from diag.analyze.eventcols import CompactLog, ops_of, steps_of
from diag.analyze.inputs import read_event_files
from diag.format.events import Problem, RankLog, read_run_events
from diag.format.ranks import as_ranges, first_ranks, missing_ranges, ranges_text
from diag.format.rundir import RunDir, read_run_json


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
    """``missing_ranks`` lists the first ranks.MAX_LISTED_RANKS ranks without a log;
    ``missing_rank_ranges`` holds them all as (first, last) pairs."""

    run_dir: str
    run_id: str | None
    world_size: int | None
    ranks: list[RankSummary]
    missing_ranks: list[int]
    problems: list[Problem]
    missing_rank_ranges: list[tuple[int, int]] = ()

    def to_json(self) -> dict:
        return {"schema": 1, **asdict(self)}


def summarize_rank(log: RankLog) -> RankSummary:
    steps, ops = steps_of(log), ops_of(log)
    durations = steps.col("dur_s")
    durations = durations[~np.isnan(durations)]
    norms = steps.col("grad_norm")
    norms = norms[~np.isnan(norms)]
    last = _step_dict(log, len(steps) - 1) if len(steps) else None
    close = log.of_kind("close")
    return RankSummary(
        rank=log.rank, host=log.header.get("host"), pid=log.header.get("pid"),
        records=log.n_records if isinstance(log, CompactLog) else len(log.records),
        steps=len(steps), last_step=last.get("step") if last else None,
        step_p50_s=round(float(np.median(durations)), 6) if len(durations) else None,
        collectives=_count(log, "collective"), last_seq=_last_seqs(ops),
        last_loss=last.get("loss") if last else None,
        last_grad_norm=float(norms[-1]) if len(norms) else None,
        exceptions=_count(log, "exception"),
        dropped=close[-1].get("dropped") if close else None,
    )


def _step_dict(log: RankLog, i: int) -> dict:
    return log.step_row(i) if isinstance(log, CompactLog) else log.of_kind("step")[i]


def _count(log: RankLog, kind: str) -> int:
    return log.count(kind) if isinstance(log, CompactLog) else len(log.of_kind(kind))


def _last_seqs(ops) -> dict:
    """group -> the seq of its last collective in the log (groups in first-use order)."""
    out = {}
    for code, group in enumerate(ops.group_names):
        rows = np.flatnonzero(ops.group == code)
        out[group] = int(ops.seq[rows[-1]])
    return out


def summarize(run_dir: str | Path) -> RunSummary:
    root = Path(run_dir)
    rd = RunDir(root)
    logs, problems = read_run_events(root, read_all=read_event_files)
    run = _run_json(rd, problems)
    ranks = [summarize_rank(logs[r]) for r in sorted(logs)]
    sizes = {log.header.get("world_size") for log in logs.values()} - {None}
    world = max(sizes) if sizes else None
    missing = missing_ranges(world, logs)
    problems += _other_runs(logs, run.get("run_id"))
    return RunSummary(str(root), run.get("run_id"), world, ranks, first_ranks(missing),
                      problems, missing)


def _run_json(rd: RunDir, problems: list[Problem]) -> dict:
    if not rd.run_json.exists():
        return {}
    try:
        return read_run_json(rd.run_json)
    except (OSError, ValueError) as exc:  # SchemaError is a ValueError
        problems.append(Problem(str(rd.run_json), None, f"not read: {exc}"[:300]))
        return {}


def _other_runs(logs: dict[int, RankLog], run_id: str | None) -> list[Problem]:
    """Event logs whose headers name other runs than run.json, or than each other."""
    ids = {log.header.get("run_id") for log in logs.values()} - {None}
    if not ids or ids == {run_id} or (len(ids) == 1 and run_id is None):
        return []
    ranks_of = {i: [r for r, log in logs.items() if log.header.get("run_id") == i]
                for i in sorted(ids)}
    where = str(Path(next(iter(logs.values())).path).parent)
    return [Problem(where, None, f"event logs of other runs than run.json's ({run_id}): "
                    + "; ".join(f"{i}: ranks {ranges_text(as_ranges(r))}"
                                for i, r in ranks_of.items()))]
