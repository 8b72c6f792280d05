"""ddiag stacks --slurm-job and watch --slurm-job on the lab: a plain DDP job of 4 nodes x 2
ranks under Slurm (it imports nothing of ddiag) whose rank 5, the second rank of the third
node, is stuck in its DataLoader."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.lab.labutil import SESSION_LAB, TORCHRUN, lab_env, run
from tests.lab.test_watch_lab import job_id, running
from tests.util import REPO, free_port

PLAIN = REPO / "tests" / "programs" / "plain_ddp.py"
pytestmark = pytest.mark.lab
# the job's first node, wherever Slurm placed it (an earlier test's job may hold node1)
FIRST_NODE = "scontrol show hostnames $SLURM_JOB_NODELIST | head -n1"


def _stacks(env: dict, job: str, out) -> tuple[int, dict | None]:
    res = run([sys.executable, "-m", "diag.cli", "stacks", "--slurm-job", job, "--out",
               str(out), "--json"], timeout=150, env=env)
    if res.returncode not in (0, 1):
        return res.returncode, None
    return res.returncode, json.loads(res.stdout)


def _plain_job(env: dict, name: str, steps: int, stuck_step: int) -> subprocess.Popen:
    """The plain DDP script on 4 nodes x 2 ranks, rank 5 stuck in its DataLoader."""
    node_cmd = (f"exec {TORCHRUN} --nnodes 4 --nproc-per-node 2 --node-rank $SLURM_NODEID "
                f"--master-addr $({FIRST_NODE}) --master-port {free_port()} "
                f"{PLAIN} --steps {steps} --stuck-rank 5 --stuck-step {stuck_step}")
    return subprocess.Popen(["srun", "--time=3", "-J", name, "-N4", "-n4", "bash", "-c",
                             node_cmd], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def test_stacks_of_a_slurm_job_name_the_rank_stuck_on_another_node(session_lab, tmp_path):
    # 8 ranks on the lab's 4 nodes (2 cores in all): the wait below is generous
    env = {**lab_env(SESSION_LAB), "GLOO_SOCKET_IFNAME": "eth0"}
    job = _plain_job(env, "stacks-stuck", steps=200, stuck_step=3)
    try:
        jid = running(job_id(env, "stacks-stuck"), env)
        deadline, last, doc = time.monotonic() + 120, None, None
        while time.monotonic() < deadline:  # until two snapshots in a row agree
            code, doc = _stacks(env, jid, tmp_path / f"run{int(time.monotonic() * 10)}")
            now = doc and doc["finding"] and (doc["finding"]["title"], doc["finding"]["culprit"])
            if now and now == last:
                break
            last = now
            time.sleep(2)
    finally:
        subprocess.run(["scancel", job_id(env, "stacks-stuck")], env=env, capture_output=True)
        job.kill()
        job.wait()
    assert doc is not None and code == 1, doc
    nodes = sorted({r["host"] for r in doc["ranks"]})
    assert doc["captured"] == 8 and len(nodes) == 4
    finding = doc["finding"]
    assert finding["culprit"]["ranks"] == [5] and finding["culprit"]["hosts"] == [nodes[2]]
    assert "_try_get_data" in finding["title"]


def test_stacks_refuses_a_job_that_is_not_running(session_lab):
    env = lab_env(SESSION_LAB)
    res = run([sys.executable, "-m", "diag.cli", "stacks", "--slurm-job", "999999"],
              timeout=60, env=env)
    assert res.returncode == 2 and "999999" in res.stderr
    res = run([sys.executable, "-m", "diag.cli", "stacks", "--slurm-job", "1;rm"],
              timeout=60, env=env)
    assert res.returncode == 2 and "digits" in res.stderr


def test_watch_slurm_job_names_the_stuck_rank_and_cancels_the_job(session_lab, tmp_path):
    env = {**lab_env(SESSION_LAB), "GLOO_SOCKET_IFNAME": "eth0"}
    job = _plain_job(env, "watch-plain", steps=400, stuck_step=5)
    try:
        jid = running(job_id(env, "watch-plain"), env)
        res = run([sys.executable, "-m", "diag.cli", "watch", str(tmp_path / "w"),
                   "--slurm-job", jid, "--stall", "8", "--kill", "--timeout", "150", "--json"],
                  timeout=220, env=env)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job outlived watch --kill: {res.stdout[-1500:]}\n"
                                 f"{res.stderr[-1500:]}") from None
    finally:
        if job.poll() is None:
            subprocess.run(["scancel", job_id(env, "watch-plain")], env=env, capture_output=True)
            job.kill()
            job.wait()
    assert res.returncode == 1, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    finding = doc["alarm"]["finding"]
    hosts = doc["target"]["nodes"]
    assert finding["culprit"]["ranks"] == [5] and finding["culprit"]["hosts"] == [hosts[2]]
    assert doc["alarm"]["detected_at"] - doc["alarm"]["stalled_since"] <= 8 + 10
    assert {c["host"] for c in doc["captures"] if c["path"]} == set(hosts)
    assert doc["killed"] == list(range(8))
    state = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%t"], capture_output=True,
                           text=True, env=env).stdout.strip()
    assert state in ("", "CG"), state  # cancelled: gone, or completing


def test_scale_test_of_a_plain_command_names_the_slow_rank_on_the_lab(session_lab, tmp_path):
    # stage 1: 2 ranks on one node; stage 2: 4 ranks on two, rank 3 sleeps 150 ms a step
    env = {**lab_env(SESSION_LAB), "GLOO_SOCKET_IFNAME": "eth0"}
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--launcher", "slurm",
               "--stages", "1,2", "--nproc-per-node", "2", "--no-probes", "--no-check-env",
               "--out", str(tmp_path / "st"), "--json", "--metric",
               r"(\d+(?:\.\d+)?) samples/s", "--", str(PLAIN), "--steps", "80",
               "--slow-rank", "3", "--slow-ms", "150"], timeout=400, env=env)
    assert res.returncode == 1, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["cliff_stage"] == 2, doc["verdict"]
    top = doc["results"][1]["findings"][0]
    assert top["category"] == "straggler" and top["culprit"]["ranks"] == [3], top
    assert "rank 3" in doc["verdict"]
