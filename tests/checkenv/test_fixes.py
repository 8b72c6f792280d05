"""A fault that check-env finds before the job and analyze finds in the job's logs gets
one fix text (diag/fixes.py), whichever command reports it."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag import fixes
from diag.analyze import analyze
from diag.checkenv.checks_cross import check_devices
from diag.checkenv.checks_master import check_master_addr
from tests.checkenv.factories import facts, launch_env, snap

CASES = Path(__file__).resolve().parents[1] / "analyze" / "cases"


def analyze_fixes(case: str) -> list[str]:
    return [f.fix for f in analyze(CASES / case).findings]


def wildcard_master_addr() -> str:
    [res] = check_master_addr(facts(env=launch_env(MASTER_ADDR="0.0.0.0")))
    return res.fix


def two_ranks_on_one_gpu() -> str:
    shared = {"gpu_uuids": ("GPU-aaa",)}
    [res] = check_devices([snap(0, **shared), snap(1, **shared)])
    return res.fix


@pytest.mark.parametrize("check_env_fix, case, fix", [
    (wildcard_master_addr, "master_addr_wildcard", fixes.MASTER_ADDR_HOST),
    (two_ranks_on_one_gpu, "duplicate_gpu_two_ranks", fixes.SHARED_GPU),
])
def test_check_env_and_analyze_give_one_fix_for_one_fault(check_env_fix, case, fix):
    assert check_env_fix() == fix
    # analyze writes it as a sentence, after what it saw in the logs
    assert any(fixes.sentence(fix) in f for f in analyze_fixes(case))


def test_a_clause_becomes_a_sentence():
    assert fixes.sentence("set X to 1") == "Set X to 1."
    assert fixes.sentence("Set X to 1.") == "Set X to 1."
