"""Hand-written edge cases (``cases/<name>/log.txt`` + ``expected.json``): other torch and
NCCL versions' wordings, other launcher prefixes, interleaved ranks, and the reasoning
rules of the text-log detectors. None of this text comes from the corpus.

``expected.json``: ``category`` (null: nothing above INFO may be reported as a root
cause), ``culprit_rank`` (null: not checked) and optionally ``culprit_env_var``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.analyze import analyze
from diag.verdict import Severity

CASES = Path(__file__).resolve().parent / "cases"


def _cases() -> list:
    found = (
        sorted(p for p in CASES.iterdir() if (p / "expected.json").is_file())
        if CASES.is_dir()
        else []
    )
    return [pytest.param(case, id=case.name) for case in found]


def test_there_are_enough_cases() -> None:
    assert len(_cases()) >= 20


@pytest.mark.parametrize("case", _cases())
def test_case(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    result = analyze(case / "log.txt")
    assert not result.detector_errors
    summary = [
        (f.category.value, f.culprit.ranks, f.confidence, f.root_cause, f.title)
        for f in result.findings[:4]
    ]
    if expected["category"] is None:
        assert not [f for f in result.findings if f.root_cause and f.severity > Severity.INFO], (
            summary
        )
        return
    assert result.findings, "no findings"
    top = result.findings[0]
    assert top.root_cause, summary
    assert top.category.value == expected["category"], summary
    if expected.get("culprit_rank") is not None:
        assert list(top.culprit.ranks) == [expected["culprit_rank"]], summary
    if expected.get("culprit_env_var"):
        assert top.culprit.env_var == expected["culprit_env_var"], summary
    assert top.evidence and all(e.line for e in top.evidence), "evidence must quote file:line"
