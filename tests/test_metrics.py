"""Prometheus metrics from real ranks, scraped by a real Prometheus server, and the
Grafana dashboard checked against what that scrape holds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
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
