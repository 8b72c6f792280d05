"""scale-test: config validation, metrics and cliff logic on factories, and one real
local run end to end."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from diag.scaletest.config import ScaleTestConfig, default_stages
from diag.scaletest.measure import StageMetrics, efficiencies, falls, stage_metrics
from tests.analyze.factories import RankWriter
from diag.format.events import read_run_events
from tests.util import pids_alive, run


def test_default_local_stages_stop_at_the_core_count():
    assert default_stages("local", cores=2) == (1, 2)
    assert default_stages("local", cores=8) == (1, 2, 4, 8)
    assert default_stages("slurm") == (1, 2, 4)


@pytest.mark.parametrize("kwargs, message", [
    ({"stages": (2, 1)}, "increasing"),
    ({"stages": (1, 2), "mode": "fsdp"}, "--mode must be one of"),
    ({"stages": (1, 2), "steps": 3}, "--steps must be >= 10"),
    ({"stages": (1, 2), "mode": "pipeline"}, "start --stages at 2"),
])
def test_bad_config_names_the_option_and_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScaleTestConfig(out=Path("x"), **kwargs)


def metrics(world: int, samples: float) -> StageMetrics:
    return StageMetrics(world, 20, 0.1, 0.1, 0.1, samples, 0.8, 0.1, 0.1, {})


def test_efficiency_and_cliff():
    effs = efficiencies([metrics(1, 100.0), metrics(2, 190.0), metrics(4, 180.0)])
    assert effs == [1.0, 0.95, 0.45]
    assert falls(effs, drop=0.2) == [(1, 2)]
    assert falls([1.0, 0.95, 0.9], drop=0.2) == []
    assert falls([1.0, None, 0.7, 0.4], drop=0.2) == [(0, 2), (2, 3)]  # unmeasured skipped


def test_stage_metrics_skip_warmup_and_split_time(tmp_path):
    for rank in range(2):
        w = RankWriter(tmp_path, rank, 2)
        for step in range(15):
            w.step_rec(dur=1.0 if step < 5 else 0.2, phases={"data": 0.02},
                       comm_s=0.05)
        w.write()
    logs, _ = read_run_events(tmp_path)
    m = stage_metrics(logs, world_size=2, global_batch=16)
    assert m.steps_measured == 10 and m.step_p50_s == 0.2
    assert m.samples_per_s == 80.0
    assert (m.data_share, m.comm_share, m.compute_share) == (0.1, 0.25, 0.65)
    assert m.per_rank_p50_s == m.per_rank_p95_s == {"0": 0.2, "1": 0.2}


@pytest.mark.slow
def test_local_scale_test_end_to_end(local_run):
    out, res = local_run.out, local_run.res
    assert res.returncode in (0, 1), res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["format"] == "ddiag.scale_test" and [r["stage"] for r in doc["results"]] == [1, 2]
    assert doc["launcher"] == "local" and doc["slurm_job_id"] is None
    assert doc["efficiency_basis"] == "raw"  # --no-probes: no compute reading to normalise by
    for r in doc["results"]:
        assert r["status"] == "ok", r
        assert r["metrics"]["samples_per_s"] > 0 and r["efficiency"] > 0
        assert r["efficiency_normalised"] is None and r["compute_tflops"] is None
        assert set(r["metrics"]["per_rank_p95_s"]) == {str(i) for i in range(r["world_size"])}
        assert (Path(r["run_dir"]) / "events" / "rank00000.jsonl").exists()
        assert (Path(r["run_dir"]) / "fr" / "rank00000.json").exists()
        # from check-env's snapshots: all ranks on this host, on the cores they may use
        assert r["busiest_node"]["ranks"] == r["world_size"]
        assert r["busiest_node"]["cores"] == len(os.sched_getaffinity(0))
    assert json.loads((out / "scale-test.json").read_text())["verdict"] == doc["verdict"]
    pids = [json.loads(p.read_text())["pid"] for p in out.glob("stage-*/heartbeat/*.json")]
    assert len(pids) == 3 and pids_alive(pids) == []
    # Not on a terminal: the plain status lines, not the live display.
    assert "ddiag scale-test: stage 2: training ddp on 2 rank(s)" in res.stderr


def test_refuses_to_overwrite_a_run(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--out", str(tmp_path)], timeout=60)
    assert res.returncode == 2 and "never overwrites" in res.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_a_fault_applies_from_the_stage_where_its_rank_exists():
    from diag.scaletest.stage import injections_for

    specs = ("slow_compute:rank=3:arg=0.2", "hang:rank=1:step=4")
    assert injections_for(specs, 2) == ["hang:rank=1:step=4"]
    assert injections_for(specs, 4) == list(specs)


def test_the_wait_for_ddp_buckets_counts_as_communication(tmp_path):
    for rank in range(2):
        w = RankWriter(tmp_path, rank, 2)
        for _ in range(15):  # launches take 0.01 s, the wait after backward 0.04 s
            w.step_rec(dur=0.2, phases={"data": 0.02}, comm_s=0.01, comm_wait_s=0.04)
        w.write()
    logs, _ = read_run_events(tmp_path)
    m = stage_metrics(logs, world_size=2, global_batch=16)
    assert (m.data_share, m.comm_share, m.compute_share) == (0.1, 0.25, 0.65)


@pytest.mark.slow
def test_a_stage_the_watcher_ends_leaves_a_kill_marker_analyze_reads(tmp_path):
    # the scale test ends a hung stage: its killed.json makes what the dying job printed
    # (SIGTERM, torchrun's ChildFailedError) symptoms, the hang the root cause
    out = tmp_path / "st"
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--stages", "2", "--steps", "30",
               "--inject", "hang:rank=1:step=6", "--stall", "8", "--stage-timeout", "120",
               "--no-probes", "--out", str(out), "--json"], timeout=400)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    stage = next(out.glob("stage-*/"))
    marker = json.loads((stage / "killed.json").read_text())
    assert marker["format"] == "ddiag.watch_kill" and marker["by"] == "ddiag scale-test"
    assert marker["t"] <= marker["ended_at"]
    from diag.analyze import analyze
    found = analyze(stage).findings
    roots = [f for f in found if f.root_cause and f.severity.value > 0]
    assert [f.category.value for f in roots] == ["rank_hang"], [
        (f.category.value, f.title) for f in found[:5]]
    assert roots[0].culprit.ranks == (1,)


def test_a_rank_that_dies_in_teardown_after_training_keeps_the_stage(tmp_path):
    # the lab saw gloo abort one rank at exit ("terminate called without an active
    # exception") after every rank had closed its event log: the stage's figures stand
    from types import SimpleNamespace

    from diag.scaletest.stage import _trainer_outcome

    (tmp_path / "logs").mkdir()
    (tmp_path / "events").mkdir()
    (tmp_path / "logs" / "trainer.out").write_text('{"steps": 15, "throughput": 1.0}\n')
    (tmp_path / "logs" / "trainer.err").write_text(
        "terminate called without an active exception\n")
    for rank in (0, 1):
        (tmp_path / "events" / f"rank{rank:05d}.jsonl").write_text(
            '{"kind":"step","rank":%d,"step":14}\n{"kind":"close","rank":%d,"step":14}\n'
            % (rank, rank))
    died = SimpleNamespace(returncode=-6)
    outcome = _trainer_outcome("trainer", died, tmp_path, 9.0, False, {})
    assert outcome.ok and "teardown" in outcome.detail and "terminate called" in outcome.detail
    # a rank that never closed: it died in training, the stage failed
    (tmp_path / "events" / "rank00001.jsonl").write_text('{"kind":"step","rank":1,"step":9}\n')
    assert not _trainer_outcome("trainer", died, tmp_path, 9.0, False, {}).ok
