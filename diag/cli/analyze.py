"""``ddiag analyze``: root causes from a run directory, a folder of logs or one log."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diag.cli.output import check_outputs, emit_json, fail, write_reports


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON on stdout.")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Also write a self-contained HTML report (findings and plots) here.")
@click.option("--trace", "trace_out", type=click.Path(path_type=Path),
              help="Also write a Chrome trace-event JSON of all ranks here (open in Perfetto).")
def analyze(path: Path, as_json: bool, html_out: Path | None, trace_out: Path | None) -> None:
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
    from diag.report.terminal import render_analysis

    if not path.exists():
        fail(f"{path}: no such file or directory; pass a run directory, a folder of "
             "logs, or a single log file")
    check_outputs({"--html": html_out, "--trace": trace_out})
    result = run_analysis(path)
    if result.refusal is None:
        write_reports(result, html_out, trace_out)
    if as_json:
        emit_json(result.to_json())
    else:
        render_analysis(result)
    if result.refusal:
        fail(result.refusal)
    sys.exit(result.outcome.exit_code)
