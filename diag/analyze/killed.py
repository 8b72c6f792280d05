"""A job that ``ddiag watch --kill`` ended: the kill is no incident of its own.

watch leaves ``killed.json`` (``ddiag.watch_kill``) in the run directory it ends a job
from; the job's log, copied beside it, then shows the kill: torchrun's "Received
Signals.SIGTERM", a worker's ``Signal 15 (SIGTERM) received``, exit code -15 or -9,
``ChildFailedError``. Read with the marker, every finding those lines make (and nothing
else) is a symptom of the kill, and through it of the verdict the stacks give (the root
cause ``select`` keeps): it names the kill in ``details.symptom_of`` and
``details.caused_by``, and ``unexplained`` leaves such lines alone. A finding seen more
than ``BEFORE_KILL_S`` before the kill (by a log time that carries its date) is not its
symptom. Pure: the marker comes in
``Inputs.docs``.
"""

from __future__ import annotations

import re
from dataclasses import replace

from diag.format import schema
from diag.format.events import Problem
from diag.verdict import Finding

BEFORE_KILL_S = 5.0  # clock skew between watch's host and the log's timestamps
# a log time this far from the kill has no year of its own (glog's "E1205 06:55:20"): no
# evidence of order
COMPARABLE_S = 86_400.0
KILL_TEXT = re.compile(r"SIGTERM|SIGKILL|Signal (?:15|9)\b|exit ?code\s*:?\s*-(?:15|9)\b"
                       r"|ChildFailedError|Signals\.SIG(?:TERM|KILL)")


def marker(inputs) -> tuple[dict | None, list[Problem]]:
    """The newest ``ddiag.watch_kill`` document among the inputs, and a problem for each
    one of a schema this ddiag does not read."""
    found, problems = None, []
    for doc in inputs.docs_of(schema.WATCH_KILL):
        try:
            schema.check(doc.doc, schema.WATCH_KILL, doc.path)
        except schema.SchemaError as exc:
            problems.append(Problem(doc.path, None, exc.reason))
            continue
        if found is None or _t(doc.doc) > _t(found):
            found = doc.doc
    return found, problems


def caused(text: str) -> bool:
    """Whether a log line is what a kill prints."""
    return bool(KILL_TEXT.search(text))


def demote(findings: list[Finding], kill: dict | None) -> list[Finding]:
    """With a kill marker: the findings whose every quoted line is the kill's become its
    symptoms (not root causes)."""
    if kill is None:
        return findings
    said = f"ended by {kill.get('by') or 'ddiag watch --kill'}" + \
        (f" on a {kill['verdict']} verdict" if isinstance(kill.get("verdict"), str) else "")
    return [replace(f, root_cause=False, details={**f.details, "symptom_of": said,
                                                  "caused_by": "watch_kill"})
            if _of_kill(f, _t(kill)) else f for f in findings]


def _of_kill(f: Finding, t: float) -> bool:
    if not f.evidence:
        return False
    if f.first_seen is not None and t and BEFORE_KILL_S < t - f.first_seen < COMPARABLE_S:
        return False
    return any(caused(ev.text) for ev in f.evidence) and \
        all(caused(ev.text) or not _error_like(ev.text) for ev in f.evidence)


def _error_like(text: str) -> bool:
    return bool(re.search(r"error|exception|failed|traceback|timed? ?out", text, re.I))


def _t(doc: dict) -> float:
    t = doc.get("t")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0
