"""Which lines of a text log are error lines, by the words every printer of an error
uses (Python's ``Traceback``/``...Error:``, glog's ``E`` level, NCCL's ``WARN``, a
``FAILED``/``Killed``/``core dumped`` from the launcher or the shell). ``unexplained``
quotes the earliest ones when no rule explains a log; they are picked while the log is
read, so its lines need not be kept.
"""

from __future__ import annotations

import re

from diag.analyze.signals import Signal
from diag.analyze.textlog import MAX_LINE, parse_line

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
    r"|\w*Warning: |NCCL INFO|\b0 (?:errors?|failed)\b|\bno errors?\b|<N/A>|exitcode\s*:\s*0\b"
    # c10's backtrace (its header and "frame #N:" lines): the continuation of the message
    # before it, never an error of its own ("Exception raised from recvBytes at .../Utils.hpp:787 (most recent...")
    r"|^\s*Exception raised from \S+ at |^\s*frame #\d+: ")


def error_lines(log) -> list[Signal]:
    """A text log's first MAX_ERROR_LINES error lines, in line order."""
    out = []
    for n, raw in enumerate(log.lines, 1):
        if len(out) >= MAX_ERROR_LINES:
            break
        if _is_error(raw):
            line = parse_line(n, raw[:MAX_LINE])
            out.append(Signal("error_line", log.path, n, raw[:2000], line.rank, line.host,
                              line.time))
    return out


def _is_error(raw: str) -> bool:
    if not _GATE.search(raw):
        return False
    text = raw[:MAX_LINE]
    return bool(_ERROR.search(text)) and not _NOT_ERROR.search(text)
