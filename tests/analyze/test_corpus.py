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

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"

# Cases the analyzer misses today, each with the miss it shows (top finding's category and
# culprit ranks, or none). Strict: a case that starts passing fails the run until it leaves
# this list, and a case not listed here must pass. Issue 20 emptied it: a case added to the
# corpus that ddiag misses goes here with its miss until a rule that generalizes explains it.
KNOWN_MISSES: dict[str, str] = {}


def _cases() -> list:
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
    return [pytest.param(case, id=case.name, marks=_miss_mark(case.name)) for case in cases]


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
