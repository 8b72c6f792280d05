"""The ``ddiag`` command line: parse, call the verb's module, render. Nothing else.

Imports here stay light: ``ddiag --help`` and ``--version`` must not import torch.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

import click

from diag import __version__
from diag.options import Seconds


def emit_json(value: dict) -> None:
    """Machine-readable output goes to stdout, alone."""
    click.echo(json.dumps(value, indent=2, default=str))


def _say(line: str) -> None:
    """A progress line on stderr; it may quote a file's name or content."""
    from diag.terminal import plain

    click.echo(plain(line), err=True)


def fail(message: str, code: int = 2) -> None:
    from diag.terminal import plain_lines

    # Messages quote paths and values from the user's files: no escape sequence passes.
    click.echo(f"ddiag: error: {plain_lines(message)}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddiag")
def main() -> None:
    """Debugging and diagnostics for distributed PyTorch training."""


@main.command()
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
    from diag.render import render_summary
    from diag.summary import summarize

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


from diag.lab.cli import lab as _lab  # noqa: E402
main.add_command(_lab)


@main.command()
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
    from diag.render import render_analysis

    if not path.exists():
        fail(f"{path}: no such file or directory; pass a run directory, a folder of "
             "logs, or a single log file")
    _check_outputs({"--html": html_out, "--trace": trace_out})
    result = run_analysis(path)
    if result.refusal is None:
        _write_reports(result, html_out, trace_out)
    if as_json:
        emit_json(result.to_json())
    else:
        render_analysis(result)
    if result.refusal:
        fail(result.refusal)
    sys.exit(result.outcome.exit_code)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--stall", "stall_s", type=Seconds(), default=60.0, show_default=True,
              help="Seconds without progress on any rank before a hang is considered.")
@click.option("--kill", is_flag=True, help="End the job once a hang is captured.")
@click.option("--timeout", "timeout_s", type=Seconds(), default=None,
              help="Stop watching after this many seconds (default: until the job ends).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def watch(run_dir: Path, stall_s: float, kill: bool, timeout_s: float | None,
          as_json: bool) -> None:
    """Watch a live job's heartbeats; on a hang, capture every rank's stack and say who.

    \b
    Examples:
      ddiag watch runs/job-42 --stall 120
      ddiag watch $DDIAG_RUN_DIR --stall 60 --kill --json
    """
    from diag.render import render_watch
    from diag.watch_run import DIR_APPEAR_S, wait_for_dir
    from diag.watch_run import watch as run_watch

    if run_dir.exists() and not run_dir.is_dir():
        fail(f"{run_dir}: not a directory; pass the --out / DDIAG_RUN_DIR of the job")
    limit = min(DIR_APPEAR_S, timeout_s or DIR_APPEAR_S)
    if not run_dir.exists():
        _say(f"ddiag watch: waiting up to {limit:g} s for {run_dir} to appear")
    if not wait_for_dir(run_dir, limit):
        fail(f"{run_dir}: no such directory after {limit:g} s; pass the --out / "
             "DDIAG_RUN_DIR the job writes to")
    result = run_watch(run_dir, stall_s, kill=kill, timeout_s=timeout_s,
                       status=lambda line: _say(f"ddiag watch: {line}") if not as_json else None,
                       warn=lambda line: _say(f"ddiag watch: {line}"))
    if as_json:
        emit_json(result.to_json())
    else:
        render_watch(result)
    sys.exit(1 if result.alarm else 0)


def _model_args(**sizes: int | None) -> tuple[str, ...]:
    """The trainer's own model flags, for the sizes given."""
    return tuple(a for name, value in sizes.items() if value is not None
                 for a in (f"--{name}", str(value)))


@main.command("scale-test")
@click.option("--stages", default=None,
              help="Comma-separated stages: process counts (local) or node counts (slurm). "
                   "Default: 1,2,4,... up to this host's cores (local); 1,2,4 (slurm).")
@click.option("--mode", default="ddp", show_default=True,
              type=click.Choice(["ddp", "pipeline", "zero1", "zero2", "zero3"]))
@click.option("--launcher", default="local", show_default=True,
              type=click.Choice(["local", "slurm"]))
@click.option("--nproc-per-node", default=1, show_default=True, type=click.IntRange(min=1),
              help="Ranks per node (slurm).")
@click.option("--steps", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--batch", default=8, show_default=True, type=click.IntRange(min=1),
              help="Per-rank micro-batch.")
@click.option("--strong", is_flag=True, help="Strong scaling: keep the first stage's global batch.")
@click.option("--width", type=click.IntRange(min=8), default=None,
              help="Trainer model's hidden size (default: the trainer's, 64).")
@click.option("--layers", type=click.IntRange(min=1), default=None,
              help="Trainer model's transformer blocks (default: the trainer's, 2).")
@click.option("--vocab", type=click.IntRange(min=2), default=None,
              help="Trainer model's vocabulary (default: the trainer's, 128). Its embedding "
                   "adds gradient bytes at little compute: raise it to rehearse a job whose "
                   "steps are bound by the network.")
@click.option("--inject", multiple=True, help="Trainer fault, e.g. slow_compute:rank=1 (repeatable).")
@click.option("--stage-timeout", default=300.0, show_default=True, type=Seconds())
@click.option("--stall", default=30.0, show_default=True, type=Seconds(),
              help="Seconds without progress before the watcher calls a hang.")
@click.option("--keep-going", is_flag=True, help="Run later stages after a stage fails.")
@click.option("--no-probes", is_flag=True, help="Skip the collective/compute/link probes.")
@click.option("--env-on", multiple=True, metavar="NODE:VAR=VALUE",
              help="Set VAR on one node for every launch, to rehearse a misconfiguration "
                   "(repeatable).")
@click.option("--master-port", type=click.IntRange(1, 65535), default=None,
              help="Rendezvous port for every launch (default: a free one each time).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory (default: a new runs/scale-test-<time>).")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Also write a self-contained HTML report (table, scaling curve, plots) here.")
@click.option("--dry-run", is_flag=True,
              help="Print what would run (the sbatch script, or each local stage's commands) "
                   "and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.pass_context
def scale_test(ctx, stages, mode, launcher, nproc_per_node, steps, batch, strong, width,
               layers, vocab, inject,
               stage_timeout, stall, keep_going, no_probes, env_on, master_port, out,
               html_out, dry_run, as_json) -> None:
    """Run the reference trainer at 1 -> 2 -> 4 -> N and explain where scaling breaks.

    \b
    Examples:
      ddiag scale-test
      ddiag scale-test --stages 1,2 --mode zero2 --steps 50 --html st.html
      ddiag scale-test --launcher slurm --stages 1,2,4 --nproc-per-node 8 --dry-run
    """
    from diag.render import render_scale_test, scale_test_status
    from diag.scaletest import plan
    from diag.scaletest.config import ScaleTestConfig, default_stages
    from diag.scaletest.run import scale_test as run_scale_test
    from probes.launch import LaunchError, parse_env_on

    out = out or Path("runs") / time.strftime("scale-test-%Y%m%d-%H%M%S")
    job_id = os.environ.get("SLURM_JOB_ID") if launcher == "slurm" else None
    if plan.run_dir_in_use(out, job_id):
        fail(f"{out} exists and is not empty; ddiag never overwrites a run: pass a new --out")
    _check_outputs({"--html": html_out})
    try:
        parsed = tuple(int(s) for s in stages.split(",")) if stages else default_stages(launcher)
        cfg = ScaleTestConfig(out=out, stages=parsed, mode=mode, launcher=launcher,
                              nproc_per_node=nproc_per_node, steps=steps, batch=batch,
                              strong=strong, inject=tuple(inject), stage_timeout_s=stage_timeout,
                              stall_s=stall, keep_going=keep_going, probes=not no_probes,
                              env_on=tuple(env_on), master_port=master_port,
                              slurm_job_id=job_id,
                              trainer_args=_model_args(width=width, layers=layers, vocab=vocab))
        parse_env_on(cfg.env_on)
    except (ValueError, LaunchError) as exc:
        fail(str(exc).replace("invalid literal for int() with base 10",
                              f"--stages must be integers like 1,2,4, got {stages!r}"))
    if dry_run:
        if as_json:
            emit_json(plan.dry_run_json(cfg, _this_command(ctx, out), Path.cwd()))
        else:
            click.echo(plan.dry_run(cfg, _this_command(ctx, out), Path.cwd()), nl=False)
        sys.exit(0)
    if (problem := plan.allocation_too_small(cfg, os.environ)):
        fail(problem)
    if plan.needs_allocation(cfg, os.environ):
        _rerun_under_salloc(plan.salloc_argv(cfg, _this_command(ctx, out)))
    out.mkdir(parents=True, exist_ok=True)
    _stop_on_sigterm()
    live = sys.stderr.isatty() and not as_json
    with scale_test_status(cfg, live) as status:
        result = run_scale_test(cfg, status=status)
    if html_out is not None:
        from diag.report.scale_test_html import render_scale_test_html

        _write_output("--html", html_out, render_scale_test_html(result))
    if as_json:
        emit_json(result.to_json())
    else:
        render_scale_test(result)
    sys.exit(0 if result.healthy else 1)


def _this_command(ctx: click.Context, out: Path) -> list[str]:
    """This scale-test again, for a Slurm allocation to run: every option given, --out
    made absolute (its default is a fresh timestamp) and --dry-run left out."""
    args = []
    for param in ctx.command.params:
        value = ctx.params[param.name]
        if param.name in ("out", "dry_run") or value is None or value is False \
                or value == () or value == param.default:
            continue
        name = param.opts[0]
        if param.is_flag:
            args.append(name)
        else:
            args += [a for v in (value if param.multiple else [value]) for a in (name, str(v))]
    return [sys.executable, "-m", "diag.cli", "scale-test", *args, "--out", str(out.resolve())]


def _stop_on_sigterm() -> None:
    """salloc forwards SIGTERM to the scale test, and scancel sends it to a batch job:
    stop as on Ctrl-C (the stage's ranks killed, what was collected reported)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def _rerun_under_salloc(argv: list[str]) -> None:
    """Replace this process with salloc running the same scale test, so every stage
    shares one allocation. salloc ignores Ctrl-C once the command runs and waits for it:
    the inner scale test stops its stage, reports, and salloc releases the nodes."""
    if shutil.which("salloc") is None:
        fail("--launcher slurm outside an allocation runs the stages under salloc, which is "
             "not on PATH; install the Slurm client tools, or start ddiag inside an "
             "allocation (salloc or sbatch)")
    click.echo(f"ddiag scale-test: no Slurm allocation (SLURM_JOB_ID unset); running under "
               f"{shlex.join(argv[:4])} ...", err=True)
    sys.stderr.flush()
    sys.stdout.flush()
    os.execvp("salloc", argv)


def _check_outputs(paths: dict[str, Path | None]) -> None:
    """Output paths are refused before the work starts, not after it is done."""
    from diag.outfile import OutputFileError, check_new

    try:
        check_new(paths)
    except OutputFileError as exc:
        fail(str(exc))


def _write_output(opt: str, path: Path, text: str) -> None:
    from diag.outfile import OutputFileError, write_new

    try:
        write_new(opt, path, text)
    except OutputFileError as exc:
        fail(str(exc))
    click.echo(f"ddiag: wrote {path}", err=True)


def _write_reports(result, html_out: Path | None, trace_out: Path | None) -> None:
    if html_out is not None:
        from diag.report.html import render_html

        _write_output("--html", html_out, render_html(result, result.inputs))
    if trace_out is not None:
        from diag.report.trace import build_trace

        _write_output("--trace", trace_out, json.dumps(build_trace(result.inputs)))


# check-env and probe (issue 5)
from diag.checkenv.cli import check_env as _check_env  # noqa: E402
from probes.cli import probe as _probe  # noqa: E402
main.add_command(_check_env)
main.add_command(_probe)


if __name__ == "__main__":
    main()
