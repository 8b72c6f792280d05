"""Logs as people paste them: colour codes and a terminal's line wrapping undone before any
parser sees the text, so that a signature matches a copied line as it matches the file.

- Colour codes: loguru, rich, Lightning, colorlog and most launchers colour their lines
  with ANSI SGR sequences (``ESC[31m ... ESC[0m``). Copied out of a terminal the ESC byte
  often survives; pasted into an issue tracker it is usually lost and ``[31m ... [0m``
  remain. Both are removed (the bare form only in a text that holds a bare reset,
  ``[0m``, so a ``[5m`` of prose elsewhere is left alone).
- Terminal wrapping: a terminal (or tmux, or screen) copied at width W cuts every longer
  line into W-character pieces; no line of the paste is then longer than W, and several
  distinct lines are exactly W long. The piece after such a line is joined back to it.
  Line numbers stay those of the file: the joined text sits on the first line's number
  and the continuation's line is left empty.
"""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves: "ESC[1;31m", "ESC[2K") and OSC ones (titles,
# hyperlinks: "ESC]8;;url ESC\\"), per ECMA-48.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# SGR sequences whose ESC the paste lost: "[0m", "[1;32m", "[38;5;208m"
_BARE_SGR = re.compile(r"\[(?:\d{1,3}(?:;\d{1,3})*)?m")

MIN_WRAP_WIDTH = 60  # narrower "terminals" are more likely a column of short log lines
MIN_WRAPPED_LINES = 3  # distinct lines exactly at the width: one or two can be chance
# A line that starts a record of its own is not a wrapped piece: a timestamp, a bracketed
# prefix, NCCL's host:pid:tid prefix (also behind a quoter's "LOG1.0.txt:"), srun --label's
# "7: " and pdsh's "node3: ", indentation (traceback frames), a traceback header, or an
# exception's "Type: message".
_RECORD_START = re.compile(
    r"\s|\[|\d{4}-\d\d-\d\d|[IWEF]\d{4} |(?:[^\s:]+:)?[\w.-]+:\d+:\d+ \[\d+\]|Traceback |"
    r"\d{1,5}: |[a-z][\w.-]*\d[\w.-]*: |"
    r"(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Warning)\b")


def clean(text: str) -> str:
    """``text`` without colour codes."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "[0m" in text:
        text = _BARE_SGR.sub("", text)
    return text


def wrap_width(lines: list[str]) -> int | None:
    """The width a terminal wrapped these lines at, or None when they were not wrapped."""
    if not lines:
        return None
    width = max(len(line) for line in lines)
    if width < MIN_WRAP_WIDTH:
        return None
    at_width = [i for i, line in enumerate(lines) if len(line) == width]
    if len(set(lines[i] for i in at_width)) < MIN_WRAPPED_LINES:
        return None
    # a wrap leaves a piece after (nearly) every full line; equal-length records of
    # several ranks ("[rank1]: ...", "[rank2]: ...") are followed by records
    continued = sum(1 for i in at_width if _continues(lines, i + 1))
    return width if continued >= 0.75 * len(at_width) else None


def _continues(lines: list[str], i: int) -> bool:
    """Whether line ``i`` can be the rest of line ``i - 1``: not empty, not the start of a
    record, and not opening the way the line before it opened (a launcher's "7: " or
    "node3: " prefix, a logger's fixed head: records of one printer, each whole)."""
    if i >= len(lines) or not lines[i] or _RECORD_START.match(lines[i]):
        return False
    return lines[i][:_SAME_HEAD] != lines[i - 1][:_SAME_HEAD]


_SAME_HEAD = 4


def unwrap(lines: list[str]) -> list[str]:
    """The lines with a terminal's wrapping undone (the same list when not wrapped)."""
    width = wrap_width(lines)
    if width is None:
        return lines
    out = list(lines)
    head = None  # index of the line the record being rejoined started on
    for i, line in enumerate(lines):
        if head is not None and _continues(lines, i):
            out[head] += line
            out[i] = ""
            if len(line) != width:
                head = None  # the record's last piece
            continue
        head = i if len(line) == width else None
    return out
