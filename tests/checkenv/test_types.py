"""A check result in the shared verdict words: its status maps to a severity, its culprit
and evidence are diag.verdict's, and its JSON keeps the shape schema 1 readers know."""

from __future__ import annotations

import pytest

from diag.checkenv.types import CheckResult, fail, ok, skip, warn
from diag.verdict import Category, Culprit, Evidence, Severity, Status

# A results entry as check-env wrote it before the shared vocabulary (schema 1).
OLD = {"check": "vars.value", "status": "fail", "summary": "TORCH_LOGS='x' is not valid",
       "fix": "set TORCH_LOGS to ...", "evidence": ["at import: Invalid log settings: x"],
       "ranks": [0, 1], "nodes": ["node1"], "env_var": "TORCH_LOGS",
       "category": "env_misconfig"}


@pytest.mark.parametrize("make, severity", [
    (lambda: ok("c", "s"), Severity.INFO), (lambda: skip("c", "s"), Severity.INFO),
    (lambda: warn("c", "s", "f"), Severity.WARN), (lambda: fail("c", "s", "f"), Severity.ERROR),
])
def test_a_status_maps_to_one_severity(make, severity):
    assert make().severity is severity is make().status.severity


def test_the_flat_culprit_a_check_gives_is_the_shared_culprit():
    res = fail("cross.devices", "s", "f", ranks=(0, 1), nodes=("node1",),
               env_var="CUDA_VISIBLE_DEVICES", category=Category.WRONG_INTERFACE)
    assert res.culprit == Culprit(ranks=(0, 1), hosts=("node1",), env_var="CUDA_VISIBLE_DEVICES")
    assert res.category is Category.WRONG_INTERFACE


def test_an_old_results_entry_reads_and_is_written_back_unchanged():
    res = CheckResult.from_json(OLD)
    assert res.status is Status.FAIL and res.category is Category.ENV_MISCONFIG
    assert res.culprit == Culprit(ranks=(0, 1), hosts=("node1",), env_var="TORCH_LOGS")
    assert res.evidence == (Evidence("at import", None, "Invalid log settings: x"),)
    assert res.to_json() == OLD


def test_evidence_round_trips_through_its_json_line():
    evidence = (Evidence("launcher stderr", None, "ValueError: bad: value"),
                Evidence("rank00001.json", 12, "x"))
    res = fail("launch.start", "s", "f", evidence=evidence)
    doc = res.to_json()
    assert doc["evidence"] == ["launcher stderr: ValueError: bad: value", "rank00001.json:12: x"]
    assert CheckResult.from_json(doc) == res


def test_a_line_with_no_source_is_all_text():
    [ev] = CheckResult.from_json({**OLD, "evidence": ["Traceback (most recent call last):"]}
                                 ).evidence
    assert ev == Evidence("", None, "Traceback (most recent call last):")
    assert str(ev) == "Traceback (most recent call last):"


def test_a_category_this_ddiag_does_not_know_reads_as_other():
    assert CheckResult.from_json({**OLD, "category": "from_the_future"}).category \
        is Category.OTHER
    assert CheckResult.from_json({k: v for k, v in OLD.items() if k != "category"}).category \
        is Category.ENV_MISCONFIG
