"""``ddiag analyze``: root causes from a run directory, a folder of logs or one log."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diag.cli.output import Throttled, check_outputs, emit_json, fail, write_reports


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON on stdout.")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Also write a self-contained HTML report (findings and plots) here.")
@click.option("--trace", "trace_out", type=click.Path(path_type=Path),
              help="Also write a Chrome trace-event JSON of all ranks here (open in Perfetto).")
@click.option("--steps", "steps", metavar="A:B",
              help="Analyse only steps A to B of the event logs (A: or :B leaves a side "
                   "open).")
@click.option("--since", "since", metavar="WHEN",
              help="Analyse only what was recorded at or after WHEN: Unix seconds, or an ISO "
                   "date and time (2026-12-03T14:05:00, local time unless it has an offset).")
def analyze(path: Path, as_json: bool, html_out: Path | None, trace_out: Path | None,
            steps: str | None, since: str | None) -> None:
    """Find the root cause in a run directory, a folder of logs, or one log file.

    \b
    Examples:
      ddiag analyze runs/job-42
      ddiag analyze slurm-1234.out --json
      ddiag analyze logs/ --html report.html --trace trace.json


    \b
    Exit codes:
      0  looked, and found nothing
      1  findings
      2  nothing to analyse, event logs of several runs, or bad usage
      3  a detector failed (a ddiag bug): the findings may be incomplete
    """
    from diag.analyze import analyze as run_analysis
    from diag.analyze.inputs import Limits
    from diag.report.terminal import render_analysis

    if not path.exists():
        fail(f"{path}: no such file or directory; pass a run directory, a folder of "
             "logs, or a single log file")
    check_outputs({"--html": html_out, "--trace": trace_out})
    result = run_analysis(path, Limits(window=window_of(steps, since)),
                          progress=Throttled("analyze"))
    if result.refusal is None:
        write_reports(result, html_out, trace_out)
    if as_json:
        emit_json(result.to_json())
    else:
        render_analysis(result)
    if result.refusal:
        fail(result.refusal)
    sys.exit(result.outcome.exit_code)


def window_of(steps: str | None, since: str | None):
    """The --steps/--since window, or None; a bad value is a usage error naming it."""
    from diag.analyze.eventcols import Window

    if steps is None and since is None:
        return None
    first = last = None
    if steps is not None:
        first, last = _step_range(steps)
    return Window(first, last, _when(since) if since is not None else None)


def _step_range(text: str) -> tuple[int | None, int | None]:
    a, sep, b = text.partition(":")
    try:
        first = int(a) if a.strip() else None
        last = (int(b) if b.strip() else None) if sep else first
    except ValueError:
        first = last = "bad"
    if first == "bad" or (first is None and last is None) or (
            first is not None and last is not None and first > last):
        raise click.BadParameter(f"{text!r}: give steps as A:B (e.g. 900:1000, 900: or :100), "
                                 "with A <= B", param_hint="--steps")
    return first, last


def _when(text: str) -> float:
    from datetime import datetime

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise click.BadParameter(f"{text!r}: give Unix seconds (1764770700) or an ISO date "
                                 "and time (2026-12-03T14:05:00)", param_hint="--since") from None
