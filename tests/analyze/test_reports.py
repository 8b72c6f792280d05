"""The HTML report renders in a real headless Chromium; the trace is valid trace-event
JSON with every rank's steps and collectives."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from diag.analyze import analyze
from diag.report.trace import build_trace
from tests.analyze.test_detectors import healthy

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def straggler_run(tmp_path):
    run = tmp_path / "run"
    for w in healthy(run, steps=30, late={1: 0.03}):
        w.close().write()
    return run


def test_trace_has_every_rank_step_and_collective(tmp_path):
    run = straggler_run(tmp_path)
    trace = build_trace(analyze(run).inputs)
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {f"rank {r} @ node{r // 2 + 1}" for r in range(4)}
    steps = [e for e in events if e.get("cat") == "step"]
    colls = [e for e in events if e.get("cat") == "collective"]
    assert len(steps) == len(colls) == 4 * 30
    late = [e["ts"] for e in colls if e["pid"] == 1]
    early = [e["ts"] for e in colls if e["pid"] == 0]
    assert all(a - b == pytest.approx(30_000, abs=1) for a, b in zip(late, early))
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in steps)


def test_cli_writes_trace_and_html_and_never_overwrites(tmp_path):
    run = straggler_run(tmp_path)
    html, trace = tmp_path / "r.html", tmp_path / "t.json"
    cmd = [sys.executable, "-m", "diag.cli", "analyze", str(run), "--json",
           "--html", str(html), "--trace", str(trace)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr  # findings -> 1
    assert json.loads(res.stdout)["findings"][0]["category"] == "straggler"
    assert json.loads(trace.read_text())["traceEvents"]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists" in again.stderr


@pytest.mark.skipif(shutil.which("chromium") is None and os.environ.get("CI") != "true",
                    reason="needs Debian's chromium (make test installs it as root)")
def test_html_report_renders_offline_in_headless_chromium(tmp_path):
    run = straggler_run(tmp_path)
    html = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "diag.cli", "analyze", str(run), "--html", str(html)],
                   capture_output=True, timeout=60)
    page = html.read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page
    profile = tmp_path / "profile"
    base = ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*base, "--dump-dom", html.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert "rank 1 is a compute straggler" in dom
    assert dom.count("<rect") >= 4 * 30 + 4  # heat map cells and progress bars
    shot = tmp_path / "shot.png"
    subprocess.run([*base, "--window-size=1200,900", f"--screenshot={shot}", html.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
