"""``ddiag stacks`` on jobs that import nothing of ddiag: finding the ranks under a pid
(diag/watch/discover.py), grouping their stacks (diag/analyze/stackgroups.py), and the
command on a real torchrun job with one rank stuck in its DataLoader."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.analyze import analyze
from diag.analyze.stackgroups import Frame, Stack, group, odd_ones, state_of
from diag.verdict import Category
from diag.watch import discover
from tests.util import REPO, kill_tree, quiet_env, run, torchrun_cmd

PLAIN = REPO / "tests" / "programs" / "plain_ddp.py"
SITE = "/opt/venv/lib/python3.11/site-packages"


def _f(func: str, file: str, line: int = 1) -> Frame:
    return Frame(func, file, line)


ALL_REDUCE = (_f("all_reduce", f"{SITE}/torch/distributed/distributed_c10d.py", 2810),
              _f("wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 81),
              _f("train_step", "/home/u/train.py", 40), _f("<module>", "/home/u/train.py", 99))
BARRIER = (_f("barrier", f"{SITE}/torch/distributed/distributed_c10d.py", 4710),
           _f("save", "/home/u/train.py", 60), _f("<module>", "/home/u/train.py", 101))
DATA = (_f("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
        _f("_MultiProcessingDataLoaderIter._try_get_data",
           f"{SITE}/torch/utils/data/dataloader.py", 1291),
        _f("main", "/home/u/train.py", 30), _f("<module>", "/home/u/train.py", 99))
BACKWARD = (_f("_engine_run_backward", f"{SITE}/torch/autograd/graph.py", 979),
            _f("Tensor.backward", f"{SITE}/torch/_tensor.py", 623),
            _f("main", "/home/u/train.py", 35))
SLEEP = (_f("sleep", "<built-in>"), _f("main", "/home/u/train.py", 20))


def _stacks(frames_by_rank: dict[int, tuple]) -> list[Stack]:
    return [Stack(r, f, f"stacks/rank{r:05d}.json") for r, f in frames_by_rank.items()]


# ---------------------------------------------------------------------------------------
# grouping


def test_states_of_the_frames_a_rank_sits_in() -> None:
    assert state_of(ALL_REDUCE)[0] == "collective"
    assert state_of(DATA) == ("data", DATA[1])
    assert state_of(BACKWARD)[0] == "backward"
    assert state_of(SLEEP)[0] == "io"
    assert state_of((_f("forward", "/home/u/model.py"),))[0] == "compute"


def test_one_rank_in_its_dataloader_among_31_in_all_reduce_is_named() -> None:
    found = odd_ones(group(_stacks({r: DATA if r == 17 else ALL_REDUCE for r in range(32)})))
    assert found is not None and found.category is Category.RANK_HANG
    assert found.culprit.ranks == (17,) and found.confidence >= 0.8
    assert "_try_get_data" in found.title and "31 ranks" in found.title
    assert any("train.py:30" in e.text for e in found.evidence)  # the user's frame


def test_a_two_rank_tie_is_decided_by_what_each_waits_on() -> None:
    found = odd_ones(group(_stacks({0: BACKWARD, 1: DATA})))
    assert found is not None and found.culprit.ranks == (1,)
    assert found.confidence < 0.8  # 1:1 rests on the states alone


def test_ranks_in_different_collectives_disagree_on_the_sequence() -> None:
    found = odd_ones(group(_stacks({0: BARRIER, 1: ALL_REDUCE, 2: ALL_REDUCE, 3: ALL_REDUCE})))
    assert found is not None and found.category is Category.COLLECTIVE_MISMATCH
    assert found.culprit.ranks == (0,)


def test_every_rank_in_one_place_names_no_one() -> None:
    assert odd_ones(group(_stacks({r: ALL_REDUCE for r in range(8)}))) is None
    assert odd_ones(group(_stacks({r: SLEEP for r in range(4)}))) is None  # a pause together
    # nobody waits on anyone: ranks doing different work of their own
    assert odd_ones(group(_stacks({0: SLEEP, 1: (_f("forward", "/home/u/m.py"),)}))) is None


# ---------------------------------------------------------------------------------------
# finding the ranks under a pid

_TREE = """
import os, subprocess, sys, time
env = dict(os.environ, RANK="{rank}", LOCAL_RANK="{rank}", WORLD_SIZE="2")
child = subprocess.Popen([sys.executable, "-c", "import os, time; os.fork(); time.sleep(60)"],
                         env=env)
print(child.pid, flush=True)
time.sleep(60)
"""


def test_ranks_are_the_topmost_processes_with_a_rank_environment() -> None:
    # agent (no RANK) -> rank process (RANK=1) -> its fork (same RANK: a DataLoader worker)
    agent = subprocess.Popen([sys.executable, "-c", _TREE.format(rank=1)],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        rank_pid = int(agent.stdout.readline())
        time.sleep(0.5)
        found = discover.ranks_under(agent.pid)
        assert [(p.pid, p.rank, p.world_size) for p in found] == [(rank_pid, 1, 2)]
        assert discover.still_rank(found[0])
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
    deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously
    while discover.still_rank(found[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not discover.still_rank(found[0])


def test_stacks_refuses_a_pid_without_ranks_and_a_pid_that_is_not_one_process() -> None:
    sleeper = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ["PATH"]})
    try:
        res = run([sys.executable, "-m", "diag.cli", "stacks", "--pid", str(sleeper.pid)])
        assert res.returncode == 2 and "no rank process" in res.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    for pid in ("1", "0", "-1"):
        res = run([sys.executable, "-m", "diag.cli", "stacks", "--pid", pid])
        assert res.returncode == 2, (pid, res.stderr)


# ---------------------------------------------------------------------------------------
# on a real job


def _start(tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(torchrun_cmd(3, PLAIN, *args), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=quiet_env(), start_new_session=True)


def _stacks_json(agent: int, out: Path) -> tuple[int, dict]:
    """``ddiag stacks --json`` of the job; exit 2 (no rank yet) while torchrun starts."""
    res = run([sys.executable, "-m", "diag.cli", "stacks", "--pid", str(agent), "--out",
               str(out), "--json"], timeout=120)
    if res.returncode == 2 and "no rank process" in res.stderr:
        return 2, {"finding": None, "groups": []}
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, json.loads(res.stdout)


@pytest.mark.slow
def test_stacks_names_the_rank_stuck_in_its_dataloader(tmp_path: Path) -> None:
    job = _start(tmp_path, "--steps", "40", "--stuck-rank", "1", "--stuck-step", "3")
    try:
        deadline = time.monotonic() + 90
        last = None
        while True:  # until the job is hung: two snapshots in a row that say the same
            code, doc = _stacks_json(job.pid, tmp_path / f"run{int(time.monotonic() * 10)}")
            now = doc["finding"] and (doc["finding"]["title"], doc["finding"]["culprit"])
            if (now and now == last) or time.monotonic() > deadline:
                break
            last = now
            time.sleep(2)
    finally:
        kill_tree(job)
    assert code == 1 and doc["captured"] == 3, doc
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2]  # DataLoader workers are not ranks
    finding = doc["finding"]
    assert finding["category"] == "rank_hang" and finding["culprit"]["ranks"] == [1]
    assert "_try_get_data" in finding["title"]
    run_dir = Path(doc["run_dir"])
    assert sorted(p.name for p in (run_dir / "stacks").glob("rank*.json")) == \
        ["rank00000.json", "rank00001.json", "rank00002.json"]
    again = analyze(run_dir)  # the saved dumps tell analyze the same
    assert again.findings and again.findings[0].culprit.ranks == (1,)


@pytest.mark.slow
def test_stacks_of_ranks_pausing_together_name_no_one(tmp_path: Path) -> None:
    job = _start(tmp_path, "--steps", "10", "--pause-at", "2", "--pause-s", "60")
    try:
        deadline = time.monotonic() + 60
        while True:
            code, doc = _stacks_json(job.pid, tmp_path / f"run{int(time.monotonic())}")
            if any(g["state"] == "io" for g in doc["groups"]) or time.monotonic() > deadline:
                break
            time.sleep(2)
    finally:
        kill_tree(job)
    assert code == 0 and doc["finding"] is None, doc
    assert len(doc["groups"]) == 1 and doc["groups"][0]["size"] == 3


# ---------------------------------------------------------------------------------------
# ddiag watch --pid


def test_sample_watcher_waits_for_a_stall_in_which_ranks_wait_on_one_another() -> None:
    from diag.watch.sampled import Sample, SampleWatcher

    w = SampleWatcher(stall_s=10)
    stuck = {0: Sample(_stacks({0: BACKWARD})[0], 5.0), 1: Sample(_stacks({1: DATA})[0], 5.0)}
    assert w.observe(stuck, 100.0) is None  # the first look sets the reference
    assert w.observe(stuck, 105.0) is None  # not stalled long enough
    alarm = w.observe(stuck, 110.5)
    assert alarm is not None and alarm.finding.culprit.ranks == (1,)
    # CPU moving on a rank that is not waiting is progress: the stall starts again
    w = SampleWatcher(stall_s=10)
    w.observe(stuck, 100.0)
    busy = {**stuck, 1: Sample(stuck[1].stack, 9.0)}
    assert w.observe(busy, 110.5) is None and w.observe(busy, 115.0) is None


def test_sample_watcher_lets_ranks_pause_together_and_flags_a_shared_collective_late() -> None:
    from diag.watch.sampled import Sample, SampleWatcher

    w = SampleWatcher(stall_s=10)
    paused = {r: Sample(_stacks({r: SLEEP})[0], 1.0) for r in range(4)}
    assert all(w.observe(paused, 100.0 + t) is None for t in (0, 20, 200, 2000))
    w = SampleWatcher(stall_s=10)
    waiting = {r: Sample(_stacks({r: ALL_REDUCE})[0], 1.0) for r in range(4)}
    assert w.observe(waiting, 100.0) is None and w.observe(waiting, 150.0) is None
    alarm = w.observe(waiting, 200.5)  # 10 x stall: the same-point limit
    assert alarm is not None and "same point" in alarm.reason


@pytest.mark.slow
def test_watch_pid_names_the_stuck_rank_within_the_stall_and_kill_leaves_no_process(
        tmp_path: Path) -> None:
    job = _start(tmp_path, "--steps", "60", "--stuck-rank", "2", "--stuck-step", "4")
    try:
        started = time.monotonic()
        res = run([sys.executable, "-m", "diag.cli", "watch", str(tmp_path / "w"), "--pid",
                   str(job.pid), "--stall", "8", "--kill", "--timeout", "150", "--json"],
                  timeout=200)
        took = time.monotonic() - started
        ranks = [r["pid"] for r in json.loads(res.stdout)["ranks"]]
        job.wait(timeout=30)
    finally:
        if job.poll() is None:
            kill_tree(job)
    doc = json.loads(res.stdout)
    assert res.returncode == 1, res.stderr
    assert doc["alarm"]["finding"]["culprit"]["ranks"] == [2]
    assert "_try_get_data" in doc["alarm"]["finding"]["title"]
    # the hang starts after a few seconds of startup and 4 steps; then stall + 10 s
    assert doc["alarm"]["detected_at"] - doc["alarm"]["stalled_since"] <= 8 + 10
    assert took < 60, took
    assert doc["killed"] == [0, 1, 2]
    time.sleep(1)
    assert not [p for p in ranks if Path(f"/proc/{p}").exists()]
    assert not [p for p in _descendants_left(job.pid)]


def _descendants_left(pid: int) -> list[int]:
    from diag.watch.discover import descendants

    return descendants(pid)


@pytest.mark.slow
def test_watch_pid_gives_no_alarm_on_a_healthy_job_that_pauses_together(tmp_path: Path) -> None:
    # 3 ranks, a 25 s pause at step 5 on every rank (a checkpoint), stall 8 s
    job = _start(tmp_path, "--steps", "40", "--step-ms", "100", "--pause-at", "5",
                 "--pause-s", "25")
    try:
        res = run([sys.executable, "-m", "diag.cli", "watch", str(tmp_path / "w"), "--pid",
                   str(job.pid), "--stall", "8", "--timeout", "150", "--json"], timeout=200)
        assert job.wait(timeout=60) == 0
    finally:
        if job.poll() is None:
            kill_tree(job)
    doc = json.loads(res.stdout)
    assert res.returncode == 0 and doc["alarm"] is None, doc
    assert doc["ended"] == "job finished" and doc["samples"] >= 5


def test_a_spinning_rank_waiting_in_a_collective_is_no_progress() -> None:
    from diag.watch.sampled import Sample, SampleWatcher

    w = SampleWatcher(stall_s=10)
    ref = {0: Sample(_stacks({0: ALL_REDUCE})[0], 5.0), 1: Sample(_stacks({1: DATA})[0], 5.0)}
    spin = {0: Sample(ref[0].stack, 15.0), 1: ref[1]}  # rank 0 burns a core in its wait
    w.observe(ref, 100.0)
    alarm = w.observe(spin, 110.5)
    assert alarm is not None and alarm.finding.culprit.ranks == (1,)


@pytest.mark.slow
def test_watch_pid_on_a_decorated_job_agrees_with_its_heartbeats(tmp_path: Path) -> None:
    # the decorated hang program: the heartbeat watcher names rank 1 (tests/test_watch.py);
    # watched from outside by --pid, the same rank must come out
    hang = REPO / "tests" / "programs" / "hang_ddp.py"
    job = subprocess.Popen(torchrun_cmd(2, hang, "--out", str(tmp_path / "run"), "--hang-rank",
                                        "1", "--hang-step", "30"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=quiet_env(), start_new_session=True)
    try:
        res = run([sys.executable, "-m", "diag.cli", "watch", str(tmp_path / "w"), "--pid",
                   str(job.pid), "--stall", "6", "--kill", "--timeout", "120", "--json"],
                  timeout=180)
    finally:
        kill_tree(job)
    doc = json.loads(res.stdout)
    assert res.returncode == 1, res.stderr[-2000:]
    assert doc["alarm"]["finding"]["culprit"]["ranks"] == [1]
    assert doc["verdict"]["culprit"]["ranks"] == [1]  # analyze of the run dir and dumps
