"""The last word when nothing else has one: a log that shows errors no signature or rule
explains gets an ``unexplained`` finding, never "no findings".

"no findings" (exit 0) tells the user their log is clean; on a log that shows a crash that
is the worst answer analyze can give. So when no detector returned a root cause at
severity error or above, the text logs are read once more for error lines, by the words
every printer of an error uses (Python's ``Traceback``/``...Error:``, glog's ``E`` level,
NCCL's ``WARN``, a ``FAILED``/``Killed``/``core dumped`` from the launcher or the shell),
and the earliest one per rank and host is quoted. The category is ``other`` at a low
confidence: the finding says what failed first, not why.
"""

from __future__ import annotations

import re

from diag.analyze.detectors.common import fmt_ranks, make, order_key
from diag.analyze.signals import Signal
from diag.analyze.textlog import MAX_LINE, parse_line
from diag.verdict import Category, Finding, Severity

CONFIDENCE = 0.2
MAX_ERROR_LINES = 10_000  # enough to find each rank's first; bounds a log of nothing but errors

# Words an error line holds, whoever printed it: the substrings gate the regex, which runs
# only over lines that hold one.
_GATES = ("rror", "RROR", "xception", "Traceback", "FATAL", "atal", "ailed", "FAILED",
          "NCCL WARN", "Killed", "Segmentation fault", "core dumped", "Aborted", "timed out",
          "CANCELLED", "exit")
_GATE = re.compile("|".join(map(re.escape, _GATES)))  # one C-level pass instead of 16 `in`s
_ERROR = re.compile(
    r"(?<!\w)(?:[A-Za-z.]*Error\b|ERROR\b|[Ee]rror:|[A-Za-z.]*Exception\b"
    r"|Traceback \(most recent call last\)|FATAL\b|Fatal\b|[Ff]ailed\b|FAILED\b|NCCL WARN"
    r"|Killed\b|Segmentation fault|core dumped|Aborted\b|timed out\b|CANCELLED\b"
    r"|exitcode\b|exit code\b|exit status\b)")
# ... and lines that hold one of them but are not errors: glog/c10 warnings and infos
# ("[W socket.cpp:663] ... (gai error: -2 ...)"), Python warnings ("UserWarning: ..."),
# logging's WARNING/INFO records, NCCL's INFO chatter, a torchrun summary's empty
# "error_file: <N/A>", counts of zero, a shell assignment ("export HYDRA_FULL_ERROR=1").
_NOT_ERROR = re.compile(
    r"^\s*(?:\[[WI](?:\d{4}| )|[WI]\d{4} |\[?(?:WARNING|WARN|INFO|DEBUG)\b"
    r"|(?:export\s+)?[A-Z][A-Z0-9_]*=)"
    r"|\w*Warning: |NCCL INFO|\b0 (?:errors?|failed)\b|\bno errors?\b|<N/A>|exitcode\s*:\s*0\b")


def detect(inputs, findings: list[Finding]) -> list[Finding]:
    """One ``unexplained`` finding when the text logs show errors and no root cause above
    info was found; nothing otherwise."""
    if any(f.root_cause and f.severity > Severity.INFO for f in findings):
        return []
    errors = first_errors(inputs.texts)
    if not errors:
        return []
    return [_finding(errors)]


def first_errors(texts) -> list[Signal]:
    """The earliest error line of each (file, rank, host), earliest first."""
    first: dict[tuple, Signal] = {}
    seen = 0
    for log in texts:
        for n, raw in enumerate(log.lines, 1):
            if seen >= MAX_ERROR_LINES:
                break
            if not _is_error(raw):
                continue
            seen += 1
            line = parse_line(n, raw[:MAX_LINE])
            key = (log.path, line.rank, line.host)
            if key not in first:
                first[key] = Signal("error_line", log.path, n, raw[:2000], line.rank,
                                    line.host, line.time)
    return sorted(first.values(), key=order_key)


def _is_error(raw: str) -> bool:
    if not _GATE.search(raw):
        return False
    text = raw[:MAX_LINE]
    return bool(_ERROR.search(text)) and not _NOT_ERROR.search(text)


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
    return make(Category.OTHER, title, fix, "unexplained", CONFIDENCE, errors,
                hosts=[s.host for s in errors], severity=Severity.ERROR,
                details={"unexplained": True, "error_lines": len(errors)})
