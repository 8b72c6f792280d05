"""The decorator on real gloo ranks: matching collectives, step contents, SIGKILL safety."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from diag.format.events import read_events, read_run_events
from tests.util import EXAMPLE, pids_alive, quiet_env, run, torchrun_cmd

pytestmark = pytest.mark.slow  # every test launches gloo ranks through torchrun (4-8 s each)


def test_two_ddp_ranks_log_matching_collectives(tmp_path):
    out = tmp_path / "run"
    res = run(torchrun_cmd(2, EXAMPLE, "--out", str(out), "--steps", "12"), timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    logs, problems = read_run_events(out)
    assert problems == []
    assert sorted(logs) == [0, 1]

    def collectives(rank):
        return [(c["group"], c["seq"], c["op"], c.get("in_numel"), c.get("in_dtype"))
                for c in logs[rank].of_kind("collective")]

    # 12 DDP bucket all_reduces (one bucket per step) plus the final barrier.
    assert len(collectives(0)) == 13
    assert collectives(0) == collectives(1)
    assert [c[1] for c in collectives(0)] == list(range(1, 14))
    for rank in (0, 1):
        header = logs[rank].header
        assert header["rank"] == rank and header["world_size"] == 2
        assert header["backend"] == "gloo"
        steps = logs[rank].of_kind("step")
        assert [s["step"] for s in steps] == list(range(12))
        for s in steps:
            assert s["args"][0] == {"name": "arg0", "shape": [16, 64], "dtype": "float32"}
            assert isinstance(s["loss"], float) and s["grad_norm"] > 0
            assert s["nonfinite"] is None
            assert s["ncoll"] == 1 and set(s["phases"]) >= {"data", "forward", "backward"}


def test_sigkill_loses_nothing_older_than_a_second(tmp_path):
    out = tmp_path / "run"
    cmd = torchrun_cmd(2, EXAMPLE, "--out", str(out), "--steps", "100000",
                       "--step-sleep", "0.02", "--print-steps")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=quiet_env(), start_new_session=True)
    announced: list[dict] = []

    def reader():
        for line in proc.stdout:
            if line.startswith("{"):
                announced.append(json.loads(line))

    threading.Thread(target=reader, daemon=True).start()
    try:
        victim_pid = _wait_for_steps(out, announced, rank=1, steps=150)
        os.kill(victim_pid, signal.SIGKILL)
        killed_at = time.time()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    segments, problems = read_events(out / "events" / "rank00001.jsonl")
    on_disk = {r["step"] for r in segments[-1].of_kind("step")}
    due = {a["step"] for a in announced if a["rank"] == 1 and a["t"] < killed_at - 1.0}
    assert len(due) >= 30
    assert due <= on_disk, f"lost steps {sorted(due - on_disk)}"
    assert all("torn" in p.message for p in problems)  # at most the last line is torn
    assert not segments[-1].of_kind("close")  # it really died without a clean shutdown
    assert pids_alive([victim_pid]) == []


def _wait_for_steps(out, announced, rank: int, steps: int) -> int:
    deadline = time.time() + 90
    while time.time() < deadline:
        mine = [a for a in announced if a["rank"] == rank]
        if len(mine) >= steps:
            return json.loads((out / "heartbeat" / f"rank{rank:05d}.json").read_text())["pid"]
        time.sleep(0.1)
    raise AssertionError(f"rank {rank} did not reach {steps} steps: {len(announced)} seen")


def test_the_wait_for_a_slow_ranks_buckets_is_communication_not_compute(tmp_path):
    out = tmp_path / "run"
    program = Path(__file__).parent / "programs" / "slow_rank_ddp.py"
    res = run(torchrun_cmd(2, program, "--out", str(out), "--slow-s", "0.2"), timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    logs, _ = read_run_events(out)
    # step 0 also waits for the first all_reduce's connection set-up; skip it
    waits = {r: [s["comm_wait_s"] for s in logs[r].of_kind("step")[1:]] for r in (0, 1)}
    assert all(0.12 < w < 1.0 for w in waits[0]), waits  # rank 0 waits for rank 1's grads
    assert all(w < 0.05 for w in waits[1]), waits  # rank 1's peers were ready before it
    for s in logs[0].of_kind("step")[1:]:
        assert s["comm_wait_s"] > 5 * s["comm_s"]  # the launch alone is short


# Without bucket views the check reads the parameters' own gradients after the
# reduction; with them, the bucket is summed before launch. Same verdict either way,
# and at a world size that is not a power of two.
@pytest.mark.parametrize("world,bucket_view", [(2, False), (2, True), (3, False)],
                         ids=["grads-apart", "bucket-view", "world-3"])
def test_the_rank_that_sent_a_nan_into_a_ddp_bucket_is_named(tmp_path, world, bucket_view):
    out = tmp_path / "run"
    program = Path(__file__).parent / "programs" / "nan_ddp.py"
    flag = ["--bucket-view"] if bucket_view else []
    res = run(torchrun_cmd(world, program, "--out", str(out), "--nan-rank", "1",
                           "--nan-step", "2", *flag), timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    logs, _ = read_run_events(out)
    steps = {r: logs[r].of_kind("step") for r in range(world)}
    for rank in range(world):
        assert [s["sent_nonfinite"] for s in steps[rank][:2]] == [None, None]
        assert steps[rank][2]["grad_norm"] == "nan"  # the all_reduce spread it to all
        assert all(math.isfinite(s["grad_norm"]) for s in steps[rank][:2])
        expected = {"op": "all_reduce", "seq": 3} if rank == 1 else None
        assert steps[rank][2]["sent_nonfinite"] == expected


@pytest.mark.parametrize("world", [2, 3])
def test_ddiag_comm_hook_trains_bitwise_like_torchs_allreduce_hook(tmp_path, world):
    # ddiag's hook calls the process group directly and records every bucket: the
    # parameters must still come out exactly as torch's own hook leaves them.
    out = tmp_path / "run"
    program = Path(__file__).parent / "programs" / "nan_ddp.py"
    res = run(torchrun_cmd(world, program, "--out", str(out), "--nan-step", "-1",
                           "--shadow", "--steps", "5"), timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    logs, _ = read_run_events(out)
    for rank in range(world):
        steps = logs[rank].of_kind("step")
        assert len(steps) == 5
        assert all(s["grad_norm"] > 0 and s["sent_nonfinite"] is None for s in steps)
