"""ddiag watch on hostile and broken input: heartbeats that name processes which are not
this run's ranks, heartbeats of the wrong types, and bad options.

Safety: no test here would, on a regressed watcher, send a signal to pid -1, 0 or 1
(those heartbeats advertise no signal and run without --kill); only ``sleep`` processes
that the tests own are ever at risk.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.format import schema
from diag.cli import main
from diag.format.rundir import RunDir
from diag.format.heartbeat import RankBeat, read_beats, scan_beats
from diag.watch.capture import guarded_cmd, rank_started
from diag.watch.verify import REFUSED_EXIT, why_not_rank
from tests.util import REPO, pids_alive, quiet_env, run

RANK_PROGRAM = REPO / "tests" / "programs" / "watch_rank.py"


def write_beat(run_dir: Path, rank: int, /, **fields) -> Path:
    """RUN_DIR/heartbeat/rankNNNNN.json of a rank that stopped beating a minute ago;
    ``fields`` replace the defaults, ``rank`` too (the file keeps the name)."""
    doc = {**schema.stamp(schema.HEARTBEAT), "rank": rank, "pid": None,
           "host": socket.gethostname(), "t": time.time() - 60, "step": 3, "seq": {"0": 3},
           "pending": None, "span": None, "fr_signal": None, **fields}
    path = RunDir(run_dir).heartbeat(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def procs():
    """Start processes, each in its own session; at the end of the test every one, and
    whatever it forked, is killed."""
    started: list[subprocess.Popen] = []

    def start(argv, **kw) -> subprocess.Popen:
        started.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                        start_new_session=True, **kw))
        return started[-1]

    yield start
    for p in started:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)


def sleeper(procs, env=None, cwd=None) -> subprocess.Popen:
    return procs(["sleep", "300"], env=env, cwd=cwd)


def holder(procs, path: Path, flags: str, fork: bool = False) -> tuple[int, int | None]:
    """A process holding ``path`` open with ``flags``; with ``fork``, also a child that
    inherited the descriptor (as a DataLoader worker does). Returns (pid, child pid)."""
    code = (f"import os, time\nfd = os.open({str(path)!r}, {flags} | os.O_CREAT, 0o644)\n"
            f"child = os.fork() if {fork} else 0\n"
            "if child == 0 and {fork}:\n    time.sleep(300)\n    os._exit(0)\n"
            "print(child, flush=True)\ntime.sleep(300)\n").replace("{fork}", str(fork))
    p = procs([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    return p.pid, (child or None)


def start_rank(procs, run_dir: Path, rank: int = 0) -> subprocess.Popen:
    """A real instrumented rank whose run dir is only in its environment."""
    env = quiet_env(DDIAG_RUN_DIR=str(run_dir), RANK=str(rank))
    p = procs([sys.executable, str(RANK_PROGRAM)], env=env, stdout=subprocess.DEVNULL,
              stderr=subprocess.DEVNULL)
    beat = RunDir(run_dir).heartbeat(rank)
    deadline = time.monotonic() + 60
    while not (beat.exists() and json.loads(beat.read_text()).get("fr_signal")):
        assert p.poll() is None and time.monotonic() < deadline, "the rank never beat"
        time.sleep(0.1)
    return p


# --- the gate: which pids are this run's ranks -------------------------------------------

@pytest.mark.parametrize("pid", [-1, 0, 1, True, "4242", 2.5, None])
def test_pids_that_are_not_one_process_are_refused(tmp_path, pid):
    assert why_not_rank(str(tmp_path), 0, pid, None)


def test_an_unrelated_process_is_refused(tmp_path, procs):
    victim = sleeper(procs)
    assert "DDIAG_RUN_DIR" in why_not_rank(str(tmp_path), 0, victim.pid, None)
    assert why_not_rank(str(tmp_path), 0, os.getpid(), None)  # the watcher itself


def test_a_process_started_with_the_run_dir_and_rank_is_a_rank(tmp_path, procs):
    tied = sleeper(procs, env={**os.environ, "DDIAG_RUN_DIR": str(tmp_path), "RANK": "3"})
    assert why_not_rank(str(tmp_path), 3, tied.pid, None) is None
    assert why_not_rank(str(tmp_path), 4, tied.pid, None)  # another rank's heartbeat
    other = tmp_path / "other"
    other.mkdir()
    assert why_not_rank(str(other), 3, tied.pid, None)  # another run


def test_a_rank_under_a_wrapper_shell_started_with_the_same_env_is_a_rank(tmp_path, procs):
    env = {**os.environ, "DDIAG_RUN_DIR": str(tmp_path), "RANK": "0"}
    shell = procs(["sh", "-c", "sleep 300 & echo $!; wait"], env=env, stdout=subprocess.PIPE,
                  text=True)
    rank = int(shell.stdout.readline())
    exec_done(rank, "sleep")
    assert why_not_rank(str(tmp_path), 0, rank, None) is None


def exec_done(pid: int, comm: str) -> None:
    """``$!`` is printed right after the fork: wait until the child has become ``comm``
    (its environment reads empty while exec replaces its memory)."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/comm").read_text().strip() != comm or \
            not Path(f"/proc/{pid}/environ").read_bytes():
        assert time.monotonic() < deadline, f"pid {pid} never became {comm}"
        time.sleep(0.01)


def test_a_relative_run_dir_resolves_against_the_ranks_cwd(tmp_path, procs):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, "DDIAG_RUN_DIR": "run", "RANK": "0"}
    tied = sleeper(procs, env=env, cwd=tmp_path)
    assert why_not_rank(str(run_dir), 0, tied.pid, None) is None


def test_a_pid_that_started_after_the_rank_is_a_reused_pid(tmp_path, procs):
    tied = sleeper(procs, env={**os.environ, "DDIAG_RUN_DIR": str(tmp_path), "RANK": "0"})
    assert why_not_rank(str(tmp_path), 0, tied.pid, time.time() + 60) is None
    assert "started" in why_not_rank(str(tmp_path), 0, tied.pid, time.time() - 600)


def test_a_dead_pid_is_refused(tmp_path, procs):
    tied = sleeper(procs, env={**os.environ, "DDIAG_RUN_DIR": str(tmp_path), "RANK": "0"})
    tied.kill()
    tied.wait()
    assert why_not_rank(str(tmp_path), 0, tied.pid, None)


def test_the_writer_of_the_ranks_event_log_is_the_rank_and_its_forks_are_not(tmp_path, procs):
    events = RunDir(tmp_path).events(5)
    events.parent.mkdir(parents=True)
    pid, child = holder(procs, events, "os.O_WRONLY | os.O_APPEND", fork=True)
    assert why_not_rank(str(tmp_path), 5, pid, None) is None
    assert why_not_rank(str(tmp_path), 6, pid, None)  # not rank 6's log
    assert why_not_rank(str(tmp_path), 5, child, None)  # a DataLoader worker, not the rank
    reader, _ = holder(procs, events, "os.O_RDONLY")  # tail -f
    assert why_not_rank(str(tmp_path), 5, reader, None)


def test_when_a_rank_started_comes_from_its_heartbeat_or_its_log_header(tmp_path):
    events = RunDir(tmp_path).events(0)
    events.parent.mkdir(parents=True)
    events.write_text(json.dumps({"kind": "header", "pid": 1234, "t": 100.0}) + "\n")
    old = RankBeat(0, 1234, None, 200.0, 0, (), None, None, None)  # ddiag without started
    assert rank_started(tmp_path, old) == 100.0
    assert rank_started(tmp_path, RankBeat(0, 999, None, 200.0, 0, (), None, None, None)) is None
    new = RankBeat(0, 1234, None, 200.0, 0, (), None, None, None, started=150.0)
    assert rank_started(tmp_path, new) == 150.0


# --- the payload that checks and acts on a rank's own node ---------------------------------

def remote_beat(rank: int, pid) -> RankBeat:
    return RankBeat(rank, pid, "node-elsewhere", time.time(), 0, (), None, None, "SIGUSR1")


def test_the_on_node_check_refuses_before_acting(tmp_path, procs):
    victim = sleeper(procs)
    cmd = guarded_cmd(tmp_path, remote_beat(0, victim.pid), ["kill", "-KILL", str(victim.pid)])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert res.returncode == REFUSED_EXIT and str(victim.pid) in res.stderr
    time.sleep(0.2)
    assert victim.poll() is None


def test_the_on_node_check_lets_a_real_rank_through(tmp_path, procs):
    tied = sleeper(procs, env={**os.environ, "DDIAG_RUN_DIR": str(tmp_path), "RANK": "0"})
    marker = tmp_path / "ran"
    cmd = guarded_cmd(tmp_path, remote_beat(0, tied.pid), ["touch", str(marker)])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert marker.exists()


# --- end to end: the CLI on a run dir with hostile heartbeats ------------------------------

def test_a_hostile_heartbeat_cannot_signal_trace_or_kill_an_unrelated_process(tmp_path, procs):
    run_dir = tmp_path / "run"
    rank = start_rank(procs, run_dir, rank=0)
    beat = json.loads(RunDir(run_dir).heartbeat(0).read_text())
    assert beat["pid"] == rank.pid and beat["started"] <= beat["t"]
    victim = sleeper(procs)
    write_beat(run_dir, 1, pid=victim.pid, fr_signal="SIGKILL")
    res = run([sys.executable, "-m", "diag.cli", "watch", str(run_dir), "--stall", "0.5",
               "--kill", "--timeout", "60", "--json"], timeout=120)
    assert res.returncode == 1, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert pids_alive([victim.pid]) == [victim.pid]
    assert doc["fr_requested"] == [0] and doc["killed"] == [0]
    assert rank.wait(timeout=30) != 0  # the real rank was ended as before
    refused = {(r["rank"], r["action"]) for r in doc["refused"]}
    assert refused == {(1, "fr_dump"), (1, "stack"), (1, "kill")}
    captures = {c["rank"]: c for c in doc["captures"]}
    assert captures[0]["path"] and not captures[1]["path"] and captures[1]["error"]
    assert json.loads((run_dir / "watch.json").read_text())["refused"] == doc["refused"]


def test_pids_minus_one_zero_and_one_are_refused_in_the_result(tmp_path):
    run_dir = tmp_path / "run"
    for rank, pid in enumerate([-1, 0, 1]):
        write_beat(run_dir, rank, pid=pid)  # no fr_signal: nothing to send even if broken
    res = run([sys.executable, "-m", "diag.cli", "watch", str(run_dir), "--stall", "0.5",
               "--timeout", "60", "--json"], timeout=120)
    assert res.returncode == 1, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert {(r["rank"], r["pid"], r["action"]) for r in doc["refused"]} == {
        (0, -1, "stack"), (1, 0, "stack"), (2, 1, "stack")}
    assert all(c["path"] is None for c in doc["captures"])


# --- heartbeats of the wrong types ---------------------------------------------------------

BROKEN = {
    "seq_string": {"seq": "abc"},
    "seq_values": {"seq": {"0": "3"}},
    "rank_string": {"rank": "x"},
    "rank_bool": {"rank": True},
    "t_list": {"t": [1, 2]},
    "t_nan": {"t": float("nan")},
    "pid_string": {"pid": "12"},
    "pending_list": {"pending": [1]},
    "span_string": {"span": "checkpoint"},
    "step_float": {"step": 1.5},
    "fr_signal_number": {"fr_signal": 10},
    "host_list": {"host": ["a"]},
}


def test_heartbeats_of_the_wrong_types_are_ignored_and_named(tmp_path):
    paths = {}
    for rank, (case, fields) in enumerate(BROKEN.items(), start=1):
        paths[case] = write_beat(tmp_path, rank, **fields)
    write_beat(tmp_path, 0, pid=1234)
    not_a_dict = RunDir(tmp_path).heartbeat(99)
    not_a_dict.write_text("[1, 2]")
    beats, malformed = scan_beats(tmp_path)
    assert set(beats) == {0}
    assert set(malformed) == {*paths.values(), not_a_dict}
    assert set(read_beats(tmp_path)) == {0}


def test_watch_on_a_malformed_heartbeat_says_so_once_and_goes_on(tmp_path):
    bad = write_beat(tmp_path, 0, seq="abc", t=time.time())
    res = run([sys.executable, "-m", "diag.cli", "watch", str(tmp_path), "--stall", "0.5",
               "--timeout", "2"], timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and res.stderr.count(str(bad)) == 1
    res = run([sys.executable, "-m", "diag.cli", "watch", str(tmp_path), "--stall", "0.5",
               "--timeout", "1", "--json"], timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert [m["path"] for m in json.loads(res.stdout)["malformed"]] == [str(bad)]


# --- options -------------------------------------------------------------------------------

@pytest.mark.parametrize("option,value", [
    ("--stall", "nan"), ("--stall", "inf"), ("--stall", "0"), ("--stall", "-3"),
    ("--timeout", "0"), ("--timeout", "-1"), ("--timeout", "nan"), ("--timeout", "inf")])
def test_stall_and_timeout_must_be_finite_positive_seconds(tmp_path, option, value):
    # A subprocess with a time limit: a regression here used to mean watching forever.
    args = [option, value] + (["--timeout", "3"] if option == "--stall" else [])
    res = run([sys.executable, "-m", "diag.cli", "watch", str(tmp_path), *args], timeout=30)
    assert res.returncode == 2, res.stderr
    assert option in res.stderr and value in res.stderr


def test_a_run_dir_that_never_appears_is_refused_and_a_late_one_is_watched(tmp_path):
    started = time.monotonic()
    res = CliRunner().invoke(main, ["watch", str(tmp_path / "nope"), "--timeout", "1"])
    assert res.exit_code == 2, res.output
    assert str(tmp_path / "nope") in res.output and time.monotonic() - started < 10
    late = tmp_path / "late"
    mkdir = subprocess.Popen(["sh", "-c", f"sleep 0.5 && mkdir {late}"])
    res = CliRunner().invoke(main, ["watch", str(late), "--timeout", "2", "--json"])
    mkdir.wait()
    assert res.exit_code == 0, res.output  # started together with the job: as before
    assert json.loads(res.stdout)["ended"] == "watch timed out"


def test_named_pipes_for_a_heartbeat_or_an_event_log_do_not_block_the_watch(tmp_path):
    write_beat(tmp_path, 0, t=time.time())
    RunDir(tmp_path).events(0).parent.mkdir(parents=True)
    os.mkfifo(RunDir(tmp_path).events(0))  # job_finished reads every beating rank's log
    os.mkfifo(RunDir(tmp_path).heartbeat(1))
    res = run([sys.executable, "-m", "diag.cli", "watch", str(tmp_path), "--timeout", "2",
               "--json"], timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["ended"] == "watch timed out"
    assert [m["path"] for m in doc["malformed"]] == [str(RunDir(tmp_path).heartbeat(1))]
