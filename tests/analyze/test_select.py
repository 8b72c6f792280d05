"""The selector: one incident gives one root cause, the rest above info its symptoms."""

from __future__ import annotations

from diag.analyze.select import select
from diag.verdict import Category, Culprit, Evidence, Finding, Severity


def _finding(category: Category, confidence: float, severity=Severity.ERROR, root=True,
             line: int = 1) -> Finding:
    return Finding(category, severity, confidence, f"{category.value} {confidence}",
                   Culprit(), (Evidence("log.txt", line, "x"),), "fix", "test",
                   root_cause=root)


def _roots(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.root_cause and f.severity > Severity.INFO]


def test_the_worst_surest_finding_is_the_one_root_cause_and_the_others_name_it() -> None:
    cause = _finding(Category.ENV_MISCONFIG, 0.85)
    others = [_finding(Category.OTHER, 0.6, line=2), _finding(Category.SLOW_LINK, 0.75,
                                                               Severity.WARN, line=3)]
    out = select([*others, cause])
    assert _roots(out) == [cause] and out[0] is cause
    assert len(out) == 3 and all(f.details["symptom_of"] == f"env_misconfig: {cause.title}"
                                 for f in out[1:])
    # a symptom keeps what it quoted and its fix
    assert {f.evidence[0].line for f in out[1:]} == {2, 3} and all(f.fix for f in out)


def test_a_broken_group_is_the_cause_of_the_hang_however_sure_the_hang_is() -> None:
    hang = _finding(Category.RANK_HANG, 0.95, Severity.CRITICAL)
    mismatch = _finding(Category.SHAPE_MISMATCH, 0.7, Severity.CRITICAL, line=2)
    out = select([hang, mismatch])
    assert _roots(out) == [mismatch] and not out[1].root_cause


def test_a_mismatch_below_critical_does_not_outrank_a_surer_hang() -> None:
    hang = _finding(Category.RANK_HANG, 0.9)
    mismatch = _finding(Category.COLLECTIVE_MISMATCH, 0.4, Severity.WARN, line=2)
    assert _roots(select([mismatch, hang])) == [hang]


def test_info_findings_and_a_log_without_a_cause_are_left_as_they_are() -> None:
    info = _finding(Category.STRAGGLER, 0.3, Severity.INFO)
    symptom = _finding(Category.RANK_HANG, 0.5, root=False, line=2)
    out = select([info, symptom])
    assert {id(f) for f in out} == {id(info), id(symptom)}
    assert "symptom_of" not in out[0].details and "symptom_of" not in out[1].details
