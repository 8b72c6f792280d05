"""``scale-test --dry-run --json``: the plan as one schema-versioned JSON document on
stdout, not shell text (issue 18)."""

from __future__ import annotations

import json
import os
import sys

from diag.format import schema
from tests.util import run


def dry_run(*args: str):
    return run([sys.executable, "-m", "diag.cli", "scale-test", *args, "--dry-run", "--json"],
               timeout=60, env={**os.environ, "SLURM_JOB_ID": ""})


def test_local_dry_run_json_lists_each_stage_commands(tmp_path):
    out = tmp_path / "st"
    res = dry_run("--stages", "1,2", "--master-port", "29555", "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert schema.check(doc, schema.SCALE_TEST_PLAN, "stdout") == 1
    assert doc["launcher"] == "local" and not out.exists()
    assert [s["stage"] for s in doc["stages"]] == [1, 2]
    assert [s["world_size"] for s in doc["stages"]] == [1, 2]
    stage2 = doc["stages"][1]
    assert stage2["run_dir"] == str(out / "stage-2")
    names = [c["name"] for c in stage2["commands"]]
    assert names[0] == "check-env" and names[-1] == "trainer"
    trainer = stage2["commands"][-1]["argv"]
    assert "--nproc-per-node=2" in trainer and "--master-port=29555" in trainer
    assert "reference_trainer" in trainer


def test_slurm_dry_run_json_carries_the_sbatch_script(tmp_path):
    out = tmp_path / "st"
    res = dry_run("--launcher", "slurm", "--stages", "1,2", "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["format"] == schema.SCALE_TEST_PLAN and doc["launcher"] == "slurm"
    assert doc["sbatch_script"].startswith("#!/bin/sh\n")
    assert "#SBATCH --nodes=2" in doc["sbatch_script"]
    assert doc["command"][-2:] == ["--out", str(out.resolve())]
    assert [s["stage"] for s in doc["stages"]] == [1, 2]
