"""``ddiag scale-test``: staged 1 -> 2 -> 4 -> N runs, and where scaling breaks."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
from pathlib import Path

import click

from diag.cli.options import Seconds
from diag.cli.output import check_outputs, emit_json, fail, write_output
from diag.launch import LAUNCHERS
from reference_trainer.config import MODES


def _model_args(**sizes: int | None) -> tuple[str, ...]:
    """The trainer's own model flags, for the sizes given."""
    return tuple(a for name, value in sizes.items() if value is not None
                 for a in (f"--{name}", str(value)))


def _metric_regex(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--metric is checked as it is parsed: a bad regex is a usage error, not a stage
    that fails after minutes of running."""
    from diag.scaletest.throughput import compile_metric

    if value is not None:
        try:
            compile_metric(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc).removeprefix("--metric "),
                                     ctx, param) from None
    return value


TRAINER_ONLY = ("mode", "batch", "width", "layers", "vocab", "inject")
"""The reference trainer's options: a command runs its own model and parallelism."""


class _ScaleTestCommand(click.Command):
    """Remembers whether ``--`` was on the command line: ``--`` with nothing after it is
    a mistake, not a request for the reference trainer."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["scale_test.dash"] = "--" in args
        return super().parse_args(ctx, args)


@click.command("scale-test", cls=_ScaleTestCommand)
@click.option("--stages", default=None,
              help="Comma-separated stages: process counts (local) or node counts (slurm). "
                   "Default: 1,2,4,... up to this host's cores (local); 1,2,4 (slurm).")
@click.option("--mode", default="ddp", show_default=True,
              type=click.Choice(MODES))
@click.option("--launcher", default="local", show_default=True,
              type=click.Choice(LAUNCHERS))
@click.option("--nproc-per-node", default=1, show_default=True, type=click.IntRange(min=1),
              help="Ranks per node (slurm).")
@click.option("--steps", default=100, show_default=True, type=click.IntRange(min=1),
              help="Reference trainer's steps per stage. With a command: the steps each rank "
                   "does at every stage, for throughput from wall time (ddiag passes it to "
                   "nobody; a DistributedSampler's shrinking steps need --strong).")
@click.option("--metric", metavar="REGEX", default=None, callback=_metric_regex,
              help="With a command that writes no ddiag event logs: its throughput, read "
                   r"from its stdout and stderr by REGEX (group 1, or the whole match), e.g. "
                   r"'(\d+(?:\.\d+)?) samples/s'; the median after the first 20% of matches.")
@click.option("--shared-cwd", is_flag=True,
              help="With a command: run every stage in this directory, as it is (each stage "
                   "sees what the earlier ones wrote, a checkpoint it resumes from). Default: "
                   "each stage runs in a mirror of it of its own.")
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
@click.option("--no-check-env", is_flag=True,
              help="Skip check-env before each stage (its snapshots tell whether ranks "
                   "share cores).")
@click.option("--env-on", multiple=True, metavar="NODE:VAR=VALUE",
              help="Set VAR on one node for every launch, to rehearse a misconfiguration "
                   "(repeatable).")
@click.option("--master-port", type=click.IntRange(1, 65535), default=None,
              help="Rendezvous port for every launch (default: a free one each time).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory (default: a new runs/scale-test-<time>-<id>).")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Also write a self-contained HTML report (table, scaling curve, plots) here.")
@click.option("--dry-run", is_flag=True,
              help="Print what would run (the sbatch script, or each local stage's commands) "
                   "and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def scale_test(ctx, stages, mode, launcher, nproc_per_node, steps, metric, shared_cwd, batch,
               strong,
               width, layers, vocab, inject,
               stage_timeout, stall, keep_going, no_probes, no_check_env, env_on, master_port, out,
               html_out, dry_run, as_json, command) -> None:
    """Run the reference trainer, or your own command (after --), at 1 -> 2 -> 4 -> N
    and explain where scaling breaks.

    \b
    Examples:
      ddiag scale-test
      ddiag scale-test --stages 1,2 --mode zero2 --steps 50 --html st.html
      ddiag scale-test --launcher slurm --stages 1,2,4 --nproc-per-node 8 --dry-run
      ddiag scale-test --metric '(\\d+\\.\\d+) samples/s' -- train.py --epochs 1
    """
    from diag.format.rundir import default_run_dir
    from diag.report.terminal import render_scale_test, scale_test_status
    from diag.scaletest import plan
    from diag.scaletest.config import ScaleTestConfig, default_stages
    from diag.scaletest.run import scale_test as run_scale_test
    from diag.launch import LaunchError, parse_env_on

    _check_command(ctx, command)
    out = out or default_run_dir("scale-test", own_run=True)
    job_id = os.environ.get("SLURM_JOB_ID") if launcher == "slurm" else None
    if plan.run_dir_in_use(out, job_id):
        fail(f"{out} exists and is not empty; ddiag never overwrites a run: pass a new --out")
    check_outputs({"--html": html_out})
    try:
        parsed = tuple(int(s) for s in stages.split(",")) if stages else default_stages(launcher)
        cfg = ScaleTestConfig(out=out, stages=parsed, mode=mode, launcher=launcher,
                              nproc_per_node=nproc_per_node, steps=steps, batch=batch,
                              strong=strong, inject=tuple(inject), stage_timeout_s=stage_timeout,
                              stall_s=stall, keep_going=keep_going, probes=not no_probes,
                              check_env=not no_check_env,
                              env_on=tuple(env_on), master_port=master_port,
                              slurm_job_id=job_id, command=tuple(command), metric=metric,
                              shared_cwd=shared_cwd, cwd=Path.cwd(),
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

        write_output("--html", html_out, render_scale_test_html(result))
    if as_json:
        emit_json(result.to_json())
    else:
        render_scale_test(result)
    sys.exit(0 if result.healthy else 1)


def _check_command(ctx: click.Context, command: tuple[str, ...]) -> None:
    """A command comes after ``--`` (so that its flags are not taken for ours), and the
    reference trainer's options do not go with it."""
    from click.core import ParameterSource

    dash = ctx.meta.get("scale_test.dash", False)
    if dash and not command:
        fail("-- must be followed by your training command, e.g. "
             "ddiag scale-test -- train.py --epochs 1 (nothing after --: drop it to stage "
             "the reference trainer)")
    if command and not dash:
        fail(f"put your training command after --: ddiag scale-test [options] -- "
             f"{shlex.join(command)} (got {command[0]!r} among scale-test's options)")
    given = [name for name in TRAINER_ONLY
             if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if command and given:
        fail(f"--{given[0]} is the reference trainer's option; your command "
             f"({shlex.join(command[:3])} ...) sets its own model, batch and parallelism: "
             f"drop --{given[0]}")


def _this_command(ctx: click.Context, out: Path) -> list[str]:
    """This scale-test again, for a Slurm allocation to run: every option given, --out
    made absolute (its default is a fresh timestamp), --dry-run left out, and the
    user's command last, after --."""
    args = []
    for param in ctx.command.params:
        value = ctx.params[param.name]
        if param.name in ("out", "dry_run", "command") or value is None or value is False \
                or value == () or value == param.default:
            continue
        name = param.opts[0]
        if param.is_flag:
            args.append(name)
        else:
            args += [a for v in (value if param.multiple else [value]) for a in (name, str(v))]
    tail = ["--", *ctx.params["command"]] if ctx.params["command"] else []
    return [sys.executable, "-m", "diag.cli", "scale-test", *args, "--out",
            str(out.resolve()), *tail]


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
