"""``ddiag stacks --pid`` on real hung jobs: a DDP training script written the way users
write them (tests/programs/mistake_ddp.py: gloo, 2 ranks under torchrun, a DataLoader with
workers, a model with a buffer), each run with one mistake, and the verdict asserted from
``--json``: its category, its culprit rank and the user's frame it names. The verdict logic
itself is tested on synthetic stacks in tests/analyze/test_stacks_verdicts.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.util import REPO, kill_tree, quiet_env, run, torchrun_cmd

MISTAKE = REPO / "tests" / "programs" / "mistake_ddp.py"
HANG_WITHIN_S = 90.0  # torchrun's start on 2 shared cores, 3 steps, then the hang
STACKS_WALL_S = 5.0  # one `ddiag stacks` of 2 ranks, interpreter start included (~0.5 s)

pytestmark = pytest.mark.slow


def _stacks(agent: int, out: Path) -> tuple[int, dict, float]:
    """One ``ddiag stacks --pid --json``: (exit code, document, wall seconds); exit 2 (no
    rank yet) while torchrun starts."""
    started = time.monotonic()
    res = run([sys.executable, "-m", "diag.cli", "stacks", "--pid", str(agent), "--out",
               str(out), "--json"], timeout=60)
    took = time.monotonic() - started
    if res.returncode == 2 and "no rank process" in res.stderr:
        return 2, {"finding": None, "groups": []}, took
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, json.loads(res.stdout), took


def hung_verdict(tmp_path: Path, *args: str) -> tuple[int, dict, float]:
    """Start the job, take snapshots until two in a row name the same cause (the job is
    hung, not caught in motion), check it still runs (a hang, not a crash), kill it all."""
    job = subprocess.Popen(torchrun_cmd(2, MISTAKE, *args), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=quiet_env(), start_new_session=True)
    try:
        deadline, last, n = time.monotonic() + HANG_WITHIN_S, None, 0
        while True:
            n += 1
            code, doc, took = _stacks(job.pid, tmp_path / f"snap{n}")
            finding = doc["finding"]
            now = code == 1 and (finding["category"], finding["culprit"]["ranks"],
                                 finding["title"])
            if (now and now == last) or time.monotonic() > deadline:
                break
            last = now
            time.sleep(1.5)
        assert job.poll() is None, f"the job ended (exit {job.returncode}): no hang to see"
    finally:
        kill_tree(job)
    assert code == 1 and doc["captured"] == 2, doc
    assert took < STACKS_WALL_S, took
    return code, doc["finding"], took


@pytest.mark.parametrize("buffer", ["buffer", "no-buffer"])
def test_a_barrier_only_rank_0_calls_after_its_save_is_a_mismatch_naming_rank_0(
        tmp_path: Path, buffer: str) -> None:
    # rank 1 goes on to the next step: DDP's buffer broadcast in forward (with a buffer),
    # its gradient all_reduce in backward (without)
    extra = ("--no-buffer",) if buffer == "no-buffer" else ()
    _, finding, _ = hung_verdict(tmp_path, "--mistake", "barrier_after_save", *extra)
    assert finding["category"] == "collective_mismatch"
    assert finding["culprit"]["ranks"] == [0]
    assert finding["details"]["decided_by"] == "role"
    assert finding["details"]["user_frame"]["func"] == "save_checkpoint"
    assert "save_checkpoint" in finding["title"]
    states = {tuple(g["ranks"]): (g["state"], g["role"]) for g in finding["details"]["groups"]}
    assert states[(0,)] == ("collective", "control")
    assert states[(1,)] == ("backward" if extra else "collective", "training")


def test_rank_1_stuck_in_its_dataloader_worker_is_the_hung_rank(tmp_path: Path) -> None:
    _, finding, _ = hung_verdict(tmp_path, "--mistake", "stuck_worker")
    assert finding["category"] == "rank_hang" and finding["culprit"]["ranks"] == [1]
    assert "data loading" in finding["title"]
    assert finding["details"]["user_frame"]["func"] == "train"
    groups = {g["ranks"][0]: g for g in finding["details"]["groups"]}
    assert groups[0]["state"] == "collective"  # DDP's buffer broadcast in forward
    assert "_distributed_broadcast_coalesced" in groups[0]["at"]
    assert groups[1]["state"] == "data"


def test_an_eval_all_reduce_only_on_rank_0_is_a_mismatch_naming_rank_0(
        tmp_path: Path) -> None:
    # with the buffer: rank 0's all_reduce against rank 1's broadcast hangs (without it,
    # gloo pairs it with DDP's gradient all_reduce and aborts on the size: no hang)
    _, finding, _ = hung_verdict(tmp_path, "--mistake", "eval_all_reduce")
    assert finding["category"] == "collective_mismatch"
    assert finding["culprit"]["ranks"] == [0]
    assert finding["details"]["user_frame"]["func"] == "evaluate"
    assert "evaluate" in finding["title"]


def test_rank_0_saving_past_the_timeout_is_the_hung_rank_and_the_fix_names_the_timeout(
        tmp_path: Path) -> None:
    _, finding, _ = hung_verdict(tmp_path, "--mistake", "slow_save", "--timeout-s", "40")
    assert finding["category"] == "rank_hang" and finding["culprit"]["ranks"] == [0]
    assert finding["details"]["user_frame"]["func"] == "_save_snapshot"
    groups = {g["ranks"][0]: g for g in finding["details"]["groups"]}
    assert groups[0]["state"] == "io"  # asleep in its own code: py-spy says idle
    assert "process-group timeout" in finding["fix"]
