"""Variables torch validates while it imports: a bad value is a check-env finding, never a
crash inside ``import torch`` (issue 18, item 14)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from diag.checkenv import importenv
from diag.checkenv.checks_vars import check_values
from diag.checkenv.run import start_failure
from diag.verdict import Status
from tests.checkenv.factories import facts, launch_env
from tests.util import quiet_env, run

DDIAG = [sys.executable, "-m", "diag.cli", "check-env"]
DATA = Path(__file__).parent / "data"


def results(doc: dict, status: str) -> dict[str, dict]:
    return {r["check"]: r for r in doc["results"] if r["status"] == status}


def test_set_aside_moves_the_import_checked_variables_and_real_env_brings_them_back():
    env = {"TORCH_DISTRIBUTED_DEBUG": "VERBOSE", "TORCH_LOGS": "garbage", "RANK": "0"}
    moved = importenv.set_aside(env)
    assert moved == {"TORCH_DISTRIBUTED_DEBUG": "VERBOSE", "TORCH_LOGS": "garbage"}
    assert "TORCH_DISTRIBUTED_DEBUG" not in env and "TORCH_LOGS" not in env
    assert importenv.set_aside(env) == {}  # a rank started by the launcher: already aside
    assert importenv.real_env(env) == {"TORCH_DISTRIBUTED_DEBUG": "VERBOSE",
                                       "TORCH_LOGS": "garbage", "RANK": "0"}


def test_env_on_values_travel_aside_to_the_node_they_name():
    env_on = (("node3", "TORCH_DISTRIBUTED_DEBUG", "VERBOSE"), ("node3", "NCCL_DEBUG", "INFO"))
    aside = importenv.aside_env_on(env_on)
    assert aside[1] == env_on[1]
    assert aside[0][0] == "node3" and aside[0][2] == "VERBOSE"
    assert importenv.real_env({aside[0][1]: "VERBOSE"}) == {"TORCH_DISTRIBUTED_DEBUG": "VERBOSE"}


@pytest.mark.parametrize("name,value,allowed", [
    ("TORCH_DISTRIBUTED_DEBUG", "VERBOSE", ("OFF", "INFO", "DETAIL")),
    ("TORCH_DISTRIBUTED_DEBUG", "", ("OFF", "INFO", "DETAIL")),
    ("TORCH_LOGS", "dynamo;inductor", ("+", "-")),
    ("TORCH_LOGS", "help", ("+", "-")),
    ("TORCH_LOGS_FORMAT", "x", ("%(",)),
])
def test_values_torch_rejects_at_import_fail_and_say_so(name, value, allowed):
    [res] = check_values(facts(env=launch_env(**{name: value})))
    assert res.status is Status.FAIL and res.check == "vars.value" and res.culprit.env_var == name
    assert all(a in res.summary for a in allowed) and "import torch" in res.summary


def test_torch_own_verdict_after_import_is_a_finding_too():
    """Names in TORCH_LOGS only torch's registry knows: its parser's error, as a fact."""
    f = facts(env=launch_env(TORCH_LOGS="garbage"),
              import_errors={"TORCH_LOGS": "Invalid log settings: garbage, must be ..."})
    [res] = check_values(f)
    assert res.status is Status.FAIL and res.culprit.env_var == "TORCH_LOGS"
    assert [(e.file, e.text) for e in res.evidence] == [
        ("at import", "Invalid log settings: garbage, must be ...")]


def test_vet_after_import_puts_back_valid_values_and_reports_bad_ones(monkeypatch, tmp_path):
    values = {"TORCH_LOGS": "garbage", "TORCH_DISTRIBUTED_DEBUG": "OFF",
              "TORCH_LOGS_OUT": str(tmp_path / "no-such-dir" / "torch.log")}
    for name, value in values.items():  # monkeypatch then restores names and carriers
        monkeypatch.setenv(name, value)
        monkeypatch.setenv(importenv.ASIDE + name, "")
    importenv.set_aside(os.environ)
    errors = importenv.vet_after_import()
    assert set(errors) == {"TORCH_LOGS", "TORCH_LOGS_OUT"}
    assert "garbage" in errors["TORCH_LOGS"] and "no-such-dir" in errors["TORCH_LOGS_OUT"]
    assert os.environ["TORCH_DISTRIBUTED_DEBUG"] == "OFF"  # valid: back where it was
    assert "TORCH_LOGS" not in os.environ


def test_check_env_reports_a_bad_torch_distributed_debug_without_a_traceback(tmp_path):
    """The docs' own example: it used to die inside ``import torch``."""
    res = run([*DDIAG, "--out", str(tmp_path / "r"), "--json"], timeout=60,
              env=quiet_env(TORCH_DISTRIBUTED_DEBUG="VERBOSE", TORCH_LOGS_FORMAT="x"))
    assert res.returncode == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    doc = json.loads(res.stdout)
    bad = {r["env_var"]: r for r in doc["results"] if r["check"] == "vars.value"}
    assert bad["TORCH_DISTRIBUTED_DEBUG"]["status"] == "fail"
    assert all(v in bad["TORCH_DISTRIBUTED_DEBUG"]["summary"] for v in ("OFF", "INFO", "DETAIL"))
    assert bad["TORCH_LOGS_FORMAT"]["status"] == "fail"


@pytest.mark.slow
def test_all_ranks_report_a_bad_torch_distributed_debug_from_every_rank(tmp_path):
    res = run([*DDIAG, "--all-ranks", "--launcher", "local", "--nproc-per-node", "2",
               "--out", str(tmp_path / "r"), "--json", "--group-timeout", "20"], timeout=150,
              env=quiet_env(TORCH_DISTRIBUTED_DEBUG="VERBOSE"))
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    doc = json.loads(res.stdout)
    assert doc["missing_ranks"] == [] and doc["world_size"] == 2
    [bad] = [r for r in doc["results"] if r["check"] == "vars.value"]
    assert bad["env_var"] == "TORCH_DISTRIBUTED_DEBUG" and bad["ranks"] == [0, 1]
    assert "DETAIL" in bad["summary"]
    assert "cross.env" not in results(doc, "fail")  # every rank saw the same value


def test_ranks_that_died_before_their_snapshot_are_explained_by_the_launcher_stderr():
    stderr = (DATA / "torchrun_ranks_failed.stderr").read_text()
    [res] = start_failure(2, 0, 1, stderr)
    assert res.status is Status.FAIL and res.check == "launch.start"
    assert "ValueError: The value of X must be A, B" in res.summary
    assert "ChildFailedError" not in res.summary
    assert res.evidence and len(res.evidence) <= 20
    assert {e.file for e in res.evidence} == {"launcher stderr"}
    assert res.evidence[-1].text == stderr.rstrip().splitlines()[-1].rstrip()
    assert start_failure(2, 2, 0, "") == []
    [quiet] = start_failure(2, 0, -9, "")
    assert "exit -9" in quiet.summary or "-9" in quiet.summary
