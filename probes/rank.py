"""What every rank of a probe job runs: form the group, measure, rank 0 writes the result.

    python -m probes.rank links --out RUN_DIR --params '{"target_s": 0.5}'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from diag.launch import GROUP_TIMEOUT_S, JobEnv

PROBES = ("links", "collectives", "compute")
ALL = "all"


def probe_fn(name: str):
    from probes import collectives, compute, links

    return {"links": links.run, "collectives": collectives.run, "compute": compute.run}[name]


def run_probe(name: str, params: dict, job: JobEnv, out: Path,
              timeout_s: float = GROUP_TIMEOUT_S, backend: str | None = None) -> dict | None:
    """Every rank calls this; rank 0 writes ``RUN_DIR/probes/NAME.json`` and returns it."""
    from probes.dist import close_group, form_group, write_result

    group = form_group(job, timeout_s, backend)
    try:
        if name == ALL:
            return _run_all(group, params, out)
        report = probe_fn(name)(group, **params)
    finally:
        close_group()
    if report is None:
        return None
    doc = report.to_json()
    write_result(out, name, doc)
    return doc


def _run_all(group, params: dict, out: Path) -> dict | None:
    """Several probes on one group (one start-up); each result goes to its own file, as
    if run alone, and rank 0 returns them together."""
    from diag.format import schema
    from probes.dist import write_result

    docs = {}
    for name, kwargs in params.items():
        if name == "links" and len(group.leaders) < 2:
            continue  # one node: no link between nodes to measure
        report = probe_fn(name)(group, **kwargs)
        if report is not None:
            docs[name] = report.to_json()
            write_result(out, name, docs[name])
    if group.job.rank != 0:
        return None
    doc = {**schema.stamp(schema.PROBES), "probes": docs}
    write_result(out, ALL, doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    from diag.launch import job_env

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=PROBES + (ALL,))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--params", default="{}", help="keyword arguments of the probe, JSON")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--group-timeout", type=float, default=GROUP_TIMEOUT_S)
    args = parser.parse_args(argv)
    job = job_env()
    if job is None:
        parser.error("not inside torchrun or srun: start it with 'ddiag probe --launcher'")
    run_probe(args.probe, json.loads(args.params), job, args.out, args.group_timeout,
              args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
