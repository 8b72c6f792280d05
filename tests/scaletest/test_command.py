"""scale-test of the user's own command: the CLI's usage errors, the three throughput
sources (event logs, --metric over the output, wall time), the straggler found in stack
samples, the launch lines, and two real local runs of a plain DDP script that imports
nothing of ddiag."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.analyze.busywait import BusyTally, straggler
from diag.analyze.stackgroups import Frame, Stack
from diag.cli import main
from diag.launch import LaunchSpec, local_command, slurm_command
from diag.scaletest import throughput
from diag.scaletest.config import ScaleTestConfig
from diag.scaletest.run import ScaleTestResult, _measure
from diag.scaletest.stage import StageRun, StepOutcome
from diag.verdict import Category
from diag.watch.sampled import Sample, SampleWatcher
from tests.analyze.factories import RankWriter
from tests.util import REPO, run

RATE = r"(\d+(?:\.\d+)?) samples/s"
PLAIN = str(REPO / "tests" / "programs" / "plain_ddp.py")


# --- the command line ---------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--metric", "(", "--", "train.py"], "'(' is not a regular expression"),
    (["--metric", "x*", "--", "train.py"], "matches the empty string"),
    (["--"], "-- must be followed by your training command"),
    (["--mode", "zero2", "--", "train.py"], "--mode is the reference trainer's option"),
    (["--width", "128", "--", "train.py"], "--width is the reference trainer's option"),
    (["train.py"], "put your training command after --"),
    (["--metric", RATE], "--metric reads the output of your own command"),
])
def test_command_usage_errors_exit_2_before_anything_runs(tmp_path, args, message):
    out = tmp_path / "st"
    res = CliRunner().invoke(main, ["scale-test", "--out", str(out), "--dry-run", *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert not out.exists()


def test_dry_run_launches_the_command_with_torchrun_and_the_stage_dir(tmp_path):
    out = tmp_path / "st"
    res = CliRunner().invoke(main, ["scale-test", "--stages", "1,2", "--out", str(out),
                                    "--no-check-env", "--dry-run", "--json", "--",
                                    "train.py", "--steps", "5"])
    assert res.exit_code == 0, res.output
    stages = json.loads(res.output)["stages"]
    assert [[c["name"] for c in s["commands"]] for s in stages] == \
        [["command"], ["probes", "command"]]
    argv = stages[1]["commands"][-1]["argv"]
    assert "--nproc-per-node=2" in argv and argv[-3:] == ["train.py", "--steps", "5"]
    text = CliRunner().invoke(main, ["scale-test", "--stages", "1", "--out", str(out),
                                     "--dry-run", "--no-check-env", "--", "train.py"]).output
    assert f"DDIAG_RUN_DIR={out.resolve()}/stage-1" in text
    slurm = json.loads(CliRunner().invoke(main, [
        "scale-test", "--launcher", "slurm", "--stages", "1,2", "--out", str(out),
        "--metric", RATE, "--dry-run", "--json", "--", "train.py", "--steps", "5"]).output)
    # the sbatch script (and salloc) run this scale test again: the command stays last
    assert slurm["command"][-6:] == ["--out", str(out.resolve()), "--", "train.py",
                                     "--steps", "5"] and RATE in slurm["command"]


def test_a_program_that_is_no_script_runs_with_no_python():
    for program, tail in [(("train.py", "--lr", "1"), ["train.py", "--lr", "1"]),
                          (("-m", "pkg.train"), ["-m", "pkg.train"]),
                          (("python", "train.py"), ["--no-python", "python", "train.py"])]:
        argv, _ = local_command(LaunchSpec("local", 1, 2, program=program), None, ())
        assert argv[-len(tail):] == tail and "-m" not in argv[5:-len(tail)]
    srun = slurm_command(LaunchSpec("slurm", 2, 4, master_port=29600,
                                    program=("train.py", "--out", "/a b")), None, ())
    assert srun[-1].endswith("--master-addr=\"$MASTER\" train.py --out '/a b'")


# --- throughput -----------------------------------------------------------------------

def test_metric_takes_group_one_or_the_whole_match_after_the_warm_up():
    text = "\n".join([f"step {i} loss 0.1 {r} samples/s" for i, r in
                      enumerate([10.0, 20.0, 100.0, 110.0, 120.0])] + ["done"])
    values = throughput.metric_values(text, throughput.compile_metric(RATE))
    assert values == [10.0, 20.0, 100.0, 110.0, 120.0]
    assert throughput.metric_rate(values) == 105.0  # 10 (the first 20%) left out
    whole = throughput.compile_metric(r"\d+\.\d+(?= it/s)")
    assert throughput.metric_values("3.5 it/s, 4.5 it/s, x it/s", whole) == [3.5, 4.5]
    assert throughput.metric_rate([]) is None
    assert throughput.metric_values("ips=abc", throughput.compile_metric(r"ips=(\w+)")) == []


def test_wall_throughput_is_ranks_times_steps_over_seconds():
    assert throughput.wall_rate(4, 60, 20.0) == 12.0
    m = throughput.from_wall(4, 60, 20.0)
    assert (m.samples_per_s, m.source, m.unit) == (12.0, "wall", "rank-steps/s")
    assert throughput.from_wall(4, 60, 20.0, work_ranks=1).samples_per_s == 3.0  # strong
    assert throughput.wall_rate(2, 60, 0.0) is None


def _stage(tmp_path: Path, out: str, ok: bool = True, seconds: float = 10.0) -> StageRun:
    run = StageRun(2, 2, tmp_path / "stage-2")
    (run.run_dir / "logs").mkdir(parents=True)
    (run.run_dir / "logs" / "command.out").write_text(out)
    run.steps.append(StepOutcome("command", ok, seconds))
    return run


def test_sources_in_order_events_then_metric_then_wall(tmp_path):
    cfg = ScaleTestConfig(out=tmp_path, stages=(1, 2), command=("t.py",), metric=RATE,
                          steps=50)
    run = _stage(tmp_path, "".join(f"{r} samples/s\n" for r in (50, 90, 100, 110, 120)))
    assert (_measure(run, cfg, 2).source, _measure(run, cfg, 2).samples_per_s) == \
        ("metric", 105.0)
    wall = ScaleTestConfig(out=tmp_path, stages=(1, 2), command=("t.py",), steps=50)
    assert (_measure(run, wall, 2).source, _measure(run, wall, 2).samples_per_s) == \
        ("wall", 10.0)
    for rank in range(2):
        w = RankWriter(run.run_dir, rank, 2)
        for _ in range(15):
            w.step_rec(dur=0.25)
        w.write()
    m = _measure(run, cfg, 2)
    assert (m.source, m.unit, m.samples_per_s) == ("events", "rank-steps/s", 8.0)


def test_a_crashed_stage_has_no_wall_time_and_a_metric_without_match_none(tmp_path):
    wall = ScaleTestConfig(out=tmp_path, stages=(1, 2), command=("t.py",))
    assert _measure(_stage(tmp_path, "", ok=False), wall, 2) is None
    cfg = ScaleTestConfig(out=tmp_path, stages=(1, 2), command=("t.py",), metric=RATE)
    assert _measure(_stage(tmp_path / "b", "loss 0.1\n"), cfg, 2) is None


# --- the straggler in stack samples ---------------------------------------------------

BACKWARD = Frame("_engine_run_backward", "/v/site-packages/torch/autograd/graph.py", 979)
ALL_REDUCE = Frame("all_reduce", "/v/site-packages/torch/distributed/distributed_c10d.py", 9)
LOADER = Frame("_try_get_data", "/v/site-packages/torch/utils/data/dataloader.py", 1291)


def _user(line: int) -> Frame:
    return Frame("main", "/home/u/train.py", line)


def _round(busy: dict[int, Frame], world: int = 4) -> dict[int, Stack]:
    """Every rank waits in backward, except the ones given, which are where they say."""
    return {r: Stack(r, (busy[r], _user(70)) if r in busy else (BACKWARD, _user(60)))
            for r in range(world)}


def test_the_rank_busy_while_the_others_wait_is_the_straggler():
    tally = BusyTally()
    tally.add({r: Stack(r, (_user(5),)) for r in range(4)})  # importing: nobody waits
    for _ in range(5):
        tally.add(_round({2: LOADER}))
    tally.add({r: Stack(r, (_user(67),)) for r in range(4)})  # every rank busy together
    found = straggler(tally, "stage-4/stack-samples.json")
    assert found is not None and found.category is Category.STRAGGLER
    assert found.culprit.ranks == (2,)
    assert "rank 2 is the straggler" in found.title and "5 of 6" in found.title
    assert "_try_get_data" in found.title and "_engine_run_backward" in found.title
    assert found.evidence[0].file == "stage-4/stack-samples.json"
    assert tally.to_json()["busy_while_others_waited"] == {"2": 5}


def test_ranks_in_step_that_wait_for_jitter_name_no_straggler():
    tally = BusyTally()
    for i in range(12):  # mostly all busy; now and then one waits for the other, either side
        busy = {0: _user(67), 1: _user(67)} if i % 3 else {i % 2: _user(67)}
        tally.add({r: Stack(r, (busy[r],) if r in busy else (ALL_REDUCE, _user(60)))
                   for r in range(2)})
    assert straggler(tally, "s.json") is None
    now_and_then = BusyTally()
    for i in range(40):  # a long run; rank 0 logs now and then while rank 1 waits
        busy = {0: _user(80)} if i % 13 == 5 else {0: _user(67), 1: _user(67)}
        now_and_then.add({r: Stack(r, (busy[r],) if r in busy else (ALL_REDUCE, _user(60)))
                          for r in range(2)})
    assert now_and_then.busy[0] == 3 and now_and_then.waits == 3
    assert straggler(now_and_then, "s.json") is None  # 3 of 3 waits, but 3 of 35 rounds
    short = BusyTally()
    for _ in range(2):  # two rounds are not enough, even at 2 of 2
        short.add(_round({1: _user(67)}, world=2))
    assert straggler(short, "s.json") is None


def test_a_round_with_an_unread_stack_is_left_out():
    tally = BusyTally()
    for _ in range(5):
        tally.add({**_round({1: _user(67)}, world=3), 2: None})
    assert tally.rounds == 0 and straggler(tally, "s.json") is None


def test_output_that_grows_keeps_the_sampled_watcher_from_calling_a_hang():
    still = {0: Sample(Stack(0, (BACKWARD, _user(60))), 1.0),
             1: Sample(Stack(1, (_user(67),)), 1.0)}
    w = SampleWatcher(stall_s=10)
    assert w.observe(still, 0.0) is None
    w.reset()  # the job printed a line
    assert w.observe(still, 8.0) is None and w.observe(still, 15.0) is None
    assert w.observe(still, 18.5) is not None


# --- the reports ----------------------------------------------------------------------

def test_reports_say_which_source_each_stage_came_from(tmp_path):
    from diag.report.scale_test_html import render_scale_test_html
    from diag.report.terminal import render_scale_test
    from rich.console import Console
    import io

    cfg = ScaleTestConfig(out=tmp_path, stages=(1, 2), command=("train.py",), steps=60)
    r = ScaleTestResult(cfg, stages=[StageRun(n, n, tmp_path / f"stage-{n}") for n in (1, 2)],
                        metrics=[throughput.from_wall(n, 60, 10.0 * n) for n in (1, 2)],
                        efficiency=[1.0, 0.5], verdict="v")
    doc = r.to_json()
    assert doc["mode"] is None and doc["command"] == ["train.py"]
    assert [s["throughput_source"] for s in doc["results"]] == ["wall", "wall"]
    assert doc["assumption"] == throughput.WEAK_ASSUMPTION
    buf = io.StringIO()
    render_scale_test(r, Console(file=buf, width=200))
    assert "source" in buf.getvalue() and throughput.WEAK_ASSUMPTION in buf.getvalue()
    html = render_scale_test_html(r)
    assert "<td>wall</td>" in html and throughput.WEAK_ASSUMPTION in html


# --- real runs ------------------------------------------------------------------------

def _scale_test(tmp_path: Path, name: str, *script_args: str, steps: int = 60) -> dict:
    out = tmp_path / name
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--stages", "1,2",
               "--no-probes", "--no-check-env", "--out", str(out), "--json",
               "--metric", RATE, "--", PLAIN, "--steps", str(steps), "--step-ms", "20",
               *script_args], timeout=200)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert _started_in(out) == []
    return json.loads(res.stdout)


def _started_in(out: Path) -> list[int]:
    """Live processes whose DDIAG_RUN_DIR lies in ``out``: the stages' ranks, had any
    outlived its stage."""
    mark = f"DDIAG_RUN_DIR={out.resolve()}/".encode()
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "environ").read_bytes():
                left.append(int(proc.name))
        except OSError:
            continue
    return left


@pytest.mark.slow
def test_scale_test_of_a_plain_ddp_script(tmp_path):
    doc = _scale_test(tmp_path, "healthy")
    assert doc["command"][0] == PLAIN and doc["throughput_sources"] == ["metric"]
    for r in doc["results"]:
        assert r["status"] == "ok" and r["throughput_source"] == "metric", r
        assert r["metrics"]["samples_per_s"] > 0
    # efficiency 0.84-0.87 alone on this 2-core machine; with the slow rank 0.15. Other
    # load on the cores may push it under the cliff's 20%, so the test asks only that it
    # stays well above the slow run's and that no rank is named a straggler
    assert doc["verdict"] and doc["results"][1]["efficiency"] > 0.5, doc["verdict"]
    assert not [f for r in doc["results"] for f in r["findings"]
                if f["category"] == "straggler"], doc["verdict"]


@pytest.mark.slow
def test_a_slow_rank_is_the_cliff_and_the_verdict_names_it(tmp_path):
    # 80 steps of 170 ms on rank 1: about 7 rounds of stack samples (one each 2 s)
    doc = _scale_test(tmp_path, "slow", "--slow-rank", "1", "--slow-ms", "150", steps=80)
    assert doc["cliff_stage"] == 2 and not doc["healthy"]
    stage2 = doc["results"][1]
    assert stage2["efficiency"] < 0.5
    top = stage2["findings"][0]
    assert top["category"] == "straggler" and top["culprit"]["ranks"] == [1], top
    assert "rank 1 is the straggler" in doc["verdict"]
    samples = json.loads((Path(stage2["run_dir"]) / "stack-samples.json").read_text())
    assert samples["format"] == "ddiag.stack_samples"
    assert samples["busy_while_others_waited"]["1"] >= 3
