"""The event log writer and reader: line atomicity, torn lines, full disks, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from diag.format import schema
from diag.runtime.eventlog import EventWriter, encode
from diag.format.events import read_events
from diag.format.rundir import (RUNS, TRAINING_RUN_DIR, RunDir, default_run_dir,
                                ensure_run_json, training_run_dir)
from tests.util import EXAMPLE, quiet_env, run

HEADER = {"kind": "header", **schema.stamp(schema.EVENTS), "rank": 3, "world_size": 4}


def test_records_round_trip_with_header_and_nonfinite_values(tmp_path):
    w = EventWriter(tmp_path / "r.jsonl", HEADER)
    w.emit({"kind": "step", "step": 0, "loss": float("nan"), "grad_norm": float("inf")})
    w.close({"kind": "close"})
    segments, problems = read_events(tmp_path / "r.jsonl")
    assert problems == []
    assert segments[0].rank == 3
    step = segments[0].of_kind("step")[0]
    assert step["loss"] == "nan" and step["grad_norm"] == "inf"
    assert segments[0].lines == [2, 3]


def test_integers_beyond_64_bits_are_written_as_strings_the_reader_reads(tmp_path):
    from diag.runtime.eventlog import _json_encode
    from diag.format.events import json_loads

    big = {"kind": "mine", "big": 10**400, "neg": -(2**63) - 1, "fits": 2**64 - 1,
           "nested": {"ids": [2**64, -(2**63)], "x": float("nan")}, "huge": 10**5000}
    w = EventWriter(tmp_path / "r.jsonl", HEADER)
    w.emit(big)
    w.emit({"kind": "after"})
    w.close()
    segments, problems = read_events(tmp_path / "r.jsonl")
    assert problems == [] and w.dropped == 0
    rec, after = segments[0].records
    assert (rec["big"], rec["neg"], rec["fits"]) == (str(10**400), str(-(2**63) - 1), 2**64 - 1)
    assert rec["nested"] == {"ids": [str(2**64), -(2**63)], "x": "nan"}
    assert isinstance(rec["huge"], str) and after["kind"] == "after"
    assert json_loads(_json_encode(big))["big"] == str(10**400)  # the json fallback too


def test_a_record_kept_in_parts_is_built_by_the_writer_and_a_broken_one_is_counted(tmp_path):
    class Parts(dict):
        def record(self):
            return {"kind": "x", **self, "joined": True}

    class Broken(dict):
        def record(self):
            raise KeyError("fixed")

    w = EventWriter(tmp_path / "r.jsonl", HEADER)
    w.emit(Parts(n=1))
    w.emit(Broken(n=2))
    w.emit({"kind": "y"})
    w.close()
    segments, problems = read_events(tmp_path / "r.jsonl")
    assert problems == []
    assert [(r["kind"], r.get("n"), r.get("joined")) for r in segments[0].records] == [
        ("x", 1, True), ("y", None, None)]
    assert w.written == 3 and w.dropped == 1


def test_concurrent_writers_never_interleave_half_lines(tmp_path):
    path = tmp_path / "shared.jsonl"
    writers = [EventWriter(path, {**HEADER, "rank": r}) for r in range(4)]
    blob = "x" * 3000  # records larger than a typical stdio buffer

    def spam(w, r):
        for i in range(300):
            w.emit({"kind": "step", "rank": r, "step": i, "blob": blob})

    threads = [threading.Thread(target=spam, args=(w, r)) for r, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in writers:
        w.close()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 4 * 301
    assert all(json.loads(line)["kind"] in ("header", "step") for line in lines)


def test_torn_last_line_is_reported_not_raised(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(encode(HEADER) + encode({"kind": "step", "step": 0}) + b'{"kind": "st')
    segments, problems = read_events(path)
    assert [r["step"] for r in segments[0].of_kind("step")] == [0]
    assert len(problems) == 1 and problems[0].line == 3 and "torn" in problems[0].message


def test_corrupt_middle_line_is_skipped_with_its_line_number(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(encode(HEADER) + b"\x00\xffgarbage\n" + encode({"kind": "step", "step": 1}))
    segments, problems = read_events(path)
    assert segments[0].of_kind("step")[0]["step"] == 1
    assert problems[0].line == 2 and "not valid JSON" in problems[0].message


def test_restart_appends_a_new_segment(tmp_path):
    path = tmp_path / "r.jsonl"
    for pid in (100, 200):
        w = EventWriter(path, {**HEADER, "pid": pid})
        w.emit({"kind": "step", "step": 0})
        w.close()
    segments, _ = read_events(path)
    assert [s.header["pid"] for s in segments] == [100, 200]


def test_reader_rejects_a_newer_major_schema(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(encode({**HEADER, "schema": schema.VERSIONS[schema.EVENTS] + 1}))
    segments, problems = read_events(path)
    assert segments == []
    assert "upgrade ddiag" in problems[0].message


def test_full_disk_drops_and_counts_without_raising(tmp_path, caplog):
    os.symlink("/dev/full", tmp_path / "full.jsonl")
    w = EventWriter(tmp_path / "full.jsonl", HEADER)
    for i in range(50):
        w.emit({"kind": "step", "step": i})
    w.close({"kind": "close"})
    assert w.written == 0 and w.dropped == 52
    assert sum("records are dropped" in r.message for r in caplog.records) == 1


def test_unopenable_path_drops_and_counts(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    w = EventWriter(blocker / "events" / "r.jsonl", HEADER)  # parent is a file
    w.emit({"kind": "step"})
    w.close()
    assert w.written == 0 and w.dropped == 2


def counting_heartbeat(tmp_path, flush_interval: float) -> tuple[EventWriter, Path]:
    """A writer whose heartbeat counts up every 10 ms, and the heartbeat file."""
    beats = iter(range(10**6))
    hb = tmp_path / "hb.json"
    return EventWriter(tmp_path / "r.jsonl", HEADER, heartbeat_path=hb,
                       heartbeat=lambda: {"n": next(beats)}, heartbeat_interval=0.01,
                       flush_interval=flush_interval), hb


def test_heartbeat_is_replaced_whole(tmp_path):
    w, hb = counting_heartbeat(tmp_path, flush_interval=0.01)
    seen = set()
    deadline = time.time() + 2
    while time.time() < deadline and len(seen) < 5:
        seen.add(json.loads(hb.read_text())["n"]) if hb.exists() else None
    w.close()
    assert len(seen) >= 5


def test_long_flush_interval_does_not_starve_the_heartbeat(tmp_path):
    w, hb = counting_heartbeat(tmp_path, flush_interval=3600)
    time.sleep(0.2)  # the writer's first pass goes by; its next flush is an hour away
    w.emit({"kind": "step", "step": 0})
    deadline = time.time() + 5
    while time.time() < deadline and json.loads(hb.read_text())["n"] < 5:
        time.sleep(0.01)
    assert json.loads(hb.read_text())["n"] >= 5
    assert b'"step"' not in (tmp_path / "r.jsonl").read_bytes()  # still queued
    w.close()
    assert b'"step"' in (tmp_path / "r.jsonl").read_bytes()


def test_run_json_is_created_once_and_never_overwritten(tmp_path):
    rd = RunDir(tmp_path).create()
    first = ensure_run_json(rd, "run-a")
    second = ensure_run_json(rd, "run-b")
    assert first["run_id"] == second["run_id"] == "run-a"
    assert json.loads(rd.run_json.read_text())["run_id"] == "run-a"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run.json")]


LAUNCHER_IDS = ("DDIAG_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID")


def test_a_command_given_no_out_gets_a_new_folder_under_runs(monkeypatch):
    for var in ("DDIAG_RUN_DIR", *LAUNCHER_IDS):
        monkeypatch.delenv(var, raising=False)
    first, second = default_run_dir("probe"), default_run_dir("probe")
    assert first.parent == second.parent == RUNS and first != second
    assert first.name.startswith("probe-")
    # Every rank of a job derives the same folder: the launcher's run id, else the job's.
    assert default_run_dir("check-env", "node1-29500") == RUNS / "check-env-node1-29500"
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert default_run_dir("check-env", "node1-29500") == RUNS / "check-env-slurm-42"
    assert default_run_dir("scale-test", own_run=True).name.startswith("scale-test-2")


def test_ddiag_run_dir_is_joined_except_by_a_command_that_starts_runs_of_its_own(monkeypatch):
    monkeypatch.setenv("DDIAG_RUN_DIR", "/data/job7")
    assert default_run_dir("check-env", "node1-29500") == Path("/data/job7")
    assert default_run_dir("probe") == Path("/data/job7")
    assert default_run_dir("scale-test", own_run=True).parent == RUNS
    assert training_run_dir() == Path("/data/job7")
    assert training_run_dir("mine") == Path("mine")
    monkeypatch.delenv("DDIAG_RUN_DIR")
    assert training_run_dir() == TRAINING_RUN_DIR == Path("ddiag-run")


SIGNAL_CHILD = """
import signal, sys, time, diag.runtime.eventlog as el
from diag.format import schema
# A job started in the background of a non-interactive shell (nohup ... &) inherits
# SIGINT ignored, and ddiag rightly keeps it ignored; this test is about the default.
signal.signal(signal.SIGINT, signal.default_int_handler)
el.install_signal_flush()
w = el.EventWriter(sys.argv[1], {"kind": "header", **schema.stamp(schema.EVENTS), "rank": 0},
                   flush_interval=3600)
time.sleep(0.2)  # let the writer's first pass go by; the next is an hour away
for i in range(100):
    w.emit({"kind": "step", "step": i})
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_flush_then_keep_their_meaning(tmp_path, signum):
    path = tmp_path / "r.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_CHILD, str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signum)
    proc.wait(timeout=20)
    segments, problems = read_events(path)
    assert problems == [] and len(segments[0].of_kind("step")) == 100
    if signum == signal.SIGTERM:
        assert proc.returncode == -signal.SIGTERM  # still "killed by SIGTERM"
    else:
        assert "KeyboardInterrupt" in proc.stderr.read()


def test_training_into_dev_full_finishes_and_counts_drops(tmp_path):
    out = tmp_path / "run"
    (out / "events").mkdir(parents=True)
    os.symlink("/dev/full", out / "events" / "rank00000.jsonl")
    res = run([sys.executable, str(EXAMPLE), "--out", str(out), "--steps", "20",
               "--print-stats"], timeout=120, env=quiet_env())
    assert res.returncode == 0, res.stderr[-2000:]
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    assert stats["written"] == 0 and stats["dropped"] >= 21  # header + 20 steps at least
    assert res.stderr.count("records are dropped") == 1


def test_an_ignored_sigint_still_flushes_and_stays_ignored(tmp_path):
    path = tmp_path / "r.jsonl"
    child = SIGNAL_CHILD.replace("signal.default_int_handler", "signal.SIG_IGN")
    proc = subprocess.Popen([sys.executable, "-c", child, str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        deadline = time.time() + 20
        while time.time() < deadline and len(read_events(path)[0][0].of_kind("step")) < 100:
            time.sleep(0.1)
        assert len(read_events(path)[0][0].of_kind("step")) == 100  # flushed
        assert proc.poll() is None  # and the job goes on, as it asked
    finally:
        proc.kill()
        proc.wait(timeout=20)


def test_the_reader_hands_out_clean_headers_and_records(tmp_path):
    from diag.format.events import MAX_PROBLEMS_PER_FILE

    path = tmp_path / "r.jsonl"
    lines = [{**HEADER, "world_size": "4", "host": ["a"], "run_id": 7},
             {"kind": "collective", "group": {"a": 1}, "seq": 1},
             {"kind": "collective", "group": "0", "seq": 2},
             {**HEADER, "rank": "one"}, {"kind": "step", "step": 0}]
    path.write_bytes(b"".join(encode(r) for r in lines)
                     + b"not json\n" * (MAX_PROBLEMS_PER_FILE + 50))
    segments, problems = read_events(path)
    (seg,) = segments
    assert seg.rank == 3 and seg.header["world_size"] is None
    assert seg.header["host"] is None and seg.header["run_id"] is None
    assert [r["seq"] for r in seg.records] == [2]  # the dict group skipped; "one"'s step too
    assert [p.line for p in problems[:5]] == [1, 1, 1, 2, 4]
    assert len(problems) == MAX_PROBLEMS_PER_FILE + 1
    assert problems[-1].line is None and "more problems" in problems[-1].message


def test_a_named_pipe_among_the_event_logs_does_not_block_the_reader(tmp_path):
    from diag.format.events import read_run_events

    (tmp_path / "events").mkdir()
    os.mkfifo(tmp_path / "events" / "rank00001.jsonl")
    (tmp_path / "events" / "rank00000.jsonl").write_bytes(encode({**HEADER, "rank": 0}))

    def stuck(signum, frame):
        raise TimeoutError("the reader waits on the named pipe")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(20)
    try:
        logs, problems = read_run_events(tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert sorted(logs) == [0]
    assert problems[0].file.endswith("rank00001.jsonl") and "named pipe" in problems[0].message


def test_a_record_waiting_for_its_values_holds_back_nothing_and_closing_writes_it(
        tmp_path, monkeypatch):
    from diag.runtime import eventlog

    class Copy:  # a device-to-host copy in flight until ``done``
        done = False

        def ready(self):
            return self.done

    def build(copy, n):
        return {"kind": "step", "step": n, "read": copy.done}

    first, second = Copy(), Copy()
    w = EventWriter(tmp_path / "r.jsonl", HEADER, flush_interval=3600)
    w.emit(eventlog.Awaiting((first, build, 0)))
    w.emit({"kind": "collective", "step": 1})
    w.emit(eventlog.Awaiting((second, build, 1)))
    w.flush()
    first.done = True
    w.flush()
    monkeypatch.setattr(eventlog, "DRAIN_WAIT_S", 0.01)
    w.close({"kind": "close"})  # the second copy never lands: written without it
    (segment,), problems = read_events(tmp_path / "r.jsonl")
    assert problems == []
    assert [(r["kind"], r.get("step"), r.get("read")) for r in segment.records] == [
        ("collective", 1, None), ("step", 0, True), ("step", 1, False), ("close", None, None)]
