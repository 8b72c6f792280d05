"""The probes on real gloo ranks on this machine, through torchrun and the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.util import quiet_env, run, torchrun_cmd

LINKS_JOB = Path(__file__).with_name("links_job.py")


def ddiag_probe(*args: str) -> list[str]:
    return [sys.executable, "-m", "diag.cli", "probe", *args]


@pytest.mark.slow
def test_links_three_ranks_measure_all_six_directions():
    """Three "nodes": an odd count, so every round has a bye."""
    res = run(torchrun_cmd(3, LINKS_JOB), timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    [doc] = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert doc["nodes"] == ["n0", "n1", "n2"] and doc["backend"] == "gloo"
    assert sorted((x["src"], x["dst"]) for x in doc["links"]) == [
        ("n0", "n1"), ("n0", "n2"), ("n1", "n0"), ("n1", "n2"), ("n2", "n0"), ("n2", "n1")]
    assert all(x["gbit_per_s"] > 0 and x["latency_us"] > 0 and x["bytes"] >= 1 << 20
               for x in doc["links"])


@pytest.mark.slow
def test_suspect_links_are_measured_again_and_keep_the_better_reading():
    res = run(torchrun_cmd(2, LINKS_JOB), timeout=120, env=quiet_env(LINKS_SLOW_RATIO="10"))
    assert res.returncode == 0, res.stderr[-3000:]
    [doc] = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert sorted((x["src"], x["dst"]) for x in doc["links"]) == [("n0", "n1"), ("n1", "n0")]
    assert all(x["slow"] and x["gbit_per_s"] > 0 for x in doc["links"])


@pytest.mark.slow
def test_collectives_sweep_through_the_cli(tmp_path):
    res = run(ddiag_probe("collectives", "--launcher", "local", "--nproc-per-node", "2",
                          "--min-bytes", "4096", "--max-bytes", "65536", "--seconds", "0.02",
                          "--out", str(tmp_path), "--json"), timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc == json.loads((tmp_path / "probes" / "collectives.json").read_text())
    assert doc["format"] == "ddiag.probe_collectives" and doc["world_size"] == 2
    assert [(r["op"], r["size"]) for r in doc["rows"]] == [
        (op, size) for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
        for size in (4096, 16384, 65536)]
    factor = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "broadcast": 1.0}
    for r in doc["rows"]:
        assert r["time_us"] > 0 and r["max_time_us"] >= r["time_us"] and r["iters"] >= 1
        assert r["algbw"] == pytest.approx(r["size"] / (r["time_us"] * 1e-6) / 1e9)
        assert r["busbw"] == pytest.approx(r["algbw"] * factor[r["op"]])


@pytest.mark.slow
def test_compute_through_the_cli(tmp_path):
    res = run(ddiag_probe("compute", "--launcher", "local", "--nproc-per-node", "2",
                          "--size", "256", "--seconds", "0.2", "--out", str(tmp_path),
                          "--json"), timeout=120)
    assert res.returncode in (0, 1), res.stderr[-3000:]  # 1: a rank was flagged slow
    doc = json.loads(res.stdout)
    assert doc["format"] == "ddiag.probe_compute"
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert all(r["tflops"] > 0 and r["n"] == 256 for r in doc["ranks"])
    assert res.returncode == (1 if doc["slow_ranks"] else 0)


def test_links_needs_nodes_not_one_host(tmp_path):
    res = run(ddiag_probe("links", "--launcher", "local", "--nproc-per-node", "2",
                          "--out", str(tmp_path)), timeout=30)
    assert res.returncode == 2 and "between nodes" in res.stderr


def test_probe_outside_a_job_says_how_to_start_one():
    res = run(ddiag_probe("compute"), timeout=30)
    assert res.returncode == 2 and "--launcher local" in res.stderr


@pytest.mark.slow
def test_all_runs_collectives_and_compute_in_one_launch(tmp_path):
    """One host: no link to measure, the other two at their own commands' defaults, each
    written to its own file as if run alone."""
    res = run(ddiag_probe("all", "--launcher", "local", "--nproc-per-node", "2",
                          "--out", str(tmp_path), "--json"), timeout=180)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["format"] == "ddiag.probes" and sorted(doc["probes"]) == ["collectives", "compute"]
    assert doc["probes"]["compute"]["ranks"][0]["n"] == 1024  # probe compute's --size default
    sizes = {r["size"] for r in doc["probes"]["collectives"]["rows"]}
    assert min(sizes) == 4096 and max(sizes) == 4 << 20
    for name in ("collectives", "compute"):
        assert json.loads((tmp_path / "probes" / f"{name}.json").read_text()) == doc["probes"][name]
