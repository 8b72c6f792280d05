"""Scale-test results built by hand: stages with or without probe readings (compute rate,
small all_reduce time), raw efficiencies given, the cliff located as conclude() does. No
trainer runs."""

from __future__ import annotations

from pathlib import Path

from diag.scaletest.config import ScaleTestConfig
from diag.scaletest.measure import StageMetrics
from diag.scaletest.run import ScaleTestResult, locate_cliff, verdict
from diag.scaletest.stage import StageRun, StepOutcome

SLOW_LINK = {4: [{"severity": "error", "title": "every link of node4 is slow"}]}


def stage(n: int, tflops: float | None, small_us: float | None = None) -> StageRun:
    """Stage n of 2 ranks per node; ``tflops`` is every rank's compute probe reading
    (None: the stage ran no probes), ``small_us`` the collective probe's time for its
    small all_reduces (a large one, 1 MiB, takes 10x as long and must not count)."""
    run = StageRun(n, 2 * n, Path(f"/r/stage-{n}"))
    if tflops is not None:
        ranks = [{"rank": i, "tflops": tflops} for i in range(2 * n)]
        rows = [{"op": "all_reduce", "size": size, "time_us": small_us * (10 if big else 1)}
                for size, big in ((4096, False), (65536, False), (1 << 20, True))
                ] if small_us else []
        run.steps.append(StepOutcome("probes", True, 1.0, doc={"probes": {
            "compute": {"ranks": ranks}, "collectives": {"rows": rows}}}))
    return run


def metrics(world_size: int, eff: float) -> StageMetrics:
    """A stage whose throughput is ``eff`` of 100 samples/s per 2 ranks."""
    return StageMetrics(world_size, 20, 0.08, 0.1, 0.08, round(50.0 * eff * world_size, 3),
                        0.8, 0.15, 0.05, {})


SHARED = ([0.052, 0.035, 0.022], [1000.0, 3000.0, 6000.0])
"""Probe readings of ranks sharing processors: compute falls, the ranks take longer to
meet."""


def result(eff: list[float], tflops: list[float | None], findings=None,
           small_us: list[float | None] | None = None, strong: bool = False
           ) -> ScaleTestResult:
    """Stages 1, 2, 4 with these raw efficiencies, the cliff and the verdict as conclude()
    makes them. Every stage's step is 80% compute, 15% communication, 5% data."""
    cfg = ScaleTestConfig(out=Path("/r"), stages=(1, 2, 4), launcher="slurm", nproc_per_node=2,
                          strong=strong)
    small_us = small_us or [None] * len(tflops)
    r = ScaleTestResult(cfg, stages=[stage(n, t, u) for n, t, u in zip(cfg.stages, tflops,
                                                                         small_us)],
                        metrics=[metrics(2 * n, e) for n, e in zip(cfg.stages, eff)],
                        efficiency=eff, findings=findings or {})
    r.cliff_stage = locate_cliff(r)
    r.verdict = verdict(r)
    return r


def local_result(eff: list[float], comm: list[float], findings=None, cores: int = 8
                 ) -> ScaleTestResult:
    """Local stages 1 and 2 (process counts: stage 1 is a single rank, which runs no
    probes) on a host of ``cores``, with these raw efficiencies and communication shares
    (data 5% of each step), the cliff and the verdict as conclude() makes them."""
    cfg = ScaleTestConfig(out=Path("/r"), stages=(1, 2), launcher="local")
    runs = [StageRun(n, n, Path(f"/r/stage-{n}"), busiest=("vm", n, cores)) for n in cfg.stages]
    ms = [StageMetrics(n, 20, 0.01, 0.012, 0.01, round(100.0 * e * n, 3), 0.95 - c, c, 0.05,
                       {}) for n, e, c in zip(cfg.stages, eff, comm)]
    r = ScaleTestResult(cfg, stages=runs, metrics=ms, efficiency=eff, findings=findings or {})
    r.cliff_stage = locate_cliff(r)
    r.verdict = verdict(r)
    return r
