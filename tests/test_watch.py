"""The hang watcher: decisions on constructed heartbeats, and on real gloo ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from diag.format.heartbeat import RankBeat
from diag.watch.decide import Watcher
from tests.util import REPO, pids_alive, quiet_env, run, torchrun_cmd

HANG = REPO / "tests" / "programs" / "hang_ddp.py"


def beat(rank, step, seq, pending=None, span=None, t=100.0):
    return RankBeat(rank, 1000 + rank, "h", t, step, (("0", seq),), pending, span, None)


def feed(watcher, frames, start=100.0, dt=1.0):
    """Observe each snapshot one second apart; returns the first alarm and its time."""
    for i, beats in enumerate(frames):
        alarm = watcher.observe({b.rank: b for b in beats}, start + i * dt)
        if alarm:
            return alarm, start + i * dt
    return None, None


def test_polls_thin_out_to_a_few_percent_of_a_core_but_not_past_a_tenth_of_the_stall():
    from diag.watch.loop import poll_interval

    assert poll_interval(0.5, 60, 0.001) == 0.5  # a small job: the set pace
    assert poll_interval(0.5, 60, 0.16) == pytest.approx(0.16 / 0.03)  # 4096 ranks: ~5 s
    assert poll_interval(0.5, 20, 0.16) == 2.0  # never later than stall / 10
    assert poll_interval(0.5, 60, 0.16, cpu_share=None) == 0.5


def test_no_alarm_while_anyone_progresses():
    frames = [[beat(0, s, s), beat(1, s, s)] for s in range(30)]
    assert feed(Watcher(stall_s=5), frames)[0] is None


def test_disagreeing_ranks_alarm_after_the_stall():
    stuck = [beat(0, 10, 11, pending={"op": "all_reduce", "seq": 11}), beat(1, 9, 10, span="data")]
    alarm, at = feed(Watcher(stall_s=5), [stuck] * 10)
    assert alarm.laggards == (1,) and alarm.waiting == (0,)
    assert at == 105.0 and "disagree" in alarm.reason


def test_marked_pause_on_the_laggard_is_not_a_hang():
    paused = [[beat(0, 10, 11, t=100 + i), beat(1, 10, 10, span="checkpoint", t=100 + i)]
              for i in range(30)]
    assert feed(Watcher(stall_s=5), paused)[0] is None


def test_collective_inside_a_marked_span_is_a_hang():
    # The rank-0-only barrier in a checkpoint: the span excuses work, not a blocked call.
    stuck = [[beat(0, 10, 11, t=100 + i),
              beat(1, 9, 11, span="checkpoint", t=100 + i,
                   pending={"op": "barrier", "seq": 11})] for i in range(30)]
    alarm, at = feed(Watcher(stall_s=5), stuck)
    assert alarm.laggards == (1,) and at == 105.0


def test_same_point_stall_waits_for_the_longer_limit():
    # A long first step (compile) looks like this: alive, and nobody moves.
    same = [[beat(0, 0, 0, t=100 + i), beat(1, 0, 0, t=100 + i)] for i in range(30)]
    alarm, at = feed(Watcher(stall_s=5, same_point_s=20), same)
    assert at == 120.0 and "same point" in alarm.reason


def test_a_silent_heartbeat_is_a_dead_rank():
    frames = [[beat(0, 5, 5, t=100 + i), beat(1, 5, 5, t=100.0)] for i in range(20)]
    alarm, _ = feed(Watcher(stall_s=5), frames)
    assert alarm.dead == (1,) and alarm.laggards == (1,)


def assert_named_within_10s(res, out, rank: int) -> dict:
    """The watch result names ``rank``, its blocking frame in the user's code, and was
    raised within 10 s of the rank entering the blocking span; returns the result."""
    assert res.returncode == 1, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["alarm"]["laggards"] == [rank]
    verdict = doc["verdict"]
    assert verdict["category"] == "rank_hang" and verdict["culprit"]["ranks"] == [rank]
    assert "hang_ddp.py:" in verdict["title"]
    beat = json.loads((out / "heartbeat" / f"rank{rank:05d}.json").read_text())
    assert doc["alarm"]["detected_at"] - beat["span"]["since"] <= 10.0
    return doc


@pytest.mark.slow
def test_watch_names_the_hung_rank_and_its_frame_within_10s_and_ends_the_job(tmp_path):
    out = tmp_path / "run"
    job = subprocess.Popen(torchrun_cmd(2, HANG, "--out", str(out), "--hang-rank", "1",
                                        "--hang-step", "40"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=quiet_env(), start_new_session=True)
    try:
        res = run([sys.executable, "-m", "diag.cli", "watch", str(out), "--stall", "5",
                   "--kill", "--timeout", "150", "--json"], timeout=200)
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)  # torchrun and its ranks: no orphans
    doc = assert_named_within_10s(res, out, rank=1)
    pids = [json.loads(p.read_text())["pid"] for p in (out / "heartbeat").glob("*.json")]
    assert pids_alive(pids) == []
    assert {c["rank"] for c in doc["captures"] if c["path"]} == {0, 1}


@pytest.mark.slow
def test_marked_20s_checkpoint_pause_gives_no_alarm(tmp_path):
    out = tmp_path / "run"
    job = subprocess.Popen(torchrun_cmd(2, HANG, "--out", str(out), "--steps", "60",
                                        "--pause-step", "30", "--pause-s", "20"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=quiet_env(), start_new_session=True)
    try:
        res = run([sys.executable, "-m", "diag.cli", "watch", str(out), "--stall", "5",
                   "--timeout", "150", "--json"], timeout=200)
        assert job.wait(timeout=60) == 0
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)  # torchrun and its ranks: no orphans
    doc = json.loads(res.stdout)
    assert res.returncode == 0 and doc["alarm"] is None and doc["ended"] == "job finished"
