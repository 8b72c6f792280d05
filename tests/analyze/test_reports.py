"""The HTML report renders in a real headless Chromium; the trace is valid trace-event
JSON with every rank's steps and collectives. Hostile values in the inputs (a header's
host, a probe's node names, file names) stay text: no script runs. Output paths are
created new: never an existing file, never through a symlink, never twice."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from diag.format import schema
from diag.analyze import analyze
from diag.checkenv.report import run_local
from diag.report.html import render_html
from diag.report.trace import build_trace
from tests.analyze.factories import T0, RankWriter
from tests.analyze.test_detectors import healthy
from tests.checkenv.factories import snap

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
NEEDS_CHROMIUM = pytest.mark.skipif(
    shutil.which("chromium") is None and os.environ.get("CI") != "true",
    reason="needs Debian's chromium (make test installs it as root)")

HOSTILE = ("</title></style>\"'><script>document.title='PWNED'</script>"
           "<img src=x onerror=\"document.title='PWNED'\">")
"""Breaks out of text, a <title>, a <style> and a quoted attribute, then runs script."""
HOSTILE_NAME = "\"'><svg onload=document.title='PWNED'><img src=x onerror=document.title='PWNED'>"
"""The same without a slash, for file and folder names."""


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


@NEEDS_CHROMIUM
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


def hostile_run(tmp_path: Path) -> tuple[Path, list[str]]:
    """A run directory whose every value that reaches the report is hostile, and the
    texts the page must show: event logs (host, group, exception), a links probe (node
    names), an env snapshot (values, check results, ranks as strings), a text log and a
    binary file with hostile names."""
    run = tmp_path / f"run{HOSTILE_NAME}"
    for rank in (0, 1):
        w = RankWriter(run, rank, 2, host=f"host{rank}{HOSTILE}")
        for s in range(8):
            w.step_rec(t=T0 + s * 0.1 + 0.09, dur=0.1 + 0.05 * rank)
            w.coll(t=T0 + s * 0.1 + 0.05, group=f"group{HOSTILE}")
        if rank == 1:
            w.exception(f"Type{HOSTILE}", f"message{HOSTILE}", T0 + 1)
        w.close().write()
    _write_json(run / "probes" / "links.json", {
        **schema.stamp(schema.PROBE_LINKS), "median_gbit_per_s": 10.0, "slow_nodes": [],
        "links": [{"src": f"src{HOSTILE}", "dst": f"dst{HOSTILE}", "gbit_per_s": 0.1,
                   "slow": True}]})
    _write_json(run / "env" / "rank00000.json", hostile_snapshot())
    (run / f"oom{HOSTILE_NAME}.log").write_text(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate oom{HOSTILE}\n")
    (run / f"binary{HOSTILE_NAME}.dat").write_bytes(b"\x00\x01 not a format ddiag reads")
    shown = [f"{field}{HOSTILE}" for field in (
        "host1", "group", "Type", "message", "src", "dst", "check", "summary", "fix",
        "rank", "node", "VAR", "ifname", "oom")]
    shown += [f"binary{HOSTILE_NAME}.dat", f"run{HOSTILE_NAME}"]
    return run, shown


def hostile_snapshot() -> dict:
    """A rank's check-env snapshot: its checks ran on a hostile variable's value, and one
    result (as a newer or tampered writer might leave it) is hostile in every field."""
    rank0 = snap(0, env_extra={"NCCL_SOCKET_IFNAME": f"ifname{HOSTILE}"})
    doc = dataclasses.replace(rank0, results=run_local(rank0.facts)).to_json()
    doc["results"].append({
        "check": f"check{HOSTILE}", "status": "fail", "summary": f"summary{HOSTILE}",
        "fix": f"fix{HOSTILE}", "evidence": [f"evidence{HOSTILE}"], "ranks": [f"rank{HOSTILE}"],
        "nodes": [f"node{HOSTILE}"], "env_var": f"VAR{HOSTILE}", "category": "env_misconfig"})
    return doc


def _write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


class Dom(HTMLParser):
    """What a page holds that could run: script elements and event-handler attributes;
    its first <title> (the document's) and the text a reader sees."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.scripts, self.handlers, self.title, self.chunks = 0, [], None, []
        self._in_title = False
        self.feed(page)
        self.close()
        self.text = "".join(self.chunks)

    def handle_starttag(self, tag, attrs):
        self.scripts += tag == "script"
        self.handlers += [f"<{tag} {name}>" for name, _ in attrs if name.lower().startswith("on")]
        self._in_title = tag == "title" and self.title is None

    def handle_endtag(self, tag):
        if self._in_title:
            self.title = self.title or ""
        self._in_title = False

    def handle_data(self, data):
        self.chunks.append(data)
        if self._in_title:
            self.title = (self.title or "") + data


def chromium_dom(page: Path, tmp_path: Path) -> Dom:
    """The DOM headless Chromium built from ``page``, after its scripts (if any) ran."""
    res = subprocess.run(["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert "<body" in res.stdout, res.stderr[-2000:]
    return Dom(res.stdout)


def assert_inert(dom: Dom, title: str, shown: list[str]) -> None:
    assert dom.scripts == 0 and dom.handlers == []
    assert dom.title == title  # not PWNED: no script ran
    missing = [s for s in shown if s not in dom.text]
    assert not missing, f"hostile values not shown as text: {missing}"


def test_hostile_values_are_text_in_the_page_source(tmp_path):
    run, shown = hostile_run(tmp_path)
    result = analyze(run)
    assert_inert(Dom(render_html(result, result.inputs)), f"ddiag: {run}", shown)


@NEEDS_CHROMIUM
def test_hostile_values_run_no_script_in_chromium(tmp_path):
    run, shown = hostile_run(tmp_path)
    result = analyze(run)
    page = tmp_path / "report.html"
    page.write_text(render_html(result, result.inputs))
    assert_inert(chromium_dom(page, tmp_path), f"ddiag: {run}", shown)


@NEEDS_CHROMIUM
def test_cli_report_of_hostile_inputs_runs_no_script_in_chromium(tmp_path):
    run, shown = hostile_run(tmp_path)
    page = tmp_path / "report.html"
    res = subprocess.run([sys.executable, "-m", "diag.cli", "analyze", str(run), "--json",
                          "--html", str(page)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr[-2000:]
    hosts = {h for f in json.loads(res.stdout)["findings"] for h in f["culprit"]["hosts"]}
    assert {f"host1{HOSTILE}", f"src{HOSTILE}"} <= hosts
    assert_inert(chromium_dom(page, tmp_path), f"ddiag: {run}", shown)


def analyze_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diag.cli", "analyze", *args],
                          capture_output=True, text=True, timeout=60)


def test_the_same_path_for_html_and_trace_is_refused(tmp_path):
    run = straggler_run(tmp_path)
    (tmp_path / "sub").mkdir()
    same = tmp_path / "out.html"
    res = analyze_cli(str(run), "--html", str(same), "--trace", str(tmp_path / "sub/../out.html"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--html" in res.stderr and "--trace" in res.stderr
    assert not same.exists()


def test_a_dangling_symlink_is_refused_and_its_target_not_created(tmp_path):
    run = straggler_run(tmp_path)
    link, target = tmp_path / "report.html", tmp_path / "elsewhere.html"
    link.symlink_to(target)
    res = analyze_cli(str(run), "--html", str(link))
    assert res.returncode == 2 and str(link) in res.stderr
    assert "symlink" in res.stderr.replace(str(tmp_path), "")
    assert not target.exists() and link.is_symlink()


def test_a_symlink_to_a_file_is_not_followed(tmp_path):
    run = straggler_run(tmp_path)
    link, target = tmp_path / "trace.json", tmp_path / "mine.json"
    target.write_text("mine")
    link.symlink_to(target)
    res = analyze_cli(str(run), "--trace", str(link))
    assert res.returncode == 2 and "symlink" in res.stderr.replace(str(tmp_path), "")
    assert target.read_text() == "mine"


def test_an_output_in_a_missing_folder_fails_before_the_analysis(tmp_path):
    run = straggler_run(tmp_path)
    html, trace = tmp_path / "report.html", tmp_path / "missing-dir" / "trace.json"
    res = analyze_cli(str(run), "--json", "--html", str(html), "--trace", str(trace))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert str(tmp_path / "missing-dir") in res.stderr and "--trace" in res.stderr
    assert res.stdout == "" and not html.exists()  # nothing analysed, nothing written
