"""One real local scale test (stages 1 and 2, via the CLI, with --html) shared by every
test here: the machine has 2 cores, so the trainer runs once per session."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.util import run


@dataclass(frozen=True)
class LocalRun:
    out: Path
    html: Path
    res: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def local_run(tmp_path_factory) -> LocalRun:
    base = tmp_path_factory.mktemp("scale-test")
    out, html = base / "st", base / "report.html"
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--stages", "1,2", "--steps", "12",
               "--no-probes", "--out", str(out), "--json", "--html", str(html)], timeout=400)
    return LocalRun(out, html, res)
