"""Typed facts pulled out of text logs, one per matching line.

A ``Signal`` is what a detector reasons over instead of raw text: its ``kind`` names the
fact (``watchdog_timeout``, ``nccl_warn``, ``store_connect_failed`` ...), ``fields`` hold
the values parsed from the line, and file/line/text are the evidence to quote.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diag.verdict import Evidence


@dataclass(frozen=True)
class Signal:
    kind: str
    file: str
    line: int
    text: str
    rank: int | None = None
    host: str | None = None
    time: float | None = None
    fields: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def evidence(self) -> Evidence:
        return Evidence(self.file, self.line, self.text.strip()[:400])
