"""scale-test --launcher slurm started outside an allocation: one salloc job holds the
nodes for every stage, the hang watcher reaches ranks on other nodes through it, and
nothing is left behind (no process, no job)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.lab.labutil import lab_env, run

pytestmark = pytest.mark.lab


def scale_test(lab: dict, out, *args: str) -> tuple[dict, str]:
    env = {**lab_env(lab["name"]), "GLOO_SOCKET_IFNAME": "eth0"}
    env.pop("SLURM_JOB_ID", None)  # outside any allocation, even if pytest runs in one
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--launcher", "slurm",
               "--nproc-per-node", "1", "--no-probes", "--out", str(out), "--json", *args],
              timeout=600, env=env)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    doc = json.loads(res.stdout)
    job = doc["slurm_job_id"]
    assert job and f"Granted job allocation {job}" in res.stderr, res.stderr[-3000:]
    assert f"Relinquishing job allocation {job}" in res.stderr
    # salloc has relinquished the job; Slurm keeps it COMPLETING while its epilog runs
    deadline = time.monotonic() + 30
    while job in _queued(env) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout
    assert job not in _queued(env) and left.strip() == ""
    return doc, job


def _queued(env: dict) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                          env=env).stdout.split()


def test_every_stage_is_a_step_of_one_salloc_job(session_lab, tmp_path):
    out = tmp_path / "st"
    doc, job = scale_test(session_lab, out, "--stages", "1,2", "--steps", "10")
    assert [r["status"] for r in doc["results"]] == ["ok", "ok"]
    run_ids = {json.loads(p.open().readline())["run_id"]
               for p in out.glob("stage-*/events/rank*.jsonl")}
    assert len(run_ids) == 2 and {r.split(".")[0] for r in run_ids} == {f"slurm-{job}"}


def test_a_hang_on_another_node_is_captured_through_the_allocation(session_lab, tmp_path):
    doc, _ = scale_test(session_lab, tmp_path / "st", "--stages", "2", "--steps", "30",
                        "--inject", "hang:rank=1:step=8", "--stall", "10",
                        "--stage-timeout", "120")
    stage = doc["results"][0]
    assert stage["status"] == "hang", stage
    assert [(c["rank"], c["error"]) for c in stage["hang"]["captures"]] == [(0, None), (1, None)]
    top = stage["hang"]["verdict"]
    assert top["category"] == "rank_hang" and top["culprit"]["ranks"] == [1]
    assert "block_forever" in doc["verdict"]
