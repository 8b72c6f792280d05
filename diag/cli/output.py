"""What every verb shares to talk to a person: JSON on stdout, errors and progress on
stderr (stripped of control characters: they quote the user's files), and output files
checked before the work and created without following links."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


def emit_json(value: dict) -> None:
    """Machine-readable output goes to stdout, alone."""
    click.echo(json.dumps(value, indent=2, default=str))


def say(line: str) -> None:
    """A progress line on stderr; it may quote a file's name or content."""
    from diag.report.text import plain

    click.echo(plain(line), err=True)


class Throttled:
    """Progress for a long read: says nothing for the first ``after`` seconds (a small
    input is done by then), then a line every ``every`` seconds, and the last one."""

    def __init__(self, what: str, after: float = 2.0, every: float = 5.0, clock=None) -> None:
        import time

        self.what, self.every, self.clock = what, every, clock or time.monotonic
        self.next, self.spoke = self.clock() + after, False

    def __call__(self, done: int, total: int, nbytes: int) -> None:
        now = self.clock()
        if done == total and self.spoke or done < total and now >= self.next:
            say(f"{self.what}: {done}/{total} files read ({nbytes / 2**20:,.0f} MB)")
            self.spoke, self.next = True, now + self.every


def fail(message: str, code: int = 2) -> None:
    from diag.report.text import plain_lines

    # Messages quote paths and values from the user's files: no escape sequence passes.
    click.echo(f"ddiag: error: {plain_lines(message)}", err=True)
    sys.exit(code)


def check_outputs(paths: dict[str, Path | None]) -> None:
    """Output paths are refused before the work starts, not after it is done."""
    from diag.format.outfile import OutputFileError, check_new

    try:
        check_new(paths)
    except OutputFileError as exc:
        fail(str(exc))


def write_output(opt: str, path: Path, text: str) -> None:
    from diag.format.outfile import OutputFileError, write_new

    try:
        write_new(opt, path, text)
    except OutputFileError as exc:
        fail(str(exc))
    click.echo(f"ddiag: wrote {path}", err=True)


def write_reports(result, html_out: Path | None, trace_out: Path | None) -> None:
    if html_out is not None:
        from diag.report.html import render_html

        write_output("--html", html_out, render_html(result, result.inputs))
    if trace_out is not None:
        from diag.report.trace import build_trace

        write_output("--trace", trace_out, json.dumps(build_trace(result.inputs)))
