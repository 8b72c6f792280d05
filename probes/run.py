"""A probe in the job we run in, or in one we launch: callable from Python and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from probes.dist import result_path
from diag.launch import GROUP_TIMEOUT_S, JobEnv, JobResult, LaunchSpec, run_job


def import_breakers(env) -> list[str]:
    """Each variable set to a value that makes ``import torch`` raise (so every rank dies
    at start), as 'NAME=value: expected ...'. Judged from the catalog, before torch loads."""
    from diag.checkenv.catalog import lookup
    from diag.checkenv.importenv import IMPORT_CHECKED

    bad = [(name, env[name], lookup(name)) for name in IMPORT_CHECKED if name in env]
    return [f"{name}={value!r}: expected {spec.values.text}" for name, value, spec in bad
            if not spec.values.accepts(value)]


def probe_in_job(name: str, params: dict, job: JobEnv, out: Path,
                 timeout_s: float = GROUP_TIMEOUT_S, backend: str | None = None
                 ) -> dict | None:
    from probes.rank import run_probe

    return run_probe(name, params, job, out, timeout_s, backend)


def probe_launched(name: str, params: dict, spec: LaunchSpec, out: Path,
                   timeout_s: float = GROUP_TIMEOUT_S, backend: str | None = None
                   ) -> tuple[dict | None, JobResult]:
    """Start the ranks, wait, read rank 0's result file (None if it wrote none)."""
    out = out.resolve()
    path = result_path(out, name)
    path.unlink(missing_ok=True)  # never report a previous run's result as this one's
    args = ["--out", str(out), "--params", json.dumps(params),
            "--group-timeout", str(timeout_s)] + (["--backend", backend] if backend else [])
    job = run_job(spec, "probes.rank", [name, *args])
    return (json.loads(path.read_text()) if path.exists() else None), job
