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
# ... except at a terminal's usual widths, where one message wrapped once is the common
# paste (an error copied out of an 80- or 120-column window)
TERMINAL_WIDTHS = frozenset({80, 100, 120, 132, 160, 200})
# A line that starts a record of its own is not a wrapped piece: a timestamp, a launcher's
# or logger's bracketed prefix ("[rank3]:", "[1,3]<stdout>:", "[2026-...", "[E1204 "), NCCL's host:pid:tid prefix (also behind a quoter's "LOG1.0.txt:"), srun --label's
# "7: " and pdsh's "node3: ", indentation (traceback frames: two spaces or a tab; one space
# is where a cut fell before a space), a traceback header, or an exception's "Type: message"
# (a piece that merely starts "[3] to 3" or "Error" is the rest of the line before it).
_RECORD_START = re.compile(
    r"\s\s|\t|\[(?:[A-Za-z_]+\d+\]:|\d+,\d+\]<|\d{4}-|[IWEF]\d{4} |PG |Rank )"
    r"|\d{4}-\d\d-\d\d|[IWEF]\d{4} |(?:[^\s:]+:)?[\w.-]+:\d+:\d+ \[\d+\]|Traceback |"
    r"(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Warning):\s")
# srun --label's "7: " and pdsh's "node3: ": a record's start in a log whose lines carry them;
# elsewhere "76: 1048576" is the rest of a number the terminal cut
_LABEL = re.compile(r"\d{1,5}: |[a-z][\w.-]*\d[\w.-]*: ")


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
    need = 1 if width in TERMINAL_WIDTHS else MIN_WRAPPED_LINES
    if len(set(lines[i] for i in at_width)) < need:
        return None
    # a wrap leaves a piece after (nearly) every full line; equal-length records of
    # several ranks ("[rank1]: ...", "[rank2]: ...") are followed by records
    followed = [i for i in at_width if i + 1 < len(lines)]  # a last piece may be full too
    continued = sum(1 for i in followed if _continues(lines, i + 1))
    return width if followed and continued >= 0.75 * len(followed) else None


def _continues(lines: list[str], i: int) -> bool:
    """Whether line ``i`` can be the rest of line ``i - 1``: not empty, not the start of a
    record, and not opening the way the line before it opened (a launcher's "7: " or
    "node3: " prefix, a logger's fixed head: records of one printer, each whole)."""
    if i >= len(lines) or not lines[i] or _RECORD_START.match(lines[i]):
        return False
    if _LABEL.match(lines[i]) and _LABEL.match(lines[i - 1]):
        return False
    return lines[i][:_SAME_HEAD] != lines[i - 1][:_SAME_HEAD]


_SAME_HEAD = 8  # fewer letters are shared by chance ("Runt" of RuntimeError and a cut word)


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
