"""benchmarks/gpu_overhead.py runs end to end on the CPU (gloo, float32) at a tiny size."""

from __future__ import annotations

import json
import sys

import torch

from diag.runtime import instrument


def test_gpu_overhead_benchmark_runs_on_cpu_and_reports_json(monkeypatch, capsys):
    from benchmarks import gpu_overhead

    monkeypatch.setattr(sys, "argv", [
        "gpu_overhead.py", "--cpu", "--rounds", "2", "--steps", "2", "--warmup", "1",
        "--width", "16", "--layers", "1", "--batch", "2", "--seq", "4", "--heads", "2",
        "--json"])
    threads = torch.get_num_threads()  # the benchmark takes one on CPU
    instrument._reset()
    try:
        gpu_overhead.main()
    finally:
        instrument._reset()
        torch.set_num_threads(threads)
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "gloo" and out["syncs_per_step"] == "n/a"
    assert set(out["ratio_vs_plain"]) == {"plain", "log_step", "log_step_model"}
    assert all(ms > 0 for ms in out["step_ms_median"].values())
    assert out["records_written"] > 0 and out["records_dropped"] == 0
