"""``ddiag stacks``: every rank's Python stack now, grouped, for a job that imports nothing
of ddiag; the odd ones out named."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diag.cli.options import job_target_options
from diag.cli.output import emit_json, fail, say


@click.command()
@job_target_options
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Run directory to save the dumps in (stacks/rankNNNNN.json; `ddiag "
                   "analyze` reads them). Default: $DDIAG_RUN_DIR or runs/stacks-<time>.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def stacks(pid: int | None, slurm_job: str | None, out: Path | None, as_json: bool) -> None:
    """Capture every rank's Python stack (py-spy), group identical stacks, name the odd ones.

    Exit 1 when the stacks name a cause (a rank elsewhere than the others, ranks in
    different collectives: the finding says which and where), 0 when they do not, 2 when
    no rank could be found or captured.

    \b
    Examples:
      ddiag stacks --pid $(pgrep -f torchrun | head -1)
      ddiag stacks --pid 4242 --out runs/hang-1 --json && ddiag analyze runs/hang-1
      ddiag stacks --slurm-job 81234
    """
    from diag.format.rundir import default_run_dir
    from diag.report.terminal import render_stacks
    from diag.watch.stacks import grouped

    if (pid is None) == (slurm_job is None):
        fail("give one of --pid PID (a process of the job here) or --slurm-job JOBID")
    run_dir = out or default_run_dir("stacks")
    captures = _from_slurm(slurm_job, run_dir, as_json) if slurm_job else \
        _from_pid(pid, run_dir, as_json)
    result = grouped(captures, run_dir)
    if not result.captured:
        fail(f"no stack could be captured: {result.captures[0].error}")
    if as_json:
        emit_json(result.to_json())
    else:
        render_stacks(result)
    sys.exit(1 if result.names_a_cause else 0)


def _from_pid(pid: int, run_dir: Path, as_json: bool) -> list:
    from diag.watch import discover
    from diag.watch.stacks import capture

    try:
        procs = discover.ranks_under(pid)
    except discover.NoSuchProcess as exc:
        fail(str(exc))
    if not procs:
        fail(f"pid {pid}: no rank process at or under it (none has RANK, LOCAL_RANK and "
             "WORLD_SIZE in its environment); pass the launcher's pid or a rank's")
    if not as_json:
        say(f"ddiag stacks: {len(procs)} rank(s) under pid {pid}; dumps to {run_dir}")
    return capture(procs, run_dir)


def _from_slurm(job_id: str, run_dir: Path, as_json: bool) -> list:
    from diag.watch.slurmstacks import SlurmJobError, capture_job

    if not as_json:
        say(f"ddiag stacks: Slurm job {job_id}, every node through srun --overlap; dumps to "
            f"{run_dir}")
    try:
        captures = capture_job(job_id, run_dir)
    except SlurmJobError as exc:
        fail(str(exc))
    if not captures:
        fail(f"job {job_id}: no rank process on its nodes (none of the processes Slurm "
             "tracks has RANK, LOCAL_RANK and WORLD_SIZE in its environment)")
    return captures
