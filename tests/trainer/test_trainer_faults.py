"""Each injected fault leaves the run directory the real failure would: event records and
Flight Recorder dumps, on 2 gloo ranks, with no process of the run left afterwards
(``launch`` checks that after every run)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass

import pytest

from reference_trainer.config import INJECT_ENV
from tests.trainer.runner import (Launch, assert_no_strays, assert_verdict, fr_entries,
                                  last_collective, launch, steps_of, top_finding, trainer_cmd)
from tests.util import quiet_env

pytestmark = pytest.mark.slow  # every test launches the trainer on gloo ranks

# Short enough that a hang ends in seconds; long enough for a loaded 2-core machine.
TIMEOUT = ("--timeout-s", "4")
STEPS = ("--steps", "5")


def _failed(run) -> None:
    assert run.returncode != 0, "the run should have failed"


def _fr_seq(run, rank: int) -> int:
    return max(e["collective_seq_id"] for e in fr_entries(run.fr(rank)))


@dataclass
class HungRun:
    run: Launch
    dump_delay_s: float
    """From SIGUSR1 to rank 0's Flight Recorder dump, while rank 0 was stuck."""
    sent: float
    """When SIGUSR1 was sent (time.time())."""
    stuck_entries: list[dict]
    """Rank 0's Flight Recorder entries in that dump."""


@pytest.fixture(scope="module")
def hung(tmp_path_factory) -> HungRun:
    """The deadlocked-loader case: rank 1's loader worker never returns the batch of step
    2. While rank 0 waits in the all_reduce rank 1 never joins, it gets a SIGUSR1, as the
    hang watcher sends; the run then ends by the process-group timeout."""
    run_dir = tmp_path_factory.mktemp("hang") / "run"
    proc = subprocess.Popen(trainer_cmd(2, run_dir, *STEPS, "--timeout-s", "6",
                                        "--loader-workers", "1", "--inject", "hang:rank=1:step=2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=quiet_env(), start_new_session=True)
    try:
        pid = _wait_until_in_step(run_dir / "heartbeat" / "rank00000.json", step=2)
        time.sleep(0.5)  # now blocked in the DDP all_reduce that rank 1 never joins
        dump = run_dir / "fr" / "rank00000.json"
        sent = time.time()
        os.kill(pid, signal.SIGUSR1)
        while not dump.exists() and time.time() - sent < 5:
            time.sleep(0.02)
        delay = time.time() - sent
        entries = fr_entries(json.loads(dump.read_text()))
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        assert_no_strays(run_dir)
    return HungRun(Launch(proc.returncode, out, err, run_dir), delay, sent, entries)


def test_hang_leaves_the_others_ahead(hung):
    run = hung.run
    _failed(run)
    logs = run.logs()
    victim, culprit = last_collective(logs[0]), last_collective(logs[1])
    assert victim["group"] == culprit["group"] and victim["seq"] > culprit["seq"]
    assert victim["step"] == 2 and culprit["step"] == 1
    assert "Timed out" in logs[0].of_kind("exception")[-1]["message"]
    assert max(steps_of(logs[1])) == 1
    assert not logs[1].of_kind("exception") and not logs[1].of_kind("close")  # killed, silent
    assert _fr_seq(run, 0) > _fr_seq(run, 1)  # the SIGTERM handler dumped the hung rank
    assert_verdict(run, "rank_hang", [1])


def test_sigusr1_dumps_a_rank_stuck_inside_a_collective(hung):
    # The dump came at once, not when the 6 s timeout let the main thread go.
    assert hung.dump_delay_s < 2.0
    stuck = hung.stuck_entries[-1]
    assert stuck["profiling_name"] == "gloo:all_reduce" and stuck["input_sizes"] != [[1]]
    (exception,) = hung.run.logs()[0].of_kind("exception")
    assert exception["t"] > hung.sent + 1.0  # it was still stuck when it dumped


def _wait_until_in_step(heartbeat, step: int) -> int:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            beat = json.loads(heartbeat.read_text())
            if beat["step"] == step and beat["in_step"]:
                return beat["pid"]
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"{heartbeat} never reached step {step}")


def test_crash_is_an_exception_at_its_step(tmp_path):
    # Injected through the environment: the run directory's argv then does not name it.
    run = launch(2, tmp_path / "run", *STEPS, *TIMEOUT, env={INJECT_ENV: "crash:rank=1:step=2"})
    _failed(run)
    logs = run.logs()
    (crash,) = logs[1].of_kind("exception")
    assert (crash["step"], crash["type"]) == (2, "IndexError")
    assert not [a for a in logs[1].header["argv"] if "inject" in a or "crash:" in a]
    assert 2 not in steps_of(logs[1]) and run.fr(1)["entries"]
    assert_verdict(run, "other", [1])


def test_nan_shows_first_on_the_rank_that_made_it(tmp_path):
    run = launch(2, tmp_path / "run", *STEPS, "--inject", "nan:rank=1:step=2")
    assert run.returncode == 0, run.why()
    steps = {rank: steps_of(log) for rank, log in run.logs().items()}
    for rank in (0, 1):
        assert all(steps[rank][s]["nonfinite"] is None for s in (0, 1))
        assert all(steps[rank][s]["nonfinite"] for s in (2, 3, 4))  # the all_reduce spreads it
    assert steps[1][2]["loss"] == "nan" and math.isfinite(steps[0][2]["loss"])
    assert steps[1][2]["sent_nonfinite"] and steps[0][2]["sent_nonfinite"] is None
    assert_verdict(run, "nan_inf", [1])


def test_shape_mismatch_is_one_seq_with_two_sizes(tmp_path):
    run = launch(2, tmp_path / "run", *STEPS, *TIMEOUT, "--inject", "shape_mismatch:rank=1:step=2")
    _failed(run)
    logs = run.logs()
    mine, theirs = last_collective(logs[1], "all_reduce"), last_collective(logs[0], "all_reduce")
    assert (mine["seq"], mine["step"]) == (theirs["seq"], theirs["step"]) == (mine["seq"], 2)
    assert (theirs["in_numel"], mine["in_numel"]) == (1, 2)
    fr0, fr1 = fr_entries(run.fr(0))[-1], fr_entries(run.fr(1))[-1]
    assert fr0["collective_seq_id"] == fr1["collective_seq_id"]
    assert (fr0["input_sizes"], fr1["input_sizes"]) == ([[1]], [[2]])
    assert_verdict(run, "shape_mismatch", [1])


def test_extra_collective_is_a_barrier_only_one_rank_enters(tmp_path):
    run = launch(2, tmp_path / "run", *STEPS, *TIMEOUT, "--inject", "extra_collective:rank=0:step=2")
    _failed(run)
    logs = run.logs()
    barriers = {r: [c for c in log.of_kind("collective") if c["op"] == "barrier"]
                for r, log in logs.items()}
    assert [b["step"] for b in barriers[0]] == [2] and barriers[1] == []
    assert "error" in barriers[0][0]  # nobody else came
    assert [s["name"] for s in logs[0].of_kind("span")] == ["checkpoint"]
    assert fr_entries(run.fr(0), "barrier") and not fr_entries(run.fr(1), "barrier")
    assert_verdict(run, "collective_mismatch", [0])


def test_oom_is_the_allocators_error_at_its_step(tmp_path):
    run = launch(2, tmp_path / "run", *STEPS, *TIMEOUT, "--inject", "oom:rank=1:step=2")
    _failed(run)
    (oom,) = run.logs()[1].of_kind("exception")
    assert oom["step"] == 2 and "DefaultCPUAllocator: can't allocate memory" in oom["message"]
    assert_verdict(run, "oom", [1])


def _median_phase(log, phase: str, steps: range) -> float:
    values = sorted(steps_of(log)[s]["phases"][phase] for s in steps)
    return values[len(values) // 2]


def test_slow_compute_and_slow_data_show_in_their_phases(tmp_path):
    run = launch(2, tmp_path / "run", "--steps", "6", "--inject", "slow_compute:rank=1:arg=0.25",
                 "--inject", "slow_data:rank=0:step=3:arg=0.25")
    assert run.returncode == 0, run.why()
    logs = run.logs()
    assert _median_phase(logs[1], "forward", range(6)) >= 0.24
    assert _median_phase(logs[0], "forward", range(6)) < 0.1
    assert _median_phase(logs[0], "data", range(3, 6)) >= 0.24
    assert _median_phase(logs[0], "data", range(1, 3)) < 0.1
    assert _median_phase(logs[1], "data", range(1, 6)) < 0.1


def test_stuck_run_is_cleaned_up_when_its_launcher_is_killed(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(trainer_cmd(2, run_dir, *STEPS, "--timeout-s", "600",
                                        "--loader-workers", "1", "--inject", "hang:rank=1:step=1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=quiet_env(), start_new_session=True)
    try:
        _wait_until_in_step(run_dir / "heartbeat" / "rank00000.json", step=1)
        proc.send_signal(signal.SIGTERM)  # what srun or a scheduler does at a time limit
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert_no_strays(run_dir, wait_s=45)


@pytest.mark.parametrize("fault, kind", [("slow_compute", "compute"), ("slow_data", "data loading")])
def test_analyze_names_the_straggler_and_its_kind(tmp_path, fault, kind):
    run = launch(2, tmp_path / "run", "--steps", "12", "--inject", f"{fault}:rank=1:arg=0.2")
    assert run.returncode == 0, run.why()
    assert_verdict(run, "straggler", [1])
    assert top_finding(run.run_dir)["details"]["kind"] == kind


def test_healthy_run_has_no_finding_above_info(tmp_path):
    run = launch(2, tmp_path / "run", "--steps", "12")
    assert run.returncode == 0, run.why()
    top = top_finding(run.run_dir)
    assert top is None or top["severity"] == "info", top
