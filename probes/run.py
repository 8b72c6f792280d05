"""A probe in the job we run in, or in one we launch: callable from Python and the CLI."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from probes.dist import result_path
from probes.launch import GROUP_TIMEOUT_S, JobEnv, JobResult, LaunchSpec, run_job


def default_out() -> Path:
    if os.environ.get("DDIAG_RUN_DIR"):
        return Path(os.environ["DDIAG_RUN_DIR"])
    return Path(f"ddiag-probe-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")


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
