"""``ddiag probe`` on an environment torch refuses at import, and its default run folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from diag.format.rundir import default_run_dir
from probes.run import import_breakers


def test_a_variable_import_torch_rejects_is_refused_before_any_rank_starts(tmp_path):
    env = {**os.environ, "TORCH_DISTRIBUTED_DEBUG": "VERBOSE"}
    res = subprocess.run([sys.executable, "-m", "diag.cli", "probe", "compute", "--launcher",
                          "local", "--nproc-per-node", "1", "--out", str(tmp_path / "p")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "TORCH_DISTRIBUTED_DEBUG='VERBOSE'" in res.stderr and "DETAIL" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "p").exists()


def test_import_breakers_judges_only_bad_values():
    assert import_breakers({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}) == []
    assert len(import_breakers({"TORCH_DISTRIBUTED_DEBUG": "loud", "PATH": "/x"})) == 1


def test_default_run_folder_is_under_runs(monkeypatch):
    monkeypatch.delenv("DDIAG_RUN_DIR", raising=False)
    out = default_run_dir("probe")
    assert out.parts[0] == "runs" and out.name.startswith("probe-")
    monkeypatch.setenv("DDIAG_RUN_DIR", "/tmp/x")
    assert default_run_dir("probe") == Path("/tmp/x")
