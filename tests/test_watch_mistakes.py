"""``ddiag watch --pid --stall 10`` on real jobs: the DDP script users write
(tests/programs/mistake_ddp.py: gloo, 2 ranks under torchrun, a DataLoader with workers,
a model with a buffer), each run with one mistake, and its healthy run. Asserted from
``--json``: the verdict's category and culprit rank, and that it came within stall + 10 s
of the moment the mistake began (the program prints ``MISTAKE BEGINS <time>``). The
verdict logic itself is ``ddiag stacks``'s (tests/test_stacks_mistakes.py) and the
watcher's is tested on factory samples in tests/test_watch_sampled.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.util import REPO, kill_tree, quiet_env, torchrun_cmd

MISTAKE = REPO / "tests" / "programs" / "mistake_ddp.py"
STALL_S = 10.0
WITHIN_S = STALL_S + 10.0
WATCH_LIMIT_S = 150.0  # torchrun's start on 2 shared cores, the steps, the hang, analyze

pytestmark = pytest.mark.slow


def watch_job(tmp_path: Path, *args: str, watch_timeout_s: float | None = None,
              kill: bool = False) -> tuple[int, dict, float | None]:
    """Run the job with its output in a file, watch it with ``--pid --stall 10 --json``
    (and ``--timeout``), end what is left. (watch's exit code, its document, when the
    mistake began or None)."""
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(torchrun_cmd(2, MISTAKE, *args), stdout=out,
                               stderr=subprocess.STDOUT, env=quiet_env(),
                               start_new_session=True)
    cmd = [sys.executable, "-m", "diag.cli", "watch", str(tmp_path / "run"), "--pid",
           str(job.pid), "--stall", str(STALL_S), "--json"]
    if watch_timeout_s is not None:
        cmd += ["--timeout", str(watch_timeout_s)]
    if kill:
        cmd.append("--kill")
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=WATCH_LIMIT_S,
                             env=quiet_env())
    finally:
        kill_tree(job)
    assert res.returncode in (0, 1), res.stderr
    began = re.search(r"MISTAKE BEGINS (\d+\.\d+)", log.read_text(errors="replace"))
    doc = json.loads(res.stdout)
    _report(args, doc, float(began[1]) if began else None)
    return res.returncode, doc, float(began[1]) if began else None


def _report(args: tuple, doc: dict, began: float | None) -> None:
    at = (doc["alarm"] or {}).get("detected_at") or doc["straggler_at"]
    verdict = doc["verdict"] or {}
    took = f"{at - began:.1f} s" if at and began else "-"
    print(f"\nMATRIX {' '.join(args)} | {verdict.get('category')} "
          f"{(verdict.get('culprit') or {}).get('ranks')} | {took} | {doc['ended']}")


def hang_verdict(tmp_path: Path, *args: str, kill: bool = False) -> dict:
    code, doc, began = watch_job(tmp_path, *args, kill=kill)
    assert code == 1 and doc["alarm"] is not None, doc
    assert began is not None, "the program never printed MISTAKE BEGINS"
    assert doc["alarm"]["detected_at"] - began <= WITHIN_S, (doc["alarm"], began)
    assert (tmp_path / "run" / "watch.json").is_file()
    assert sorted(p.name for p in (tmp_path / "run" / "stacks").glob("rank*.json")) == \
        ["rank00000.json", "rank00001.json"]
    return doc["verdict"]


def test_a_barrier_only_rank_0_calls_is_a_mismatch_naming_rank_0_and_kill_is_its_symptom(
        tmp_path: Path) -> None:
    verdict = hang_verdict(tmp_path, "--mistake", "barrier_after_save", kill=True)
    assert verdict["category"] == "collective_mismatch"
    assert verdict["culprit"]["ranks"] == [0]
    assert "save_checkpoint" in verdict["title"]
    # the run directory holds the stacks, killed.json and the job's log: one incident
    run = tmp_path / "run"
    assert json.loads((run / "killed.json").read_text())["format"] == "ddiag.watch_kill"
    assert list((run / "logs").glob("job*-job.log"))
    res = subprocess.run([sys.executable, "-m", "diag.cli", "analyze", str(run), "--json"],
                         capture_output=True, text=True, timeout=120, env=quiet_env())
    findings = json.loads(res.stdout)["findings"]
    roots = [f for f in findings if f["root_cause"] and f["severity"] != "info"]
    assert [(f["category"], f["culprit"]["ranks"]) for f in roots] == \
        [("collective_mismatch", [0])]
    kill = [f for f in findings if f["details"].get("caused_by") == "watch_kill"]
    assert kill and not any(f["details"].get("unexplained") for f in findings)


def test_rank_1_stuck_in_its_dataloader_worker_is_named_data_loading(tmp_path: Path) -> None:
    verdict = hang_verdict(tmp_path, "--mistake", "stuck_worker")
    assert verdict["category"] == "rank_hang" and verdict["culprit"]["ranks"] == [1]
    assert "data loading" in verdict["title"]
    assert "_distributed_broadcast_coalesced" in verdict["title"]  # where rank 0 waits


def test_an_eval_all_reduce_only_on_rank_0_is_a_mismatch_naming_rank_0(tmp_path: Path) -> None:
    verdict = hang_verdict(tmp_path, "--mistake", "eval_all_reduce")
    assert verdict["category"] == "collective_mismatch"
    assert verdict["culprit"]["ranks"] == [0]
    assert "evaluate" in verdict["title"]


def test_rank_0_saving_within_the_timeout_is_the_busy_rank_with_the_timeout_known(
        tmp_path: Path) -> None:
    verdict = hang_verdict(tmp_path, "--mistake", "slow_save", "--timeout-s", "60")
    assert verdict["category"] == "rank_hang" and verdict["culprit"]["ranks"] == [0]
    assert "_save_snapshot" in verdict["title"]
    assert verdict["details"]["pg_timeout_s"] == 60.0


def test_rank_0_saving_past_the_timeout_is_timeout_too_short_and_kept_after_the_job_ends(
        tmp_path: Path) -> None:
    # the job ends by its own timeout (rank 1's broadcast times out after 8 s) before the
    # stall: watch keeps its samples and gives their verdict
    verdict = hang_verdict(tmp_path, "--mistake", "slow_save", "--timeout-s", "8")
    assert verdict["category"] == "timeout_too_short" and verdict["culprit"]["ranks"] == [0]
    assert "_save_snapshot" in verdict["title"]
    saved = json.loads((tmp_path / "run" / "watch.json").read_text())
    assert saved["ended"] == "job ended in a stall"
    assert saved["verdict"]["category"] == "timeout_too_short"


def test_a_rank_3x_slower_is_a_straggler_not_a_hang(tmp_path: Path) -> None:
    code, doc, began = watch_job(tmp_path, "--mistake", "slow_rank", "--step-ms", "100",
                                 "--steps", "400", watch_timeout_s=35)
    assert code == 0 and doc["alarm"] is None, doc["alarm"]
    assert doc["straggler"]["category"] == "straggler"
    assert doc["straggler"]["culprit"]["ranks"] == [1]
    assert doc["straggler_at"] - began <= WITHIN_S


def test_the_healthy_run_gives_no_alarm_and_no_straggler(tmp_path: Path) -> None:
    code, doc, _ = watch_job(tmp_path, "--step-ms", "100", "--steps", "400",
                             watch_timeout_s=35)
    assert code == 0 and doc["alarm"] is None and doc["straggler"] is None, doc
    assert doc["ended"] == "watch timed out" and doc["samples"] >= 5
