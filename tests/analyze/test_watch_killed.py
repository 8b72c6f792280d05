"""analyze of a run directory that ``ddiag watch --pid --kill`` left (diag/analyze/killed.py):
the stacks it captured, its ``killed.json`` and the job's log in one folder are one
incident. The stacks' verdict is the root cause; what the kill printed (torchrun's exit
code -15, ``Signal 15 (SIGTERM)``, ChildFailedError) are its symptoms, never a root cause
nor ``unexplained``. ``watch_runs/killed_barrier_after_save`` was recorded from
tests/programs/mistake_ddp.py --mistake barrier_after_save (paths rewritten)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from diag.analyze import analyze, killed
from diag.verdict import Category, Evidence, Finding, Severity, Culprit

RUNS = Path(__file__).resolve().parent / "watch_runs"
BARRIER = RUNS / "killed_barrier_after_save"


def _copy(tmp_path: Path, drop: tuple[str, ...] = ()) -> Path:
    run = tmp_path / "run"
    shutil.copytree(BARRIER, run)
    for name in drop:
        (run / name).unlink()
    return run


def test_the_stacks_verdict_is_the_root_cause_and_the_kill_its_symptom() -> None:
    result = analyze(BARRIER)
    assert not result.detector_errors and not result.problems
    root = [f for f in result.findings if f.root_cause and f.severity > Severity.INFO]
    assert len(root) == 1
    assert root[0].category is Category.COLLECTIVE_MISMATCH and root[0].culprit.ranks == (0,)
    rest = [f for f in result.findings if f is not root[0] and f.severity > Severity.INFO]
    assert rest, "the log's exit code -15 should be read"
    for f in rest:
        assert f.details["caused_by"] == "watch_kill"
        assert f.details["symptom_of"] == \
            "ended by ddiag watch --kill on a collective_mismatch verdict"
    assert not any(f.details.get("unexplained") for f in result.findings)


def test_without_the_marker_the_kill_is_still_a_symptom_but_not_named(tmp_path) -> None:
    result = analyze(_copy(tmp_path, drop=("killed.json",)))
    assert result.findings[0].category is Category.COLLECTIVE_MISMATCH
    assert not any(f.details.get("caused_by") for f in result.findings)


def test_when_the_stacks_name_no_rank_the_kill_is_not_the_cause(tmp_path) -> None:
    # every rank's stack the same: the stacks give only a note; the kill's lines must not
    # become the root cause, nor "unexplained"
    run = _copy(tmp_path)
    shutil.copy(run / "stacks" / "rank00001.json", run / "stacks" / "rank00000.json")
    result = analyze(run)
    assert not [f for f in result.findings if f.root_cause and f.severity > Severity.INFO]
    assert not any(f.details.get("unexplained") for f in result.findings)


def test_a_marker_of_a_newer_schema_is_a_problem_and_not_read(tmp_path) -> None:
    run = _copy(tmp_path)
    doc = json.loads((run / "killed.json").read_text())
    (run / "killed.json").write_text(json.dumps({**doc, "schema": 99}))
    result = analyze(run)
    assert any("newer than this ddiag reads" in p.message for p in result.problems)
    assert not any(f.details.get("caused_by") for f in result.findings)


def _finding(text: str, first_seen: float | None = None) -> Finding:
    return Finding(Category.OTHER, Severity.ERROR, 0.5, "t", Culprit(),
                   (Evidence("job.log", 3, text),), "fix", "failure", True, first_seen)


def test_only_what_the_kill_prints_is_its_symptom() -> None:
    kill = {"format": "ddiag.watch_kill", "schema": 1, "t": 1_796_453_720.0,
            "by": "ddiag watch --kill", "verdict": "rank_hang"}
    cases = {
        "traceback : Signal 15 (SIGTERM) received by PID 26783": True,
        "failed (exitcode: -15) local_rank: 0 (pid: 26783)": True,
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:": True,
        "Received Signals.SIGTERM death signal, shutting down workers": True,
        # near misses: an error of the job itself, a signal number that is not a kill
        "RuntimeError: CUDA error: out of memory": False,
        "failed (exitcode: -6) local_rank: 0 (pid: 26783)": False,
    }
    for text, expected in cases.items():
        out = killed.demote([_finding(text)], kill)[0]
        assert (not out.root_cause) is expected, text
    # seen well before the kill (a log time with its date): not the kill's
    early = killed.demote([_finding("Signal 15 (SIGTERM)", kill["t"] - 600)], kill)[0]
    assert early.root_cause
    assert killed.demote([_finding("Signal 15 (SIGTERM)")], None)[0].root_cause
