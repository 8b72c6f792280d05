"""Prometheus metrics from real ranks, scraped by a real Prometheus server, and the
Grafana dashboard checked against what that scrape holds."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
import types
import urllib.parse
import urllib.request

import pytest

from tests.util import EXAMPLE, REPO, free_port, quiet_env, torchrun_cmd

DASHBOARD = REPO / "docs" / "grafana" / "ddiag-ranks.json"
needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None and os.environ.get("CI") != "true",
    reason="needs Debian's prometheus (make test installs it as root)")


def query(port: int, path: str, **params) -> dict:
    url = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def wait_for(fn, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.5)
    return None


@pytest.fixture
def training(tmp_path):
    base = free_port()
    while base + 1 == free_port():  # need base and base+1 (local ranks 0 and 1)
        base = free_port()
    env = quiet_env(DDIAG_METRICS="1", DDIAG_METRICS_PORT=str(base))
    job = subprocess.Popen(torchrun_cmd(2, EXAMPLE, "--out", str(tmp_path / "run"), "--steps",
                                        "2000", "--step-sleep", "0.02"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                           start_new_session=True)
    yield base
    os.killpg(job.pid, 15)
    job.wait(timeout=30)


@pytest.fixture
def prometheus(tmp_path, training):
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: ddiag\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{training}', '127.0.0.1:{training + 1}']}}]\n")
    proc = subprocess.Popen(["prometheus", f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield port
    proc.terminate()
    proc.wait(timeout=30)


@needs_prometheus
@pytest.mark.slow
def test_prometheus_scrapes_both_ranks_with_their_labels(prometheus):
    def two_ranks():
        res = query(prometheus, "/api/v1/query", query="ddiag_steps_total > 0")["data"]["result"]
        return res if len({r["metric"]["rank"] for r in res}) == 2 else None

    series = wait_for(two_ranks, timeout=60)
    assert series, "Prometheus never saw both ranks"
    assert {r["metric"]["rank"] for r in series} == {"0", "1"}
    assert {r["metric"]["local_rank"] for r in series} == {"0", "1"}
    assert all(float(r["value"][1]) > 0 for r in series)
    bytes_ = query(prometheus, "/api/v1/query", query="ddiag_collective_bytes_total")
    assert {r["metric"]["op"] for r in bytes_["data"]["result"]} >= {"all_reduce"}

    names = set(query(prometheus, "/api/v1/label/__name__/values")["data"])
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bddiag_[a-z_]+", e)}
    assert len(dashboard["panels"]) >= 10 and used
    assert used <= names, f"panels query metrics the exporter does not have: {used - names}"


def test_records_update_metrics_and_the_textfile(tmp_path):
    from prometheus_client import generate_latest

    from diag.runtime.metrics import RankMetrics, _write_textfile

    m = RankMetrics(rank=3, local_rank=1, host="node2", job="j")
    m.observe({"kind": "step", "step": 7, "dur_s": 0.25, "loss": "nan", "grad_norm": 2.0,
               "phases": {"data": 0.1}, "nonfinite": {"param": "w", "kind": "nan"}})
    m.observe({"kind": "collective", "op": "all_reduce", "dur_s": 0.01, "in_bytes": 4096})
    m.tick({})
    text = generate_latest(m.registry).decode()
    labels = 'host="node2",job="j",local_rank="1",rank="3"'
    assert f"ddiag_step_seconds{{{labels}}} 0.25" in text
    assert f"ddiag_nonfinite_steps_total{{{labels}}} 1.0" in text
    assert ('ddiag_collective_bytes_total{host="node2",job="j",local_rank="1",op="all_reduce",'
            'rank="3"} 4096.0') in text
    assert f"ddiag_gpu_memory_used_bytes{{{labels}}} NaN" in text  # no GPU here
    _write_textfile(m, tmp_path, 3)
    assert "ddiag_step 7.0" in (tmp_path / "ddiag_rank3.prom").read_text().replace(
        f"{{{labels}}}", "")


@pytest.mark.parametrize("taken", [True, False])
def test_a_taken_or_bad_port_is_named_with_its_variable_and_training_goes_on(
        tmp_path, monkeypatch, caplog, taken):
    import socket

    import diag
    from diag.runtime import instrument
    from diag.format.events import read_run_events

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    value = str(port) if taken else "94OO"
    monkeypatch.setenv("DDIAG_METRICS_PORT", value)
    monkeypatch.delenv("DDIAG_METRICS_TEXTFILE_DIR", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    instrument._reset()
    try:
        diag.init(tmp_path, metrics=True, collectives=False, signals=False)
        diag.log_step(lambda: 1.0)()
        diag.shutdown()
    finally:
        instrument._reset()
        holder.close()
    logs, _ = read_run_events(tmp_path)
    assert len(logs[0].of_kind("step")) == 1
    (warning,) = [r.getMessage() for r in caplog.records if "metrics" in r.getMessage()]
    assert f"DDIAG_METRICS_PORT={value}" in warning
    assert f"127.0.0.1:{port}" in warning if taken else "integer" in warning


# --- GPU gauges, with torch.cuda (and nvidia-ml-py) faked: there is no GPU here ----------

def _never(*_a, **_k):
    raise AssertionError("the metrics tick must not wait for the device")


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch.cuda as a rank that trains on 2 visible GPUs sees it; a sync fails the test."""
    import torch

    calls = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "memory_allocated",
                        lambda i: calls.append(("allocated", i)) or 3 << 30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda i: 5 << 30)
    monkeypatch.setattr(torch.cuda, "utilization", lambda i: calls.append(("util", i)) or 42)
    monkeypatch.setattr(torch.cuda, "synchronize", _never)
    monkeypatch.setattr(torch.cuda, "current_stream", _never)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return calls


def _gauges(m) -> dict:
    from prometheus_client import generate_latest

    text = generate_latest(m.registry).decode()
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("ddiag_gpu_")}


def test_gpu_gauges_come_from_torch_when_nvml_is_missing(fake_gpu, monkeypatch):
    import sys

    from diag.runtime.metrics import RankMetrics

    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    m = RankMetrics(rank=3, local_rank=1, host="node2", job="j")
    m.tick({})
    g = _gauges(m)
    assert g["ddiag_gpu_utilization_ratio"] == pytest.approx(0.42)
    assert g["ddiag_gpu_memory_allocated_bytes"] == 3 << 30
    assert g["ddiag_gpu_memory_max_reserved_bytes"] == 5 << 30
    assert math.isnan(g["ddiag_gpu_memory_used_bytes"])  # only NVML sees the whole device
    assert ("allocated", 1) in fake_gpu and ("util", 1) in fake_gpu  # local rank 1's GPU


class FakeNvml:
    """nvidia-ml-py's calls the reader makes; handles are what they were asked by."""

    def __init__(self) -> None:
        self.inits = 0

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        self.inits += 1

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return ("index", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        return ("uuid", uuid)

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: N802
        return types.SimpleNamespace(gpu=90 if h == ("index", 5) else 7)

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        return types.SimpleNamespace(used=70 << 30)


def test_gpu_gauges_come_from_nvml_for_the_visible_device(fake_gpu, monkeypatch):
    import sys

    from diag.runtime.metrics import RankMetrics

    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # CUDA's device 1 is NVML's 5
    m = RankMetrics(rank=1, local_rank=1, host="node0", job="j")
    m.tick({})
    m.tick({})
    g = _gauges(m)
    assert g["ddiag_gpu_utilization_ratio"] == pytest.approx(0.9)
    assert g["ddiag_gpu_memory_used_bytes"] == 70 << 30
    assert g["ddiag_gpu_memory_allocated_bytes"] == 3 << 30
    assert nvml.inits == 1 and not [c for c in fake_gpu if c[0] == "util"]


def test_nvml_finds_a_device_named_by_uuid(monkeypatch):
    from diag.runtime.gpustats import nvml_device

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa, GPU-bbbb")
    assert nvml_device(FakeNvml(), 1) == ("uuid", "GPU-bbbb")


def test_a_rank_without_cuda_started_reads_nothing(monkeypatch):
    """A CPU rank (or one before its first CUDA call): NaN, and CUDA is not started."""
    import torch

    from diag.runtime.metrics import RankMetrics

    for name in ("memory_allocated", "max_memory_reserved", "utilization", "device_count",
                 "synchronize", "init"):
        monkeypatch.setattr(torch.cuda, name, _never)
    m = RankMetrics(rank=0, local_rank=0, host="n", job="j")
    m.tick({})
    assert all(math.isnan(v) for v in _gauges(m).values()) and len(_gauges(m)) == 4
