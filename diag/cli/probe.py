"""``ddiag probe``: parse, call ``probes.run``, render. Nothing else.

Exit codes: 0 nothing flagged, 1 slow links or ranks (or GPUs far below their peak)
flagged, 2 the probe could not run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from diag.cli.options import launch_options, resolve_launch


def common_options(fn):
    for option in reversed([
        click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None,
                     help="Default: the job's own (nccl with GPUs, else gloo)."),
        click.option("--out", type=click.Path(path_type=Path), default=None,
                     help="Run directory; results go to RUN_DIR/probes/ "
                          "(default: $DDIAG_RUN_DIR or a fresh one)."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    ]):
        fn = option(fn)
    return launch_options(fn)


@click.group()
def probe() -> None:
    """Measure links, collectives and compute across the job's ranks.

    \b
    Examples:
      ddiag probe all --launcher slurm --nodes 4 --nproc-per-node 2
      ddiag probe links --launcher slurm --nodes 4 --json
    """


def run_and_show(name: str, params: dict, opts: dict) -> None:
    from diag.cli.output import fail
    from diag.format.rundir import default_run_dir
    from probes import run

    if broken := run.import_breakers(os.environ):
        fail(f"{'; '.join(broken)}. `import torch` raises on it, so no rank could start: "
             "fix or unset it (`ddiag check-env` checks every such variable)")
    spec, job = resolve_launch(opts)
    out = opts["out"] or default_run_dir("probe")
    timeout, backend = opts["group_timeout"], opts["backend"]
    if spec:
        doc, result = run.probe_launched(name, params, spec, out, timeout, backend)
        if doc is None:
            from diag.report.text import plain_lines

            click.echo(plain_lines(result.stderr[-4000:]), err=True)
            fail(f"probe {name}: rank 0 wrote no result (launcher exit {result.returncode}"
                 f"{', timed out' if result.timed_out else ''}); its output is above")
    elif job:
        doc = run.probe_in_job(name, params, job, out, timeout, backend)
        if doc is None:
            sys.exit(0)  # not rank 0: rank 0 reports for everyone
    else:
        fail("not inside torchrun or srun (no RANK/WORLD_SIZE, no SLURM_PROCID); start ranks "
             "with --launcher local --nproc-per-node 2, or --launcher slurm --nodes N")
    show(name, doc, opts["as_json"])


def show(name: str, doc: dict, as_json: bool) -> None:
    if as_json:
        from diag.cli.output import emit_json

        emit_json(doc)
    else:
        from diag.report.probes import render

        for part, part_doc in (doc["probes"].items() if name == "all" else [(name, doc)]):
            render(part, part_doc)
    parts = doc.get("probes", {}).values() if name == "all" else [doc]
    flagged = any(d.get("slow_links") or d.get("slow_ranks") or d.get("below_peak_ranks")
                  for d in parts)
    sys.exit(1 if flagged else 0)


@probe.command()
@click.option("--seconds", default=0.5, show_default=True, help="Target time per transfer.")
@click.option("--max-bytes", default=64 << 20, show_default=True, help="Largest transfer.")
@click.option("--slow-ratio", default=0.5, show_default=True,
              help="Flag links below this fraction of the median.")
@common_options
def links(seconds: float, max_bytes: int, slow_ratio: float, **opts) -> None:
    """Pairwise bandwidth and latency between nodes (one rank per node).

    \b
    Examples:
      ddiag probe links --launcher slurm --nodes 4
    """
    if opts["launcher"] == "local":
        from diag.cli.output import fail

        fail("probe links measures between nodes and --launcher local has one; use "
             "--launcher slurm --nodes N, or run it inside a multi-node job")
    run_and_show("links", links_params(seconds, max_bytes, slow_ratio), opts)


def links_params(seconds: float, max_bytes: int, slow_ratio: float) -> dict:
    return {"target_s": seconds, "max_bytes": max_bytes, "slow_ratio": slow_ratio}


@probe.command()
@click.option("--ops", default="all_reduce,all_gather,reduce_scatter,broadcast",
              show_default=True, help="Comma list of collectives.")
@click.option("--min-bytes", default=4096, show_default=True)
@click.option("--max-bytes", default=4 << 20, show_default=True)
@click.option("--factor", default=4, show_default=True, help="Size step multiplier.")
@click.option("--seconds", default=0.1, show_default=True, help="Target time per size.")
@common_options
def collectives(ops: str, min_bytes: int, max_bytes: int, factor: int, seconds: float,
                **opts) -> None:
    """Size sweep of collectives with algbw and busbw (nccl-tests definitions).

    \b
    Examples:
      ddiag probe collectives --launcher local --nproc-per-node 2 --json
    """
    run_and_show("collectives", collectives_params(ops, min_bytes, max_bytes, factor, seconds),
                 opts)


def collectives_params(ops: str, min_bytes: int, max_bytes: int, factor: int,
                       seconds: float) -> dict:
    from diag.cli.output import fail
    from probes.collectives import OPS, sweep_sizes

    names = [o.strip() for o in ops.split(",") if o.strip()]
    unknown = [o for o in names if o not in OPS]
    if unknown:
        fail(f"--ops: unknown {', '.join(unknown)}; choose from {', '.join(OPS)}")
    try:
        sizes = sweep_sizes(min_bytes, max_bytes, factor)
    except ValueError as err:
        fail(f"--min-bytes/--max-bytes/--factor: {err}")
    return {"ops": names, "sizes": sizes, "target_s": seconds}


@probe.command()
@click.option("--size", "n", type=int, default=None,
              help="Matrix side n (n x n). Default: 8192 on a GPU, 1024 on CPU.")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="Default: bfloat16 on a GPU, float32 on CPU.")
@click.option("--seconds", default=1.0, show_default=True, help="Target time per rank.")
@click.option("--slow-ratio", default=0.8, show_default=True,
              help="Flag ranks below this fraction of the median.")
@click.option("--peak-ratio", default=0.5, show_default=True,
              help="Flag GPUs below this fraction of their datasheet peak (n >= 4096).")
@common_options
def compute(n: int | None, dtype: str | None, seconds: float, slow_ratio: float,
            peak_ratio: float, **opts) -> None:
    """Matmul throughput of every rank, against the other ranks and the GPU's peak.

    \b
    Examples:
      ddiag probe compute --launcher slurm --nodes 4 --nproc-per-node 8
      ddiag probe compute --launcher local --nproc-per-node 8 --size 8192 --dtype bfloat16
    """
    run_and_show("compute", compute_params(n, dtype, seconds, slow_ratio, peak_ratio), opts)


def compute_params(n: int | None, dtype: str | None, seconds: float, slow_ratio: float,
                   peak_ratio: float) -> dict:
    return {"n": n, "dtype": dtype, "target_s": seconds, "slow_ratio": slow_ratio,
            "peak_ratio": peak_ratio}


def _defaults(command: click.Command, build) -> dict:
    """A probe's parameters at its command's own option defaults."""
    import inspect

    given = {p.name: p.default for p in command.params}
    return build(**{name: given[name] for name in inspect.signature(build).parameters})


@probe.command("all")
@common_options
def all_probes(**opts) -> None:
    """Links (multi-node jobs), collectives and compute, at their defaults, in one launch:
    the ranks start and form their group once.

    \b
    Examples:
      ddiag probe all --launcher local --nproc-per-node 2
      ddiag probe all --launcher slurm --nodes 4 --nproc-per-node 2 --json
    """
    spec, _ = resolve_launch(opts)
    params = {"collectives": _defaults(collectives, collectives_params),
              "compute": _defaults(compute, compute_params)}
    if spec is None or (spec.launcher == "slurm" and spec.nodes > 1):
        # inside a job the ranks skip links themselves when they share one node
        params = {"links": _defaults(links, links_params), **params}
    run_and_show("all", params, opts)
