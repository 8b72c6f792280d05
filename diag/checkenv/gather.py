"""Inside each rank: check locally, write the snapshot, then gather to rank 0 over gloo.

The gather is itself a check (a broken interface or master address stops the group from
forming), so it runs last, with a short timeout, after the snapshot is on disk: when the
group cannot form, rank 0 (or the launcher) merges the snapshot files instead.

    python -m diag.checkenv.gather --out RUN_DIR [--group-timeout 10]   # in every rank
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import time
from pathlib import Path

from diag.checkenv.collect import collect
from diag.checkenv.report import run_local
from diag.checkenv.snapshot import GroupOutcome, Snapshot, read_snapshots, write_snapshot
from diag.format.rundir import RunDir, ensure_run_json, launcher_run_id
from diag.launch import GROUP_TIMEOUT_S, JobEnv


def snapshot_path(out: Path, rank: int) -> Path:
    return RunDir(out).path("env", rank, ".json")


def launch_id(job: JobEnv) -> str:
    """An id every rank of one job derives alike, without talking to the others."""
    return launcher_run_id() or f"{job.master_addr}:{job.master_port}"


def check_here(out: Path, job: JobEnv | None, launch: str | None) -> Snapshot:
    """Collect, check and write this rank's snapshot (before anything that can hang)."""
    RunDir(out).create()
    ensure_run_json(RunDir(out), launcher_run_id(), {"created_for": "check-env"})
    facts = collect()
    rank = job.rank if job else 0
    snap = Snapshot(rank, job.world_size if job else 1, facts, run_local(facts), launch=launch)
    write_snapshot(snapshot_path(out, rank), snap)
    return snap


def form_and_gather(job: JobEnv, snap: Snapshot, timeout_s: float
                    ) -> tuple[GroupOutcome, list[dict] | None]:
    """Form a gloo group, take a synchronised timestamp, gather every snapshot to rank 0."""
    import torch.distributed as dist

    start = time.monotonic()
    try:
        dist.init_process_group("gloo", init_method=job.init_method, rank=job.rank,
                                world_size=job.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        dist.barrier()
        outcome = GroupOutcome(True, None, time.monotonic() - start, time.time())
        docs = [None] * job.world_size if job.rank == 0 else None
        dist.gather_object(dataclasses.replace(snap, group=outcome).to_json(), docs, dst=0)
        return outcome, docs
    except Exception as exc:  # noqa: BLE001 - any failure to form is the finding itself
        first = (str(exc).strip().splitlines() or [""])[0]
        return GroupOutcome(False, f"{type(exc).__name__}: {first[:400]}",
                            time.monotonic() - start), None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_rank(out: Path, job: JobEnv, timeout_s: float, launch: str | None = None
             ) -> tuple[Snapshot, list[dict] | None]:
    snap = check_here(out, job, launch or launch_id(job))
    outcome, docs = form_and_gather(job, snap, timeout_s)
    snap = dataclasses.replace(snap, group=outcome)
    write_snapshot(snapshot_path(out, job.rank), snap)
    return snap, docs


def wait_for_snapshots(out: Path, world_size: int, timeout_s: float, launch: str
                       ) -> list[Snapshot]:
    """Rank 0's fallback: the snapshot files of every rank that finished its attempt."""
    deadline = time.monotonic() + timeout_s
    while True:
        snaps, _ = read_snapshots(out / "env", launch)
        done = [s for s in snaps if s.group is not None]
        if len(done) >= world_size or time.monotonic() > deadline:
            return snaps
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    from diag.launch import job_env

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--group-timeout", type=float, default=GROUP_TIMEOUT_S)
    parser.add_argument("--launch-id", default=None, help="set by the launcher; else derived")
    args = parser.parse_args(argv)
    job = job_env()
    if job is None:
        check_here(args.out, None, args.launch_id)
        return 0
    snap, _ = run_rank(args.out, job, args.group_timeout, args.launch_id)
    print(json.dumps({"rank": snap.rank, "group_ok": snap.group.ok}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
