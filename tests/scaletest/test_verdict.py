"""The verdict sentence, from stage results built by hand (no trainer runs)."""

from __future__ import annotations

from pathlib import Path

from diag.scaletest.config import ScaleTestConfig
from diag.scaletest.run import ScaleTestResult, verdict
from diag.scaletest.stage import StageRun, StepOutcome


def stage(n: int, tflops: list[float]) -> StageRun:
    doc = {"probes": {"compute": {"ranks": [{"rank": i, "tflops": t}
                                             for i, t in enumerate(tflops)]}}}
    return StageRun(n, 2 * n, Path(f"/r/stage-{n}"), steps=[StepOutcome("probes", True, 1.0,
                                                                       doc=doc)])


def result(tflops: list[list[float]], eff: list[float], findings: dict) -> ScaleTestResult:
    cfg = ScaleTestConfig(out=Path("/r"), stages=(1, 2, 4), launcher="slurm", nproc_per_node=2)
    return ScaleTestResult(cfg, stages=[stage(n, t) for n, t in zip((1, 2, 4), tflops)],
                           efficiency=eff, cliff_stage=2, findings=findings)


def test_a_cliff_from_ranks_sharing_processors_says_so():
    r = result([[0.056, 0.048], [0.033, 0.043, 0.032, 0.033], [0.02] * 8], [1.0, 0.59, 0.32], {})
    text = verdict(r)
    assert "between stages 1 and 2" in text and "per-rank compute fell 0.056 -> 0.033" in text


def test_steady_compute_leaves_the_cliff_unexplained_and_a_later_finding_is_named():
    slow = {4: [{"severity": "error", "title": "every link of node4 is slow"}]}
    r = result([[0.05, 0.05], [0.05] * 4, [0.05] * 8], [1.0, 0.6, 0.3], slow)
    text = verdict(r)
    assert "no finding explains it" in text
    assert text.endswith("; and stage 4: every link of node4 is slow")
