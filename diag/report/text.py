"""Text from the user's files made safe for a terminal. Light on purpose (no rich), so
that the CLI's error path can use it without loading the renderers."""

from __future__ import annotations

import re

# C0 and C1 controls and DEL: ESC opens a terminal's escape sequences (a title change,
# concealed text, an OSC 52 clipboard write) and U+009B is a one-character CSI. A log
# line quoted in a finding must not drive the terminal it is read on.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# A line break inside quoted text would forge a line of ddiag's own.
_LINE_BREAK = re.compile(r"\r\n?|\n")


def plain(value) -> str:
    """Line breaks become spaces and every other control character but tab is dropped.
    Every terminal renderer passes quoted text through here (``Text(plain(x))``, or
    ``quote`` inside markup)."""
    return _CONTROL.sub("", _LINE_BREAK.sub(" ", str(value)))


def plain_lines(value) -> str:
    """``plain`` for a message of several lines that ddiag itself broke: each line is
    made plain, the breaks kept."""
    return "\n".join(plain(line) for line in str(value).split("\n"))
