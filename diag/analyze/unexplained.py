"""The last word when nothing else has one: a log that shows errors no signature or rule
explains gets an ``unexplained`` finding, never "no findings".

"no findings" (exit 0) tells the user their log is clean; on a log that shows a crash that
is the worst answer analyze can give. So when no detector returned a root cause at
severity error or above, the error lines picked while each text log was read
(``errorlines``) are looked at, and the earliest one per rank and host is quoted. The
category is ``other`` at a low confidence: the finding says what failed first, not why.
"""

from __future__ import annotations

from diag.analyze import killed as kill_text
from diag.analyze.catalog.emitted import by_id
from diag.analyze.detectors.common import fmt_ranks, index, make, order_key
from diag.analyze.errorlines import MAX_ERROR_LINES, error_lines
from diag.analyze.signals import Signal
from diag.verdict import Basis, Category, Finding, Severity



def detect(inputs, findings: list[Finding], killed: bool = False) -> list[Finding]:
    """One ``unexplained`` finding when the text logs show errors that no finding quotes
    and no root cause above info was found; nothing otherwise. ``killed``: ddiag watch
    ended the job (analyze/killed.py), so what a kill prints is explained."""
    if any(f.root_cause and f.severity > Severity.INFO for f in findings):
        return []
    explained = {(ev.file, ev.line) for f in findings for ev in f.evidence} | _no_failure(inputs)
    errors = [e for e in first_errors(inputs.texts) if (e.file, e.line) not in explained
              and not (killed and kill_text.caused(e.text))]
    if not errors:
        return []
    return [_finding(errors)]


def _no_failure(inputs) -> set[tuple]:
    """Lines whose template the inventory says reports no failure, error word or not
    (NCCL's WARN "Failed to open libibverbs.so" is in every log of a host without IB)."""
    known = by_id()
    return {(s.file, s.line) for s in index(inputs).of("emitted")
            if (t := known.get(s.fields["template"])) is not None and not t.failure}


def first_errors(texts) -> list[Signal]:
    """The earliest error line of each (file, rank, host), earliest first, among the first
    MAX_ERROR_LINES error lines of the logs."""
    first: dict[tuple, Signal] = {}
    seen = 0
    for log in texts:
        for sig in error_lines(log) if log.errors is None else log.errors:
            if seen >= MAX_ERROR_LINES:
                break
            seen += 1
            first.setdefault((log.path, sig.rank, sig.host), sig)
    return sorted(first.values(), key=order_key)


def _finding(errors: list[Signal]) -> Finding:
    head = errors[0]
    ranks = sorted({s.rank for s in errors if s.rank is not None})
    where = f" on {fmt_ranks(ranks)}" if ranks else ""
    title = (f"unexplained: the log shows errors{where} that no signature or rule explains; "
             f"the earliest: {head.text.strip()[:160]}")
    fix = ("read the quoted lines, earliest first: the first error in time is usually the cause "
           "and the later ones its consequences. If this is a known failure, the message's "
           "source (NCCL, PyTorch, the launcher) names it; please report the log so a "
           "signature can be added")
    return make(Category.OTHER, title, fix, "unexplained", Basis.FALLBACK, errors,
                hosts=[s.host for s in errors], severity=Severity.ERROR,
                details={"unexplained": True, "error_lines": len(errors)})
