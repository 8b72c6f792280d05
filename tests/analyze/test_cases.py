"""Hand-written edge cases (``cases/<name>/log.txt`` + ``expected.json``): other torch and
NCCL versions' wordings, other launcher prefixes, interleaved ranks, and the reasoning
rules of the text-log detectors. None of this text comes from the corpus.

``expected.json``: ``category`` (null: a healthy log, nothing above INFO may be reported
and the exit code is 0; otherwise exactly one root cause above INFO), ``culprit_rank`` (null: not checked) and optionally ``culprit_env_var``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.analyze import analyze
from diag.verdict import Basis, Category, Severity

CASES = Path(__file__).resolve().parent / "cases"


def _cases() -> list:
    found = (
        sorted(p for p in CASES.iterdir() if (p / "expected.json").is_file())
        if CASES.is_dir()
        else []
    )
    return [pytest.param(case, id=case.name) for case in found]


def test_every_case_folder_holds_a_log_and_a_verdict_the_vocabulary_knows() -> None:
    # a folder without expected.json would silently drop out of test_case; so would a typo
    # in a key, which would leave that part of the verdict unchecked
    folders = sorted(p for p in CASES.iterdir() if p.is_dir())
    assert len(folders) >= 20 and [c.values[0] for c in _cases()] == folders
    known = {c.value for c in Category} | {None}
    for case in folders:
        expected = json.loads((case / "expected.json").read_text())
        assert (case / "log.txt").read_text().strip(), case.name
        assert set(expected) <= {"category", "culprit_rank", "culprit_env_var", "why"}, case.name
        assert "category" in expected and expected["category"] in known, case.name
        assert isinstance(expected.get("culprit_rank"), (int, type(None))), case.name


@pytest.mark.parametrize("case", _cases())
def test_case(case: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    result = analyze(case / "log.txt")
    assert not result.detector_errors
    summary = [
        (f.category.value, f.culprit.ranks, f.confidence, f.root_cause, f.title)
        for f in result.findings[:4]
    ]
    above_info = [f for f in result.findings if f.severity > Severity.INFO]
    if expected["category"] is None:
        # healthy stays quiet: no root cause and no symptom above info, so exit 0
        assert not above_info and result.outcome.exit_code == 0, summary
        return
    # one incident, one root cause: the rest above info are its symptoms
    assert [f.root_cause for f in above_info].count(True) == 1, summary
    assert result.findings, "no findings"
    top = result.findings[0]
    assert top.root_cause, summary
    assert top.category.value == expected["category"], summary
    if expected.get("culprit_rank") is not None:
        assert list(top.culprit.ranks) == [expected["culprit_rank"]], summary
    if expected.get("culprit_env_var"):
        assert top.culprit.env_var == expected["culprit_env_var"], summary
    assert top.evidence and all(e.line for e in top.evidence), "evidence must quote file:line"


def test_untagged_work_names_no_rank_when_rank_0_waits() -> None:
    # rank-0-first work is rank 0's only while rank 0 is not among the ranks that wait
    top = analyze(CASES / "rank0_alone_times_out_untagged_index_build" / "log.txt").findings[0]
    assert top.category is Category.TIMEOUT_TOO_SHORT and top.culprit.ranks == ()
    named = analyze(CASES / "rank1_alone_times_out_untagged_index_build" / "log.txt").findings[0]
    assert named.culprit.ranks == (0,) and "rank 0, which prints the work" in named.title


def test_two_ranks_on_one_gpu_is_one_cause_with_no_network_or_hang_symptom() -> None:
    # real NCCL 2.28.9 text: both ranks on one host (torchrun's "host : localhost" is that
    # host), NCCL refused at init. Nothing timed out and no network was needed, so no
    # symptom may say a rank hung or IB is missing.
    result = analyze(CASES / "h200_nccl2289_duplicate_gpu" / "log.txt")
    above_info = [f for f in result.findings if f.severity > Severity.INFO]
    assert above_info[0].category is Category.ENV_MISCONFIG and above_info[0].root_cause
    assert not {f.category for f in above_info} & {Category.RANK_HANG, Category.SLOW_LINK}
    assert all(f.details["symptom_of"].startswith("env_misconfig: ") for f in above_info[1:])
    assert not [f for f in above_info if "no detail" in f.title]


def test_one_dump_in_a_collective_names_no_rank_and_says_who_to_dump(tmp_path) -> None:
    # the dumped process waits for a rank nobody dumped: no culprit, and a weak verdict
    log = tmp_path / "rank2.txt"
    log.write_text(
        'Thread 7001 (idle): "MainThread"\n'
        "    all_reduce (torch/distributed/distributed_c10d.py:2501)\n"
        "    wrapper (torch/distributed/c10d_logger.py:83)\n"
        "    train_step (train.py:88)\n"
        "    <module> (train.py:140)\n")
    top = analyze(log).findings[0]
    assert top.category is Category.RANK_HANG and top.culprit.ranks == ()
    assert top.basis <= Basis.HEURISTIC and "not dumped" in top.title and "Dump every rank" in top.fix


def test_a_peer_address_is_named_by_the_host_that_printed_it() -> None:
    top = analyze(CASES / "nccl_no_route_between_named_hosts" / "log.txt").findings[0]
    assert top.culprit.link == ("node3", "node4")
    assert "node3 (10.0.0.3) -> node4 (10.0.0.4)" in top.title
