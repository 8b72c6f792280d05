"""The CI subset of the fault matrix (benchmarks/fault_matrix.py): one cell per fault kind
and a healthy baseline, spread over the three modes, on two nodes of the session lab.
Each cell is a real ``ddiag scale-test --launcher slurm`` judged by its top finding."""

from __future__ import annotations

import pytest

from benchmarks.fault_matrix import Cell, Lab, run_cell
from tests.lab.labutil import SESSION_LAB

pytestmark = pytest.mark.lab

SUBSET = [
    Cell("healthy", "ddp", 2), Cell("slow_compute", "zero2", 2),
    Cell("slow_data", "pipeline", 2), Cell("hang", "ddp", 2),
    Cell("extra_collective", "zero2", 2), Cell("shape_mismatch", "pipeline", 2),
    Cell("nan", "ddp", 2), Cell("crash", "zero2", 2), Cell("oom", "pipeline", 2),
    Cell("slow_link", "ddp", 2), Cell("env_iface", "zero2", 2),
    Cell("env_skew", "pipeline", 2), Cell("env_port", "ddp", 2),
]


@pytest.fixture(scope="module")
def matrix_lab(session_lab):
    """The session lab as the matrix drives it; its node4 throttle is put back after."""
    lab = Lab(SESSION_LAB)
    try:
        yield lab
    finally:
        lab.restore()


@pytest.mark.parametrize("cell", SUBSET, ids=lambda c: c.name)
def test_cell(cell, matrix_lab, tmp_path):
    outcome = run_cell(cell, matrix_lab, tmp_path)
    why = f"{outcome.status}: {outcome.top}; {outcome.notes}"
    assert outcome.category_ok, why
    assert outcome.culprit_ok, why
    assert outcome.false_findings == 0, why  # one root cause, or none when healthy
    assert not [n for n in outcome.notes if n.startswith("processes left")], why
