"""``ddiag summary``: what each rank logged."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diag.cli.output import emit_json, fail


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def summary(run_dir: Path, as_json: bool) -> None:
    """Summarise what each rank logged in a run directory.

    \b
    Examples:
      ddiag summary runs/job-42
      ddiag summary runs/job-42 --json | jq '.ranks[0]'


    \b
    Exit codes: 0 summarised; 2 no readable event log, or not a run directory.
    """
    from diag.report.terminal import render_summary
    from diag.analyze.summary import summarize

    if not (run_dir / "events").is_dir():
        fail(f"{run_dir}: not a ddiag run directory (no events/ folder); "
             "pass the --out / DDIAG_RUN_DIR the job wrote to")
    result = summarize(run_dir)
    if as_json:
        emit_json(result.to_json())
    else:
        render_summary(result)
    if not result.ranks:
        fail(f"{run_dir / 'events'}: no readable event log ({len(result.problems)} "
             "problem(s) listed); pass the --out / DDIAG_RUN_DIR the job wrote to")
    sys.exit(0)
