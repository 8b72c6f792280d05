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
from diag.verdict import Category, Severity

CASES = Path(__file__).resolve().parent / "cases"


def _cases() -> list:
    found = (
        sorted(p for p in CASES.iterdir() if (p / "expected.json").is_file())
        if CASES.is_dir()
        else []
    )
    return [pytest.param(case, id=case.name) for case in found]


def test_every_case_folder_holds_a_log_and_a_verdict_the_vocabulary_knows() -> None:
    # a folder without expected.json would silently drop out of test_case; so would a typo
    # in a key, which would leave that part of the verdict unchecked
    folders = sorted(p for p in CASES.iterdir() if p.is_dir())
    assert len(folders) >= 20 and [c.values[0] for c in _cases()] == folders
    known = {c.value for c in Category} | {None}
    for case in folders:
        expected = json.loads((case / "expected.json").read_text())
        assert (case / "log.txt").read_text().strip(), case.name
        assert set(expected) <= {"category", "culprit_rank", "culprit_env_var", "why"}, case.name
        assert "category" in expected and expected["category"] in known, case.name
        assert isinstance(expected.get("culprit_rank"), (int, type(None))), case.name


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
