"""``ddiag check-env``: parse, call ``diag.checkenv.run``, render. Nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diag.cli.options import launch_options, resolve_launch


@click.command("check-env")
@click.option("--all-ranks", is_flag=True,
              help="Check every rank of the job (inside torchrun/srun, or with --launcher).")
@launch_options
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory for the snapshots (default: $DDIAG_RUN_DIR, else a new "
                   "runs/check-env-<time>-<id> under the working directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Also show checks that did not apply.")
def check_env(all_ranks: bool, out: Path | None, as_json: bool, verbose: bool,
              **launch) -> None:
    """Check the environment for launcher, network and host mistakes, before training.

    \b
    Examples:
      ddiag check-env
      ddiag check-env --launcher local --nproc-per-node 2 --json
      torchrun --nproc-per-node 8 -m diag.cli check-env --all-ranks
    """
    from diag.checkenv import run
    from diag.format.rundir import default_run_dir
    from diag.report.text import plain_lines

    spec, job = resolve_launch(launch, in_job=all_ranks)
    out = out or default_run_dir("check-env", job and job.rendezvous_id)
    if spec:
        report, stderr = run.check_launched(spec, out, launch["group_timeout"])
        if report.missing_ranks and stderr:
            click.echo(f"ddiag: the launcher's stderr (last lines):\n{plain_lines(stderr)}",
                       err=True)
    elif job:
        report = run.check_in_job(out, job, launch["group_timeout"])
        if report is None:  # not rank 0: rank 0 reports for everyone
            sys.exit(0)
    else:
        if all_ranks:
            click.echo("ddiag: not inside torchrun or srun (no RANK/WORLD_SIZE, no "
                       "SLURM_PROCID): checking this process only; use --launcher to start "
                       "ranks", err=True)
        report = run.check_local(out)
    show(report, as_json, verbose)


def show(report, as_json: bool, verbose: bool) -> None:
    from diag.verdict import Status

    if as_json:
        from diag.cli.output import emit_json

        emit_json(report.to_json())
    else:
        from diag.report.checkenv import render

        render(report, verbose)
    sys.exit(1 if report.status is Status.FAIL or report.missing_ranks else 0)
