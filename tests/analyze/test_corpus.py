"""The real incident logs in shared/corpus: the top finding must name the labelled category
and, where the thread established one, the culprit rank.

The corpus lives beside the repository (``<repo>/../shared/corpus``), on the developers'
machines and in CI alike; new cases are picked up as they are added.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.analyze import analyze
from diag.verdict import Severity

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"

# Cases the analyzer misses today, each with the miss it shows (top finding's category and
# culprit ranks, or none). Strict: a case that starts passing fails the run until it leaves
# this list, and a case not listed here must pass. Issue 20 emptied it: a case added to the
# corpus that ddiag misses goes here with its miss until a rule that generalizes explains it.
# These are of the 15 cases added in December 2026 (scored before anyone looked: 4/15).
KNOWN_MISSES: dict[str, str] = {
    "horovod-duplicate-hostname-nccl-p2p-ipc-between-machines":
        "no finding: two NCCL INFO 'via P2P/IPC' lines; nothing in them says the ranks are on "
        "two machines",
    "nanogpt-multinode-nccl-ib-unavailable-ib-disable":
        "rank_hang teardown only: the log is torch's 'Some NCCL operations have failed' "
        "teardown; nothing names IB",
    "nccl-allreduce-spin-deadlock-amd-root-port-acs-enabled":
        "no finding: the log is nvidia-smi's topology matrix alone (ACS is not in it)",
    "nccl-roce-default-gid-index-error12-vendor129-gid3-fix":
        "no finding: ibv_devinfo, the mpirun line and nccl-tests' header; the error 12 line "
        "the thread quotes is not in the log",
    "nvcaffe-nccl-built-for-cuda9-with-cuda8-unhandled-cuda-error":
        "other: NCCL's 'unhandled cuda error'; the CUDA 9 build of NCCL is named only in the "
        "thread",
    "particleflow-rank0-only-end-of-epoch-test-nccl-timeout":
        "rank_hang, no rank: watchdog C++ frames only (a timeout, read from checkTimeout's "
        "frame); the rank-0-only test block is named only in the thread",
    "rtdetr-eval-all-gather-object-oom-fixed-by-env-init":
        "no finding: a stack inside all_gather_object with no error line",
    "verl-ray-old-version-duplicate-gpu-rank0-rank1":
        "env_misconfig (duplicate GPU, ranks 0 and 1): the label is the old Ray version that "
        "put them there, which the log does not show",
}


def _cases(misses: bool = True) -> list:
    """Every case folder; with ``misses``, the known misses marked as such."""
    if not CORPUS.is_dir():
        return [
            pytest.param(
                None,
                marks=pytest.mark.skip(
                    reason=f"no corpus at {CORPUS}: clone shared/ beside the repository"
                ),
            )
        ]
    cases = sorted(
        p for p in CORPUS.iterdir() if (p / "truth.json").is_file() and (p / "log.txt").is_file()
    )
    if not cases:
        return [
            pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS} holds no case folders"))
        ]
    return [pytest.param(case, id=case.name, marks=_miss_mark(case.name) if misses else ())
            for case in cases]


def _miss_mark(name: str) -> tuple:
    if name not in KNOWN_MISSES:
        return ()
    return (pytest.mark.xfail(strict=True, reason=f"known miss: {KNOWN_MISSES[name]}"),)


@pytest.mark.parametrize("case", _cases())
def test_top_finding_matches_truth(case: Path) -> None:
    truth = json.loads((case / "truth.json").read_text())
    result = analyze(case / "log.txt")
    assert result.findings, f"{case.name}: no findings ({result.detector_errors})"
    top = result.findings[0]
    summary = [
        (f.category.value, f.culprit.ranks, f.confidence, f.title) for f in result.findings[:4]
    ]
    assert top.category.value == truth["root_cause_category"], summary
    if truth.get("culprit_rank") is not None:
        assert list(top.culprit.ranks) == [truth["culprit_rank"]], summary
    assert not result.detector_errors


@pytest.mark.parametrize("case", _cases(misses=False))
def test_one_incident_gives_one_root_cause(case: Path) -> None:
    # a hit or a miss, an incident has one root cause; the rest above info are its symptoms
    result = analyze(case / "log.txt")
    roots = [f for f in result.findings if f.root_cause and f.severity > Severity.INFO]
    assert len(roots) <= 1, [(f.category.value, f.title) for f in roots]
    above_info = [f for f in result.findings if f.severity > Severity.INFO]
    assert not above_info or roots == [result.findings[0]], [f.title for f in above_info]
