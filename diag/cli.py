"""The ``ddiag`` command line: parse, call the verb's module, render. Nothing else.

Imports here stay light: ``ddiag --help`` and ``--version`` must not import torch.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from diag import __version__


def emit_json(value: dict) -> None:
    """Machine-readable output goes to stdout, alone."""
    click.echo(json.dumps(value, indent=2, default=str))


def fail(message: str, code: int = 2) -> None:
    click.echo(f"ddiag: error: {message}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddiag")
def main() -> None:
    """Debugging and diagnostics for distributed PyTorch training."""


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def summary(run_dir: Path, as_json: bool) -> None:
    """Summarise what each rank logged in a run directory."""
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
    sys.exit(0 if result.ranks else 1)


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
    """Find the root cause in a run directory, a folder of logs, or one log file."""
    from diag.analyze import analyze as run_analysis
    from diag.render import render_analysis

    if not path.exists():
        fail(f"{path}: no such file or directory; pass a run directory, a folder of "
             "logs, or a single log file")
    for out in (html_out, trace_out):
        if out is not None and out.exists():
            fail(f"{out} already exists; ddiag never overwrites a file: pass a new path")
    result = run_analysis(path)
    _write_reports(result, html_out, trace_out)
    if as_json:
        emit_json(result.to_json())
    else:
        render_analysis(result)
    sys.exit(1 if result.findings else 0)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--stall", "stall_s", type=float, default=60.0, show_default=True,
              help="Seconds without progress on any rank before a hang is considered.")
@click.option("--kill", is_flag=True, help="End the job once a hang is captured.")
@click.option("--timeout", "timeout_s", type=float, default=None,
              help="Stop watching after this many seconds (default: until the job ends).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def watch(run_dir: Path, stall_s: float, kill: bool, timeout_s: float | None,
          as_json: bool) -> None:
    """Watch a live job's heartbeats; on a hang, capture every rank's stack and say who."""
    from diag.render import render_watch
    from diag.watch_run import watch as run_watch

    if stall_s <= 0:
        fail(f"--stall must be > 0 seconds, got: {stall_s}")
    if run_dir.exists() and not run_dir.is_dir():
        fail(f"{run_dir}: not a directory; pass the --out / DDIAG_RUN_DIR of the job")
    result = run_watch(run_dir, stall_s, kill=kill, timeout_s=timeout_s,
                       status=lambda line: click.echo(f"ddiag watch: {line}", err=True)
                       if not as_json else None)
    if as_json:
        emit_json(result.to_json())
    else:
        render_watch(result)
    sys.exit(1 if result.alarm else 0)


@main.command("scale-test")
@click.option("--stages", default=None,
              help="Comma-separated stages: process counts (local) or node counts (slurm). "
                   "Default: 1,2,4,... up to this host's cores (local); 1,2,4 (slurm).")
@click.option("--mode", default="ddp", show_default=True,
              type=click.Choice(["ddp", "pipeline", "zero1", "zero2", "zero3"]))
@click.option("--launcher", default="local", show_default=True,
              type=click.Choice(["local", "slurm"]))
@click.option("--nproc-per-node", default=1, show_default=True, type=int,
              help="Ranks per node (slurm).")
@click.option("--steps", default=30, show_default=True, type=int)
@click.option("--batch", default=8, show_default=True, type=int, help="Per-rank micro-batch.")
@click.option("--strong", is_flag=True, help="Strong scaling: keep the first stage's global batch.")
@click.option("--inject", multiple=True, help="Trainer fault, e.g. slow_compute:rank=1 (repeatable).")
@click.option("--stage-timeout", default=300.0, show_default=True, type=float)
@click.option("--stall", default=30.0, show_default=True, type=float,
              help="Seconds without progress before the watcher calls a hang.")
@click.option("--keep-going", is_flag=True, help="Run later stages after a stage fails.")
@click.option("--no-probes", is_flag=True, help="Skip the collective/compute/link probes.")
@click.option("--env-on", multiple=True, metavar="NODE:VAR=VALUE",
              help="Set VAR on one node for every launch, to rehearse a misconfiguration "
                   "(repeatable).")
@click.option("--master-port", type=int, default=None,
              help="Rendezvous port for every launch (default: a free one each time).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run directory (default: a new runs/scale-test-<time>).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def scale_test(stages, mode, launcher, nproc_per_node, steps, batch, strong, inject,
               stage_timeout, stall, keep_going, no_probes, env_on, master_port, out,
               as_json) -> None:
    """Run the reference trainer at 1 -> 2 -> 4 -> N and explain where scaling breaks."""
    from diag.render import render_scale_test
    from diag.scaletest.config import ScaleTestConfig, default_stages
    from diag.scaletest.run import scale_test as run_scale_test
    from probes.launch import LaunchError, parse_env_on

    out = out or Path("runs") / time.strftime("scale-test-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        fail(f"{out} exists and is not empty; ddiag never overwrites a run: pass a new --out")
    try:
        parsed = tuple(int(s) for s in stages.split(",")) if stages else default_stages(launcher)
        cfg = ScaleTestConfig(out=out, stages=parsed, mode=mode, launcher=launcher,
                              nproc_per_node=nproc_per_node, steps=steps, batch=batch,
                              strong=strong, inject=tuple(inject), stage_timeout_s=stage_timeout,
                              stall_s=stall, keep_going=keep_going, probes=not no_probes,
                              env_on=tuple(env_on), master_port=master_port)
        parse_env_on(cfg.env_on)
    except (ValueError, LaunchError) as exc:
        fail(str(exc).replace("invalid literal for int() with base 10",
                              f"--stages must be integers like 1,2,4, got {stages!r}"))
    out.mkdir(parents=True, exist_ok=True)
    result = run_scale_test(cfg, status=lambda line: click.echo(f"ddiag scale-test: {line}",
                                                                 err=True))
    if as_json:
        emit_json(result.to_json())
    else:
        render_scale_test(result)
    sys.exit(0 if result.healthy else 1)


def _write_reports(result, html_out: Path | None, trace_out: Path | None) -> None:
    if html_out is not None:
        from diag.report.html import render_html

        html_out.write_text(render_html(result, result.inputs))
        click.echo(f"ddiag: wrote {html_out}", err=True)
    if trace_out is not None:
        from diag.report.trace import build_trace

        trace_out.write_text(json.dumps(build_trace(result.inputs)))
        click.echo(f"ddiag: wrote {trace_out}", err=True)


# check-env and probe (issue 5)
from diag.checkenv.cli import check_env as _check_env  # noqa: E402
from probes.cli import probe as _probe  # noqa: E402
main.add_command(_check_env)
main.add_command(_probe)


if __name__ == "__main__":
    main()
