"""The scale-test HTML report: built from the real local run's event logs, it shows the
table, the scaling curve with its cliff and every stage's plots, with no script and no
URL; hostile values in it stay text; the CLI writes it new (never over a file, through a
symlink or into a missing folder); headless Chromium renders it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from rich.console import Console

from diag.format.events import read_run_events
from diag.report.terminal import render_scale_test
from diag.report.scale_test_html import (
    NORMALISED, _title, render_scale_test_html, scaling_curve_svg,
)
from diag.report.svg import SLOW
from diag.scaletest.config import ScaleTestConfig
from diag.scaletest.measure import efficiencies, stage_metrics
from diag.scaletest.run import ScaleTestResult
from diag.scaletest.stage import StageRun, StageStatus
from tests.analyze.test_reports import (
    CHROMIUM_FLAGS, HOSTILE, HOSTILE_NAME, NEEDS_CHROMIUM, Dom, assert_inert, chromium_dom,
)
from tests.scaletest.factories import SHARED, SLOW_LINK, result
from tests.util import run

VERDICT = "efficiency 1.00 -> 0.40 between stages 1 and 2: <b>rank 1</b> is slow"


def cliff_result(out) -> ScaleTestResult:
    """The real run's stages and metrics, with a cliff declared at stage 2 (two local
    ranks on 2 cores rarely fall off by themselves)."""
    cfg = ScaleTestConfig(out=out, stages=(1, 2), steps=12, probes=False)
    result = ScaleTestResult(cfg, verdict=VERDICT, cliff_stage=2)
    for stage in cfg.stages:
        logs, _ = read_run_events(out / f"stage-{stage}")
        result.stages.append(StageRun(stage, stage, out / f"stage-{stage}"))
        result.metrics.append(stage_metrics(logs, stage, cfg.batch * stage))
    result.efficiency = efficiencies(result.metrics)
    result.findings[2] = [{"severity": "warn", "category": "straggler",
                           "title": "rank 1 is a compute straggler", "fix": "look at rank 1"}]
    return result


def assert_self_contained(page: str) -> None:
    assert page.startswith("<!doctype html>") and page.endswith("</html>")
    assert "<script" not in page.lower() and "http" not in page and "src=" not in page


@pytest.mark.slow
def test_report_has_table_curve_cliff_and_every_stage(local_run):
    page = render_scale_test_html(cliff_result(local_run.out))
    assert_self_contained(page)
    assert "&lt;b&gt;rank 1&lt;/b&gt; is slow" in page  # the verdict, escaped
    assert page.count("<tr>") == 3 and "&larr; cliff" in page
    curve = page[page.index("<h2>Scaling curve</h2>"):page.index("<h2>Stage 1:")]
    assert 'class="cliff"' in curve and "cliff: stage 2" in curve
    assert curve.count("<circle") == 4  # efficiency and samples/s of both stages
    assert "<h2>Stage 1: 1 rank, ok</h2>" in page and "Stage 2: 2 ranks, ok (cliff)" in page
    for rank in (0, 1):
        assert f"<title>rank {rank}: p50 " in page and ", p95 " in page
    assert page.count("median step split: compute") == 2
    assert "rank 1 is a compute straggler" in page


@pytest.mark.slow
def test_cli_writes_the_report_of_a_real_run(local_run):
    assert local_run.res.returncode in (0, 1), local_run.res.stderr[-3000:]
    page = local_run.html.read_text()
    assert_self_contained(page)
    assert "<h2>Scaling curve</h2>" in page and "Stage 2: 2 ranks" in page
    assert f"ddiag: wrote {local_run.html}" in local_run.res.stderr


def test_cli_refuses_an_existing_html_path_before_running(tmp_path):
    html = tmp_path / "r.html"
    html.write_text("mine")
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--stages", "1", "--out",
               str(tmp_path / "st"), "--html", str(html)], timeout=60)
    assert res.returncode == 2 and "already exists" in res.stderr
    assert html.read_text() == "mine" and not (tmp_path / "st").exists()


@NEEDS_CHROMIUM
@pytest.mark.slow
def test_report_renders_offline_in_headless_chromium(local_run, tmp_path):
    html = tmp_path / "report.html"
    html.write_text(render_scale_test_html(cliff_result(local_run.out)))
    base = ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", html.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert "cliff: stage 2" in dom and "rank 1 is a compute straggler" in dom
    assert dom.count("<rect") >= 2 * 3 + 2 * 3  # p50 and p95 of 3 ranks, 3 shares x 2 stages
    shot = tmp_path / "shot.png"
    subprocess.run([*base, "--window-size=1200,1400", f"--screenshot={shot}", html.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one


@pytest.mark.slow
def test_a_failed_stage_shows_its_reason_and_no_plots(local_run):
    result = cliff_result(local_run.out)
    result.stages[1].status = StageStatus.HANG
    result.stages[1].reason = "hang detected by the watcher"
    result.metrics[1], result.efficiency[1], result.cliff_stage = None, None, None
    page = render_scale_test_html(result)
    assert_self_contained(page)
    assert "Stage 2: 2 ranks, hang</h2><div class=\"ev\">hang detected by the watcher" in page
    assert "no event logs from this stage" in page and 'class="cliff"' not in page


def test_table_and_curve_show_raw_and_host_efficiency_and_the_cliff():
    page = render_scale_test_html(result([1.0, 0.59, 0.12], SHARED[0], SLOW_LINK,
                                         small_us=SHARED[1]))
    assert_self_contained(page)
    assert "<th>efficiency (raw)</th><th>per-rank TFLOP/s</th><th>against the host</th>" in page
    assert "<td>0.12</td><td>0.022</td><td>0.34</td>" in page  # stage 4: raw, rate, host
    curve = page[page.index("<h2>Scaling curve</h2>"):page.index("<h2>Stage 1:")]
    assert curve.count("<circle") == 9  # raw, against the host and samples/s of 3 stages
    # The cliff is red on the raw efficiency; the host's line is context.
    assert f'fill="{SLOW}"><title>stage 4 (8 ranks): efficiency (raw) 0.12' in curve
    assert f'fill="{NORMALISED}"><title>stage 4 (8 ranks): efficiency against the host 0.34' \
        in curve


def test_without_a_probe_reading_the_curve_says_there_is_no_host_line():
    curve = scaling_curve_svg(result([1.0, 0.59, 0.32], [None, 0.035, 0.022]))
    assert "none: a stage has no probe reading" in curve
    assert curve.count("<circle") == 6 and "against the host 0" not in curve
    assert f'fill="{SLOW}"><title>stage 2 (4 ranks): efficiency (raw) 0.59' in curve


def test_terminal_table_has_both_efficiencies():
    console = Console(record=True, width=160)
    render_scale_test(result([1.0, 0.59, 0.32], SHARED[0], small_us=SHARED[1]), console)
    out = console.export_text()
    assert "┃ TFLOP/s ┃  eff ┃ host eff ┃" in out
    assert "│   0.022 │ 0.32 │     0.91 │" in out
    assert "a fall the host predicts, with no finding, is no cliff" in " ".join(out.split())
    assert "<- cliff" not in out


def hostile_result(tmp_path) -> ScaleTestResult:
    """Every string field of a result that reaches the report is hostile: the run
    directory's name, the Slurm job id, the verdict, stage reasons, the stages' findings
    (from the inputs' hosts and logs) and a rank's name. (A stage's status is a
    StageStatus, never text from the inputs.)"""
    r = result([1.0, 0.59, 0.12], SHARED[0], small_us=SHARED[1])
    r.config = dataclasses.replace(r.config, out=tmp_path / f"st{HOSTILE_NAME}",
                                   slurm_job_id=f"job{HOSTILE}")
    r.verdict = f"verdict{HOSTILE}"
    r.stages[1].status, r.stages[1].reason = StageStatus.FAILED, f"reason{HOSTILE}"
    r.metrics[2].per_rank_p50_s[f"rank{HOSTILE}"] = 0.1
    r.metrics[2].per_rank_p95_s[f"rank{HOSTILE}"] = 0.2
    r.findings[4] = [{"severity": f"severity{HOSTILE}", "category": f"category{HOSTILE}",
                      "title": f"title{HOSTILE}", "fix": f"fix{HOSTILE}"}]
    return r


HOSTILE_SHOWN = [f"{field}{HOSTILE}" for field in (
    "job", "verdict", "reason", "rank", "category", "title", "fix")] + [
    f"st{HOSTILE_NAME}"]


def test_hostile_values_are_text_in_the_page_source(tmp_path):
    r = hostile_result(tmp_path)
    assert_inert(Dom(render_scale_test_html(r)), _title(r), HOSTILE_SHOWN)


@NEEDS_CHROMIUM
def test_hostile_values_run_no_script_in_chromium(tmp_path):
    r = hostile_result(tmp_path)
    page = tmp_path / "report.html"
    page.write_text(render_scale_test_html(r))
    assert_inert(chromium_dom(page, tmp_path), _title(r), HOSTILE_SHOWN)


def scale_test_cli(tmp_path, html) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "diag.cli", "scale-test", "--stages", "1", "--out",
                str(tmp_path / "st"), "--html", str(html)], timeout=60)


def test_cli_refuses_a_dangling_symlink_before_running(tmp_path):
    link, target = tmp_path / "r.html", tmp_path / "elsewhere.html"
    link.symlink_to(target)
    res = scale_test_cli(tmp_path, link)
    assert res.returncode == 2 and "symlink" in res.stderr.replace(str(tmp_path), "")
    assert not target.exists() and not (tmp_path / "st").exists()


def test_cli_refuses_an_html_path_in_a_missing_folder_before_running(tmp_path):
    res = scale_test_cli(tmp_path, tmp_path / "missing-dir" / "r.html")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert str(tmp_path / "missing-dir") in res.stderr
    assert not (tmp_path / "st").exists()
