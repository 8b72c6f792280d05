"""One incident, one root cause: the selector over every detector's hypotheses.

Each detector proposes findings on its own, and one failure shows in many places: two
ranks on one GPU is NCCL's "Duplicate GPU detected", torch's ``invalid usage`` error,
each rank's traceback and the launcher's summary. A user who reads four root causes for
one mistake has to do the correlation we were asked to do. So the findings are ranked
(root causes first, then the worst, the surest, the earliest) and the first root cause
above info is *the* root cause; every other finding above info is listed as its symptom,
naming it (``details["symptom_of"]``). Nothing is dropped: a symptom keeps its evidence
and fix.

A broken group comes first: once ranks disagree on a collective (its op or its sizes)
gloo reads past the buffer or waits forever, so a hang or timeout is not preferred over
the mismatch that caused it, whatever their confidences.
"""

from __future__ import annotations

from dataclasses import replace

from diag.verdict import Category, Finding, Severity

_BROKEN_GROUP = (Category.SHAPE_MISMATCH, Category.COLLECTIVE_MISMATCH)
_WAITING = (Category.RANK_HANG, Category.TIMEOUT_TOO_SHORT)


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Root causes before their symptoms; then the worst, the surest, the earliest."""
    far_future = float("inf")
    return sorted(findings, key=lambda f: (not f.root_cause, -f.severity, -f.confidence,
                                           f.first_seen if f.first_seen else far_future))


def select(findings: list[Finding]) -> list[Finding]:
    """The findings ranked, with at most one root cause above info: the first that may be
    one (``_candidates``); every other finding above info becomes its symptom."""
    ranked = rank_findings(findings)
    candidates = _candidates(ranked)
    if not candidates:
        return ranked
    winner = candidates[0]
    said = f"{winner.category.value}: {winner.title}"
    out = [winner]
    for f in ranked:
        if f is winner:
            continue
        if f.severity > Severity.INFO and (f.root_cause or "symptom_of" not in f.details):
            f = replace(f, root_cause=False, details={**f.details, "symptom_of": said})
        out.append(f)
    return rank_findings(out)


def _candidates(ranked: list[Finding]) -> list[Finding]:
    roots = [f for f in ranked if f.root_cause and f.severity > Severity.INFO]
    broken = any(f.severity >= Severity.CRITICAL and f.category in _BROKEN_GROUP
                 for f in roots)
    return [f for f in roots if not (broken and f.category in _WAITING)]
