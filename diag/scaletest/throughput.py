"""A stage's throughput when the job is the user's own command (pure), from the best
source it has: the decorator's event logs, else a ``--metric`` regex over the job's
output, else the stage's wall time for a fixed number of steps."""

from __future__ import annotations

import dataclasses
import shlex
import re
import statistics

from diag.format.events import RankLog
from diag.scaletest.measure import StageMetrics, stage_metrics

EVENTS, METRIC, WALL = "events", "metric", "wall"
"""The sources, in the order they are tried (``StageMetrics.source``)."""
RANK_STEPS = "rank-steps/s"
"""Steps per second x ranks: a throughput for a job whose batch ddiag does not know."""
METRIC_UNIT = "as printed"
WARMUP_SHARE = 0.2
"""The first fifth of a job's printed rates is its warm-up (start-up, first steps,
caches filling), and a running average printed from the start carries it for long."""
WEAK_ASSUMPTION = "the command does the same per-rank work at every stage"
"""What throughput from wall time rests on (weak scaling), said in every report of it."""


def describe(source: str, metric: str | None, steps: int, strong: bool = False) -> str:
    """One line on how a source's numbers were made, for the reports."""
    if source == EVENTS:
        return "events: the decorator's step records, ranks / median step (rank-steps/s)"
    if source == METRIC:
        return (f"metric: --metric {shlex.quote(metric or '')} over the job's stdout and "
                f"stderr, the median of the matches after the first {WARMUP_SHARE:.0%}, in "
                "the job's own unit")
    whose = "the first stage's ranks" if strong else "ranks"
    assume = "" if strong else f"; assumes {WEAK_ASSUMPTION}"
    return (f"wall: {whose} x --steps {steps} / the command's wall seconds, start-up "
            f"included (rank-steps/s){assume}")


def compile_metric(regex: str) -> re.Pattern:
    """The --metric regex, or a ValueError naming it and the fix."""
    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise ValueError(f"--metric {regex!r} is not a regular expression ({exc}); e.g. "
                         r"'(\d+(?:\.\d+)?) samples/s'") from None
    if pattern.groups == 0 and pattern.match("") is not None:
        raise ValueError(f"--metric {regex!r} matches the empty string; give the number's "
                         r"pattern, e.g. '(\d+(?:\.\d+)?) samples/s'")
    return pattern


def metric_values(text: str, pattern: re.Pattern) -> list[float]:
    """Every number the regex finds in ``text``, in order: its group 1, or the whole
    match when it has no group. A match that is not a number is skipped."""
    values = []
    for match in pattern.finditer(text):
        raw = match.group(1) if pattern.groups else match.group(0)
        try:
            values.append(float(raw.replace(",", "")))
        except (TypeError, ValueError):
            continue
    return values


def metric_rate(values: list[float]) -> float | None:
    """The median of the values after the first ``WARMUP_SHARE`` of them."""
    if not values:
        return None
    return statistics.median(values[int(len(values) * WARMUP_SHARE):])


def wall_rate(ranks: int, steps: int, seconds: float) -> float | None:
    """Weak scaling: each of the stage's ``ranks`` does ``steps`` steps, so the stage did
    ranks x steps rank-steps in its wall time (start-up included). Strong scaling: the
    first stage's ranks' work, shared."""
    return ranks * steps / seconds if seconds > 0 else None


def from_events(logs: dict[int, RankLog], world_size: int) -> StageMetrics:
    """The decorator's step records; the job's batch is unknown, so the rate counts
    rank-steps (a global batch of one sample per rank)."""
    m = stage_metrics(logs, world_size, global_batch=world_size)
    return dataclasses.replace(m, source=EVENTS, unit=RANK_STEPS)


def from_metric(values: list[float], world_size: int) -> StageMetrics:
    rate = metric_rate(values)
    return _rate_only(world_size, rate, len(values) - int(len(values) * WARMUP_SHARE),
                      METRIC, METRIC_UNIT)


def from_wall(world_size: int, steps: int, seconds: float, work_ranks: int | None = None
              ) -> StageMetrics:
    """``work_ranks``: whose steps the stage did (default: its own ranks; with strong
    scaling, the first stage's)."""
    rate = wall_rate(work_ranks or world_size, steps, seconds)
    return _rate_only(world_size, rate, steps, WALL, RANK_STEPS)


def _rate_only(world_size: int, rate: float | None, measured: int, source: str,
               unit: str) -> StageMetrics:
    return StageMetrics(world_size=world_size, steps_measured=measured, step_p50_s=None,
                        step_p95_s=None, slowest_rank_p50_s=None,
                        samples_per_s=round(rate, 3) if rate is not None else None,
                        compute_share=None, comm_share=None, data_share=None,
                        per_rank_p50_s={}, source=source, unit=unit)
