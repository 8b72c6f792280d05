"""check-env's three ways to run, callable from Python as from the CLI:

    check_local(out)                  this process only
    check_in_job(out, job, timeout)   every rank of the job we run in; rank 0 gets the report
    check_launched(spec, out, ...)    start ranks with torchrun/srun, merge their snapshots
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from pathlib import Path

from diag.checkenv import importenv, rendezvous
from diag.checkenv.gather import check_here, run_rank, wait_for_snapshots
from diag.checkenv.report import Report, build_report
from diag.checkenv.snapshot import read_snapshots, snapshot_from_json
from diag.checkenv.types import CheckResult, fail
from diag.verdict import Evidence
from diag.launch import GROUP_TIMEOUT_S, JobEnv, LaunchSpec, random_port, run_job


def save(report: Report, out: Path) -> Report:
    out.mkdir(parents=True, exist_ok=True)
    (out / "check_env.json").write_text(json.dumps(report.to_json(), indent=1) + "\n")
    return report


def check_local(out: Path) -> Report:
    snap = check_here(out, None, uuid.uuid4().hex)
    return save(build_report([snap], 1, cross=False, run_dir=str(out), mode="local"), out)


def check_in_job(out: Path, job: JobEnv, timeout_s: float = GROUP_TIMEOUT_S
                 ) -> Report | None:
    """Run in every rank; rank 0 returns the report, the others None."""
    snap, docs = run_rank(out, job, timeout_s)
    if job.rank != 0:
        return None
    if docs is not None:
        snaps = [snapshot_from_json(d) for d in docs]
        problems: list[str] = []
    else:
        # The group did not form: read the others' files (a shared run dir) instead.
        snaps = wait_for_snapshots(out, job.world_size, timeout_s, snap.launch)
        problems = [] if len(snaps) == job.world_size else [
            f"{out}/env holds {len(snaps)} of {job.world_size} snapshots: the gloo gather "
            "failed and the run directory is not shared with every node"]
    return save(build_report(snaps, job.world_size, problems=problems, run_dir=str(out),
                             mode=job.launcher), out)


def check_launched(spec: LaunchSpec, out: Path, timeout_s: float = GROUP_TIMEOUT_S
                   ) -> tuple[Report, str]:
    """Start the ranks, wait, merge their snapshot files. Returns the report and the
    launcher's stderr tail (for when ranks are missing)."""
    out, launch = out.resolve(), uuid.uuid4().hex
    world = spec.nodes * spec.nproc_per_node
    spec, pre = _rendezvous_preflight(spec, out)
    if pre is not None and rendezvous.blocking(pre):
        report = build_report([], world, run_dir=str(out), mode=spec.launcher, launch=(
            rendezvous.check_rendezvous(pre)), problems=[
            "ranks not launched: torchrun's agents could not meet at the rendezvous"])
        return save(report, out), pre.get("error") or ""
    # torchrun imports torch: a value torch rejects at import must reach it set aside.
    spec = dataclasses.replace(spec, env_on=importenv.aside_env_on(spec.env_on))
    with importenv.aside_while(os.environ):
        job = run_job(spec, "diag.checkenv.gather", ["--out", str(out), "--group-timeout",
                                                     str(timeout_s), "--launch-id", launch])
    snaps, problems = read_snapshots(out / "env", launch)
    if job.timed_out:
        problems.append(f"the launch timed out after {spec.timeout_s:.0f} s and was stopped")
    started = start_failure(world, len(snaps), job.returncode, job.stderr)
    report = build_report(snaps, world, problems=problems, run_dir=str(out),
                          mode=spec.launcher, launch=started + list(
                              rendezvous.check_rendezvous(pre) if pre else ()))
    return save(report, out), job.stderr[-4000:]


def start_failure(world_size: int, arrived: int, returncode: int, stderr: str
                  ) -> list[CheckResult]:
    """Why ranks wrote no snapshot, from the launcher's stderr: the last exception a
    rank (or torchrun) raised, and the tail as evidence."""
    if arrived >= world_size:
        return []
    lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    raised = [ln for ln in lines if _EXCEPTION.match(ln) and "ChildFailedError" not in ln]
    why = raised[-1].strip() if raised else (lines[-1].strip() if lines else "no output")
    return [fail("launch.start", f"{world_size - arrived} of {world_size} rank(s) wrote no "
                 f"snapshot; the launcher exited {returncode}: {why[:300]}",
                 "fix what the launcher's stderr says (evidence), then run check-env again",
                 evidence=tuple(Evidence("launcher stderr", None, ln) for ln in lines[-20:]))]


# "ValueError: ...", "torch.distributed.DistNetworkError: ...", "ModuleNotFoundError: ..."
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b:?")


def _rendezvous_preflight(spec: LaunchSpec, out: Path) -> tuple[LaunchSpec, dict | None]:
    """On Slurm, fix the port and check every node reaches it before torchrun waits
    there for minutes; the same port is then used for the launch."""
    if spec.launcher != "slurm":
        return spec, None
    spec = dataclasses.replace(spec, master_port=spec.master_port or random_port())
    return spec, rendezvous.preflight(spec.nodes, spec.master_port, out)
