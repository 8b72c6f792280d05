"""``ddiag watch``: a live job's heartbeats, or, for a job that imports nothing of ddiag,
its ranks' stacks and CPU time; on a hang, every rank's stack and who."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diag.cli.options import Seconds, job_target_options
from diag.cli.output import emit_json, fail, say


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path), required=False)
@job_target_options
@click.option("--stall", "stall_s", type=Seconds(), default=60.0, show_default=True,
              help="Seconds without progress on any rank before a hang is considered.")
@click.option("--kill", is_flag=True, help="End the job once a hang is captured.")
@click.option("--timeout", "timeout_s", type=Seconds(), default=None,
              help="Stop watching after this many seconds (default: until the job ends).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def watch(run_dir: Path | None, pid: int | None, slurm_job: str | None, stall_s: float,
          kill: bool, timeout_s: float | None, as_json: bool) -> None:
    """Watch a live job; on a hang, capture every rank's stack and say who.

    With RUN_DIR alone, the job's ranks use the decorator and watch reads their
    heartbeats there. With --pid or --slurm-job, the job imports nothing of ddiag: watch
    samples its ranks' stacks (py-spy, without stopping them) and CPU time.

    \b
    Examples:
      ddiag watch runs/job-42 --stall 120
      ddiag watch $DDIAG_RUN_DIR --stall 60 --kill --json
      ddiag watch --pid $(pgrep -f torchrun | head -1) --stall 120 --kill
      ddiag watch --slurm-job 81234 --stall 120
    """
    if pid is not None and slurm_job is not None:
        fail("give --pid or --slurm-job, not both")
    if pid is not None or slurm_job is not None:
        _watch_sampled(pid, slurm_job, run_dir, stall_s, kill, timeout_s, as_json)
    if run_dir is None:
        fail("give the job's RUN_DIR (decorated ranks) or --pid PID (any job)")
    _watch_dir(run_dir, stall_s, kill, timeout_s, as_json)


def _watch_dir(run_dir: Path, stall_s: float, kill: bool, timeout_s: float | None,
               as_json: bool) -> None:
    from diag.report.terminal import render_watch
    from diag.watch.loop import DIR_APPEAR_S, wait_for_dir
    from diag.watch.loop import watch as run_watch

    if run_dir.exists() and not run_dir.is_dir():
        fail(f"{run_dir}: not a directory; pass the --out / DDIAG_RUN_DIR of the job")
    limit = min(DIR_APPEAR_S, timeout_s or DIR_APPEAR_S)
    if not run_dir.exists():
        say(f"ddiag watch: waiting up to {limit:g} s for {run_dir} to appear")
    if not wait_for_dir(run_dir, limit):
        fail(f"{run_dir}: no such directory after {limit:g} s; pass the --out / "
             "DDIAG_RUN_DIR the job writes to")
    result = run_watch(run_dir, stall_s, kill=kill, timeout_s=timeout_s,
                       status=lambda line: say(f"ddiag watch: {line}") if not as_json else None,
                       warn=lambda line: say(f"ddiag watch: {line}"))
    if as_json:
        emit_json(result.to_json())
    else:
        render_watch(result)
    sys.exit(1 if result.alarm else 0)


def _watch_sampled(pid: int | None, slurm_job: str | None, run_dir: Path | None,
                   stall_s: float, kill: bool, timeout_s: float | None, as_json: bool) -> None:
    from diag.format.rundir import default_run_dir
    from diag.report.terminal import render_sampled_watch
    from diag.watch import discover
    from diag.watch.sampled import watch_pid
    from diag.watch.slurmstacks import SlurmJobError
    from diag.watch.slurmwatch import watch_job

    if pid is not None and (pid <= 1 or discover.proc_stat(pid) is None):
        fail(f"pid {pid}: no such process here; pass the job's launcher pid or a rank's")
    run_dir = run_dir or default_run_dir("watch")
    if run_dir.exists() and not run_dir.is_dir():
        fail(f"{run_dir}: not a directory")
    status = lambda line: say(f"ddiag watch: {line}")  # noqa: E731
    try:
        result = watch_pid(pid, run_dir, stall_s, kill=kill, timeout_s=timeout_s,
                           status=status) if pid is not None else \
            watch_job(slurm_job, run_dir, stall_s, kill=kill, timeout_s=timeout_s,
                      status=status)
    except SlurmJobError as exc:
        fail(str(exc))
    if as_json:
        emit_json(result.to_json())
    else:
        render_sampled_watch(result)
    sys.exit(1 if result.alarm else 0)
