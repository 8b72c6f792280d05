"""The generic rule: a message whose template the catalog knows says what happened.

Every ``emitted`` signal is a line matched by one emitter template (catalog/emitted.py).
The lines of one template become one finding: its category, its title with the fields the
line printed, its fix, the culprit its knowledge row names among those fields, and a
confidence from the template's role (an initiating failure, a cascade, a setting, a
diagnostic, teardown, a retry).
A line that a cross-line rule already explains at least as surely keeps that rule's
finding alone (``prune``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace

from diag.analyze.catalog import fmt
from diag.analyze.catalog.emitted import Template, by_id
from diag.analyze.detectors.common import index, make
from diag.analyze.signals import Signal
from diag.verdict import Finding, Severity

DETECTOR = "emitted"
# A failure the printer had is an error; a consequence of one elsewhere (a cascade), a
# setting, a diagnostic, teardown or a retry is a warning beside the cause.
_SEVERITY = {"initiating": Severity.ERROR}  # the others: WARN
# A root cause is what a failure or a setting says; teardown, a diagnostic or a retry is
# what follows one, reported but never the cause itself.
_ROOT_ROLES = ("initiating", "cascade", "configuration")
_FIELD_TEXT = 60  # characters of a field shown in a title


def detect_text(inputs) -> list[Finding]:
    known = by_id()
    lines: dict[str, list[Signal]] = defaultdict(list)
    emitted = most_specific(index(inputs).of("emitted"), known)
    for sig in emitted:
        lines[sig.fields["template"]].append(sig)
    exits = _clean_exits(emitted, known)
    out, said = [], set()
    for tid, signals in lines.items():
        template = known.get(tid)
        if template is None or template.implies is None:
            continue
        found = finding(template, signals)
        if exits and all(_at_exit(s, exits) for s in signals):
            found = replace(found, severity=Severity.INFO, root_cause=False,
                            details={**found.details, "teardown": "torchrun's exit barrier"})
        # two releases' wordings of one message may both match a line: one finding
        key = (found.category, found.title, found.evidence)
        if key not in said:
            said.add(key)
            out.append(found)
    return out


# torchrun's agent waits in an exit barrier once its own workers have finished; when the
# node that hosts the store is done first, the barrier fails at once (the store closed),
# far inside its timeout (300 s by default): the job ended, and the store connection's
# loss printed around it is teardown, not a failure
_EXIT_BARRIER = "Error waiting on exit barrier"
EXIT_FAST_S = 60.0
EXIT_WINDOW_S = 5.0  # the store client's warning comes a few ms before the agent's error
EXIT_WINDOW_LINES = 80  # without times: the lines (a C++ trace) just before it


def _clean_exits(signals: list[Signal], known: dict) -> list[Signal]:
    out = []
    for s in signals:
        t = known.get(s.fields["template"])
        if t is None or not t.format.startswith(_EXIT_BARRIER):
            continue
        try:
            elapsed = float(str(s.fields.get("values", {}).get("elapsed")))
        except ValueError:
            continue
        if elapsed < EXIT_FAST_S:
            out.append(s)
    return out


def _at_exit(sig: Signal, exits: list[Signal]) -> bool:
    """The line is the exit barrier's failure itself, or was printed in the same file
    around it: the store's warning just before, the barrier's traceback after (by time
    when both carry one, else by position)."""
    for e in exits:
        if sig.file != e.file:
            continue
        if sig.time is not None and e.time is not None:
            if abs(e.time - sig.time) <= EXIT_WINDOW_S:
                return True
        elif abs(e.line - sig.line) <= EXIT_WINDOW_LINES:
            return True
    return False


def most_specific(signals: list[Signal], known: dict) -> list[Signal]:
    """Of the templates that match one line, those with the most literal text: NCCL's
    "Failed to open libibverbs.so[.1]" (no failure: IB is simply absent) is that message,
    not GDRCopy's "Failed to open %s" read with libibverbs as its %s."""
    def literal(sig: Signal) -> int:
        t = known.get(sig.fields["template"])
        return fmt.compile_format(t.format).literal if t is not None else 0
    best: dict[tuple, int] = {}
    for sig in signals:
        key = (sig.file, sig.line)
        best[key] = max(best.get(key, 0), literal(sig))
    return [s for s in signals if literal(s) == best[(s.file, s.line)]]


def finding(t: Template, signals: list[Signal]) -> Finding:
    implies = t.implies
    ranks, hosts, var = culprit(t, signals)
    values = signals[0].fields.get("values", {})
    title, fix = render_title(t.title, values), render_title(implies.fix, values)
    return make(implies.category, title, fix, DETECTOR, implies.basis, signals,
                ranks=ranks, hosts=hosts, env_var=var,
                severity=_SEVERITY.get(t.role, Severity.WARN), root_cause=t.role in _ROOT_ROLES,
                details={"template": t.id, "role": t.role, "source": f"{t.file}:{t.line}",
                         "function": t.function})


def culprit(t: Template, signals: list[Signal]) -> tuple[list[int], list[str], str | None]:
    """(ranks, hosts, variable) the knowledge row's ``culprit`` names, read off the lines."""
    kind, _, ref = t.culprit.partition(":") if ":" in t.culprit else ("rank", "", t.culprit)
    if not ref:
        return [], [], None
    if kind == "var":
        value = signals[0].fields.get("values", {}).get(ref)
        return [], [], str(value)[:80] if value else ref
    values = [s.rank if ref == "line" else s.fields.get("values", {}).get(ref)
              for s in signals]
    if kind == "host":
        return [], [_host(v) for v in values if v], None
    return [v for v in map(_rank, values) if v is not None], [], None


def _rank(value) -> int | None:
    if isinstance(value, int):
        return value if value >= 0 else None
    return int(value) if isinstance(value, str) and value.isdigit() else None


# "10.0.0.2<35521>", "[10.0.0.2]:35521", "node3:29500": the host part of an address
_HOST = re.compile(r"^\[?(?P<host>[^\]<>\s]+?)\]?(?:<\d+>|:\d+)?$")


def _host(value) -> str:
    text = str(value).strip().strip("'\"")
    m = _HOST.match(text)
    return (m.group("host") if m else text)[:80]


def render_title(title: str, fields: dict) -> str:
    """A title or fix with ``{field}`` replaced by what the line printed (cut, one line)."""
    def value(m: re.Match) -> str:
        found = fields.get(m.group(1))
        text = " ".join(str(found).split()) if found not in (None, "") else "?"
        return text[:_FIELD_TEXT]
    return re.sub(r"\{(\w+)\}", value, title)


def prune(findings: list[Finding]) -> list[Finding]:
    """Drop a template's finding where another rule, which read the lines around it,
    already quotes every line it quotes as surely: as a root cause, or, for a message that
    is itself a consequence (a cascade, teardown, a diagnostic, a retry), as a symptom. A
    printer's own failure or setting is not silenced by a rule that files every error line
    as a symptom of a hang. A finding that only quotes the message (``generic``: the first
    exception, a CUDA error's text) knows less than the template: where a template
    explains all its lines, it stays as a symptom."""
    as_cause, as_any = _cited(findings, roots_only=True), _cited(findings, roots_only=False)
    kept = [f for f in findings if f.detector != DETECTOR or not _explained(
        f, as_cause if f.details.get("role") in _OWN_ROLES else as_any)]
    known = {(ev.file, ev.line) for f in kept if f.detector == DETECTOR for ev in f.evidence}
    return [replace(f, root_cause=False) if f.details.get("generic") and f.evidence and all(
        (ev.file, ev.line) in known for ev in f.evidence) else f for f in kept]


_OWN_ROLES = ("initiating", "configuration")


def _cited(findings: list[Finding], roots_only: bool) -> dict[tuple, float]:
    """(file, line) -> the surest confidence another rule quotes it with."""
    cited: dict[tuple, float] = {}
    for f in findings:
        if f.detector == DETECTOR or f.severity <= Severity.INFO or f.details.get("generic"):
            continue
        if roots_only and not f.root_cause:
            continue
        for ev in f.evidence:
            cited[(ev.file, ev.line)] = max(cited.get((ev.file, ev.line), 0.0), f.confidence)
    return cited


def _explained(f: Finding, cited: dict[tuple, float]) -> bool:
    return bool(f.evidence) and all(cited.get((ev.file, ev.line), -1.0) >= f.confidence
                                    for ev in f.evidence)
