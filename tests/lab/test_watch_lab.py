"""ddiag watch on the lab: a 2-node gloo job under Slurm where rank 1 (node2) hangs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.lab.labutil import SESSION_LAB, TORCHRUN, lab_env, run
from tests.test_watch import assert_named_within_10s
from tests.util import REPO, free_port

HANG = REPO / "tests" / "programs" / "hang_ddp.py"
pytestmark = pytest.mark.lab


def job_id(env: dict, name: str) -> str:
    """The id of the job named ``name``: a job of an earlier test may still be
    completing, and must not be taken for this one."""
    for _ in range(100):
        ids = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True,
                             text=True, env=env).stdout.split()
        if ids:
            return ids[0]
        subprocess.run(["sleep", "0.2"])
    raise AssertionError("the job never showed up in squeue")


def running(job: str, env: dict) -> str:
    """``job`` once it runs: a pending job takes no ``srun --overlap`` step. It waits for
    the nodes an earlier test's job still holds while it completes."""
    for _ in range(300):
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                               text=True, env=env).stdout.strip()
        if state == "RUNNING":
            return job
        subprocess.run(["sleep", "0.2"])
    raise AssertionError(f"job {job} never ran")


def test_watch_names_the_hung_rank_on_another_node_with_its_stack(session_lab, tmp_path):
    env = {**lab_env(SESSION_LAB), "GLOO_SOCKET_IFNAME": "eth0"}
    out = tmp_path / "run"
    node_cmd = (f"exec {TORCHRUN} --nnodes 2 --nproc-per-node 1 --node-rank $SLURM_NODEID "
                f"--master-addr $DDIAG_LAB_MASTER_ADDR --master-port {free_port()} "
                f"{HANG} --out {out} --hang-rank 1 --hang-step 30")
    job = subprocess.Popen(["srun", "--time=3", "-J", "watch-hung", "-N2", "-n2", "bash",
                            "-c", node_cmd],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        watch_env = {**env, "SLURM_JOB_ID": job_id(env, "watch-hung")}
        res = run([sys.executable, "-m", "diag.cli", "watch", str(out), "--stall", "5", "--kill",
                   "--timeout", "150", "--json"], timeout=200, env=watch_env)
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
    doc = assert_named_within_10s(res, out, rank=1)
    assert doc["verdict"]["culprit"]["hosts"] == ["node2"]
    assert {c["rank"] for c in doc["captures"] if c["path"]} == {0, 1}  # via srun --overlap
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout
    assert left.strip() == ""


def test_watch_verifies_a_pid_on_its_node_before_signalling_it(session_lab, tmp_path):
    # The lab's nodes share this host's pids: a regressed watcher would reach the victim.
    from tests.test_watch_hostile import write_beat

    env = lab_env(SESSION_LAB)
    out = tmp_path / "run"
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    job = subprocess.Popen(["srun", "--time=3", "-J", "watch-verify", "-N1", "-w", "node2",
                            "sleep", "120"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        write_beat(out, 0, host="node2", pid=victim.pid, fr_signal="SIGUSR1")
        watch_env = {**env, "SLURM_JOB_ID": running(job_id(env, "watch-verify"), env)}
        res = run([sys.executable, "-m", "diag.cli", "watch", str(out), "--stall", "0.5",
                   "--timeout", "60", "--json"], timeout=120, env=watch_env)
        assert victim.poll() is None
    finally:
        for p in (victim, job):
            p.kill()
            p.wait()
    assert res.returncode == 1, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["fr_requested"] == [] and doc["captures"][0]["path"] is None
    refused = {r["action"]: r for r in doc["refused"]}
    assert set(refused) == {"fr_dump", "stack"}
    assert all(str(victim.pid) in r["reason"] for r in refused.values())  # said on node2
