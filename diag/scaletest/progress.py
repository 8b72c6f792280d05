"""Whether a command's stages did comparable work (pure): a stage whose number measures
no training (it resumed a checkpoint, or recorded no step), the steps each rank did from
stage to stage, and what ``--steps`` and efficiency mean for a command."""

from __future__ import annotations

from dataclasses import dataclass

from diag.scaletest.measure import WARMUP_STEPS, StageMetrics
from diag.scaletest.throughput import EVENTS, METRIC, WALL

LESS_WORK = 0.75
"""A wall-timed stage that ran in less than this share of the time the previous stage's
work implies did less work than it. With the same work per rank (weak scaling), adding
ranks cannot make each of them faster: a stage of the same steps that takes 0.58x as long
read as efficiency 1.71 in a user's report, where the stage had resumed the previous
one's checkpoint. Start-up noise from stage to stage stays within a few tenths of a
second to a few seconds, well inside a quarter of a stage that trains for long."""
STEPS_CHANGE = 0.2
"""Per-rank step counts (or printed rates) that differ by more than this fraction from
one stage to the next are reported: the stages trained for different lengths."""


@dataclass(frozen=True)
class StageWork:
    """What one stage of a command did, as measured."""

    stage: int
    world_size: int
    seconds: float | None
    """The command's wall time, launch to exit (None: it did not end well)."""
    metrics: StageMetrics | None


def trained_nothing(here: StageWork, before: StageWork | None, strong: bool,
                    visible: list[str] = ()) -> str | None:
    """Why the stage's number measures no training comparable to ``before``'s (the
    previous stage that trained), or None. ``visible``: files that earlier stages wrote
    where this one ran (``--shared-cwd``), the likely reason."""
    m = here.metrics
    if m is not None and m.source == EVENTS and not m.steps_measured:
        return (f"the command exited 0, but its event logs hold no step after the "
                f"{WARMUP_STEPS} warm-up steps: it trained nothing ddiag can time")
    ratio = _time_ratio(here, before, strong)
    if ratio is None or ratio >= LESS_WORK:
        return None
    expected = before.seconds * _share(here, before, strong)
    return (f"the command exited 0 after {here.seconds:.1f} s, {ratio:.2f}x the {expected:.1f} "
            f"s that stage {before.stage} implies for the same --steps per rank: it did less "
            f"work, so its rate from wall time is no speed-up and is left out of efficiency "
            f"and the cliff; {_likely_cause(before.stage, visible)}")


def _time_ratio(here: StageWork, before: StageWork | None, strong: bool) -> float | None:
    """The stage's wall time over what ``before``'s implies for its work; None unless
    both stages' numbers came from wall time."""
    if before is None or here.seconds is None or not before.seconds:
        return None
    if any(w.metrics is None or w.metrics.source != WALL for w in (here, before)):
        return None
    return here.seconds / (before.seconds * _share(here, before, strong))


def _share(here: StageWork, before: StageWork, strong: bool) -> float:
    """The share of ``before``'s time this stage needs at perfect scaling: all of it with
    the same work per rank, less with the first stage's work shared among more ranks."""
    return before.world_size / here.world_size if strong else 1.0


def _likely_cause(before: int, visible: list[str]) -> str:
    if visible:
        names = ", ".join(visible[:3]) + (f" and {len(visible) - 3} more" if len(visible) > 3
                                          else "")
        return (f"it ran in the directory where stage {before} (or an earlier one) wrote "
                f"{names} (--shared-cwd): a job that resumes from its checkpoint trains only "
                "what is left")
    return ("it resumed from a checkpoint outside its working directory, or did fewer steps "
            "per rank with more ranks (a DistributedSampler over a fixed dataset: give "
            "--strong, or --metric on the samples/s it prints)")


def efficiency_per(source: str | None, strong: bool) -> str | None:
    """What one unit of a command's efficiency counts: ``rank-step`` (event logs, or wall
    time with the same steps per rank), ``job`` (wall time, --strong: the first stage's
    whole work shared), or ``printed unit`` (--metric: per sample for a samples/s rate)."""
    if source == WALL:
        return "job" if strong else "rank-step"
    return {EVENTS: "rank-step", METRIC: "printed unit"}.get(source)


def steps_meaning(source: str | None, steps: int, strong: bool) -> str | None:
    """What --steps means for a command whose stages were measured from ``source``."""
    if source == EVENTS:
        return ("efficiency per rank-step: ranks / the median step time of the decorator's "
                "step records; --steps is not used (each stage's steps are the job's own)")
    if source == METRIC:
        return ("efficiency per unit the job prints (per sample for a samples/s rate); "
                "--steps is not used")
    if source != WALL:
        return None
    if strong:
        return (f"--steps {steps}: the steps each of the first stage's ranks does; the later "
                "stages share that work (--strong), so efficiency is per unit of the whole "
                "job's work, as with a DistributedSampler over a fixed dataset")
    return (f"--steps {steps}: the steps you say each rank does at every stage (ddiag passes "
            "it to nobody); efficiency is per rank-step of wall time. A job whose steps per "
            "rank shrink as ranks grow (a DistributedSampler over a fixed dataset) is not "
            "that: give --strong, or --metric on the samples/s it prints")


def step_count_warning(stages: list[int], metrics: list[StageMetrics | None]) -> str | None:
    """A sentence when the steps each rank did (event logs) or the rates the job printed
    (--metric) changed by more than ``STEPS_CHANGE`` between two measured stages."""
    counted = [(s, m) for s, m in zip(stages, metrics)
               if m is not None and m.source in (EVENTS, METRIC) and m.steps_measured]
    for (s0, a), (s1, b) in zip(counted, counted[1:]):
        if a.source == b.source and abs(b.steps_measured - a.steps_measured) \
                > STEPS_CHANGE * a.steps_measured:
            return _steps_changed(s0, a, s1, b)
    return None


def _steps_changed(s0: int, a: StageMetrics, s1: int, b: StageMetrics) -> str:
    what = ("each rank's steps (after the warm-up)" if a.source == EVENTS else
            "the rates the job printed (after the first 20%)")
    compares = ("efficiency is per step, so the stages still compare step for step"
                if a.source == EVENTS else "if it prints one per step, each rank did fewer "
                "steps; the rate it prints still compares")
    return (f"{what} changed between stages: {a.steps_measured} at stage {s0}, "
            f"{b.steps_measured} at stage {s1}. A DistributedSampler over a fixed dataset "
            f"gives each rank fewer steps as ranks grow: {compares}, but the stages trained "
            "for different lengths")
