"""Scale-test results built by hand: stages with or without a compute probe reading, raw
efficiencies given, the cliff located as conclude() does. No trainer runs."""

from __future__ import annotations

from pathlib import Path

from diag.scaletest.config import ScaleTestConfig
from diag.scaletest.measure import StageMetrics
from diag.scaletest.run import ScaleTestResult, locate_cliff, verdict
from diag.scaletest.stage import StageRun, StepOutcome

SLOW_LINK = {4: [{"severity": "error", "title": "every link of node4 is slow"}]}


def stage(n: int, tflops: float | None) -> StageRun:
    """Stage n of 2 ranks per node; ``tflops`` is every rank's compute probe reading
    (None: the stage ran no probes)."""
    run = StageRun(n, 2 * n, Path(f"/r/stage-{n}"))
    if tflops is not None:
        ranks = [{"rank": i, "tflops": tflops} for i in range(2 * n)]
        run.steps.append(StepOutcome("probes", True, 1.0,
                                     doc={"probes": {"compute": {"ranks": ranks}}}))
    return run


def metrics(world_size: int, eff: float) -> StageMetrics:
    """A stage whose throughput is ``eff`` of 100 samples/s per 2 ranks."""
    return StageMetrics(world_size, 20, 0.08, 0.1, 0.08, round(50.0 * eff * world_size, 3),
                        0.8, 0.15, 0.05, {})


def result(eff: list[float], tflops: list[float | None], findings=None) -> ScaleTestResult:
    """Stages 1, 2, 4 with these raw efficiencies, the cliff and the verdict as conclude()
    makes them."""
    cfg = ScaleTestConfig(out=Path("/r"), stages=(1, 2, 4), launcher="slurm", nproc_per_node=2)
    r = ScaleTestResult(cfg, stages=[stage(n, t) for n, t in zip(cfg.stages, tflops)],
                        metrics=[metrics(2 * n, e) for n, e in zip(cfg.stages, eff)],
                        efficiency=eff, findings=findings or {})
    r.cliff_stage = locate_cliff(r)
    r.verdict = verdict(r)
    return r
