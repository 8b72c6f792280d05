"""Text quoted from logs reaches a terminal inert: no escape sequence, no rich markup.

Every terminal renderer is fed values that carry an OSC 52 clipboard write, a title
change, a raw C1 CSI and rich markup, and renders with colour off to a string: what comes
out must hold no control character but the renderer's own newlines, and the markup must
show as the literal text it was in the log.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from diag.analyze import Analysis
from diag.verdict import Category, Culprit, Evidence, Finding, Severity, Status
from diag.report.checkenv import render as render_check_env
from diag.checkenv.report import Report
from diag.checkenv.types import CheckResult
from diag.format.events import Problem
from diag.report.terminal import plain, render_analysis, render_summary, render_watch
from diag.analyze.summary import RankSummary, RunSummary
from diag.watch.decide import Alarm
from diag.watch.capture import Capture
from diag.watch.loop import WatchResult
from diag.report.probes import render as render_probe

HOSTILE = "a\x1b]52;c;cHduZWQ=\x07b\x1b]0;title\x07c\x9b31md[red]x[/red][link=http://e]y[/link]\r\n"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def console() -> Console:
    return Console(file=io.StringIO(), width=400, color_system=None, force_terminal=True)


def assert_inert(out: Console) -> None:
    text = out.file.getvalue()
    assert not CONTROL.search(text), repr(CONTROL.findall(text))
    assert "[red]x[/red]" in text  # shown as it was in the log, not applied
    assert "[link=http://e]y[/link]" in text


def finding() -> Finding:
    return Finding(Category.RANK_HANG, Severity.CRITICAL, 0.9, f"title {HOSTILE}",
                   Culprit(ranks=(1,), hosts=(f"node{HOSTILE}",), link=("a", HOSTILE),
                           env_var=HOSTILE),
                   (Evidence(f"log{HOSTILE}.txt", 3, HOSTILE),), f"fix {HOSTILE}", "d")


def analysis() -> Analysis:
    return Analysis(f"run{HOSTILE}", [finding()], [Problem(f"f{HOSTILE}", 1, HOSTILE)], {},
                    [], 0.1)


def test_plain_keeps_tab_and_drops_every_other_control_character():
    assert plain("a\tb\x1b]0;t\x07c\x9bd\x00e\x7ff") == "a\tb]0;tcdef"
    assert plain("one\r\ntwo\nthree") == "one two three"
    assert plain(None) == "None"


def test_analysis_renders_quoted_log_text_inert():
    out = console()
    render_analysis(analysis(), out)
    assert_inert(out)


def test_summary_renders_hosts_and_problems_inert():
    rank = RankSummary(0, f"node{HOSTILE}", 1, 3, 2, 1, 0.1, 4, {HOSTILE: 3}, None, None, 0, 0)
    summary = RunSummary(f"run{HOSTILE}", HOSTILE, 1, [rank], [],
                         [Problem(f"f{HOSTILE}", 2, HOSTILE)])
    out = console()
    render_summary(summary, out)
    assert_inert(out)


def test_watch_renders_capture_errors_and_its_analysis_inert():
    alarm = Alarm((1,), (0,), (), 1.0, 2.0, f"reason {HOSTILE}", {})
    result = WatchResult(f"run{HOSTILE}", alarm,
                         [Capture(1, None, HOSTILE), Capture(0, Path(f"s{HOSTILE}"), None)],
                         analysis=analysis(), ended="hang detected")
    out = console()
    render_watch(result, out)
    assert_inert(out)


def test_check_env_renders_results_nodes_and_problems_inert():
    result = CheckResult(f"check{HOSTILE}", Status.FAIL, f"summary {HOSTILE}", f"fix {HOSTILE}",
                         culprit=Culprit(ranks=(0,), hosts=(f"node{HOSTILE}",)))
    report = Report((result,), 1, {f"node{HOSTILE}": [0]}, problems=(HOSTILE,),
                    run_dir=f"run{HOSTILE}")
    out = console()
    render_check_env(report, console=out)
    assert_inert(out)


def test_probe_tables_render_node_names_inert():
    node = f"n{HOSTILE}"
    links = {"nodes": [node, "b"], "median_gbit_per_s": 1.0, "slow_ratio": 0.5,
             "slow_links": [[node, "b"]], "slow_nodes": [node], "backend": HOSTILE,
             "seconds": 1.0,
             "links": [{"src": node, "dst": "b", "gbit_per_s": 0.1, "slow": True,
                        "latency_us": 5.0},
                       {"src": "b", "dst": node, "gbit_per_s": 1.0, "slow": False,
                        "latency_us": 5.0}]}
    compute = {"dtype": HOSTILE, "median_tflops": 1.0, "slow_ratio": 0.5, "slow_ranks": [0],
               "ranks": [{"rank": 0, "node": node, "device": HOSTILE, "n": 8, "tflops": 0.5,
                          "slow": True}]}
    collectives = {"world_size": 2, "backend": HOSTILE,
                   "rows": [{"op": HOSTILE, "size": 4, "count": 1, "iters": 2,
                             "time_us": 1.0, "algbw": 1.0, "busbw": 1.0}]}
    for name, doc in (("links", links), ("compute", compute), ("collectives", collectives)):
        out = console()
        render_probe(name, doc, out)
        assert_inert(out)


def test_error_messages_quoting_a_hostile_path_are_inert(tmp_path):
    import subprocess
    import sys

    missing = tmp_path / "x\x1b]0;title\x07y"
    res = subprocess.run([sys.executable, "-m", "diag.cli", "analyze", str(missing)],
                         capture_output=True, timeout=60)
    assert res.returncode == 2 and b"no such file" in res.stderr
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", res.stderr)
