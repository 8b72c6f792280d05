"""scale-test keeps a command's stages apart: each runs in a mirror of the user's working
directory (what it writes lands there, the user's files are left as they were), the
files each stage wrote are named, a stage that did less work than the previous one is
"trained nothing" and never a speed-up, and the report says what --steps means. Mirrors,
snapshots and verdicts on tmp_path and factories; two real local runs of a trainer that
saves and resumes ``snapshot.pt`` in its working directory (``-m slow``)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.cli import main
from diag.format import schema
from diag.scaletest import progress, throughput, workdir
from diag.scaletest.config import ScaleTestConfig
from diag.scaletest.measure import StageMetrics
from diag.scaletest.run import ScaleTestResult, _check_trained, verdict
from diag.scaletest.stage import StageRun, StageStatus, StepOutcome
from tests.util import REPO, run

SNAPSHOT_DDP = REPO / "tests" / "programs" / "snapshot_ddp.py"


def _user_dir(tmp_path: Path) -> Path:
    """A user's project: a script, a config, a big file, a data folder, a link."""
    user = tmp_path / "proj"
    (user / "data" / "shards").mkdir(parents=True)
    (user / "train.py").write_text("print('hi')\n")
    (user / "config.yaml").write_text("lr: 0.1\n")
    (user / "big.bin").write_bytes(b"x" * 4096)
    (user / "data" / "shards" / "0.bin").write_bytes(b"y" * 10)
    (user / "latest").symlink_to("data")
    return user


# --- the mirror -----------------------------------------------------------------------

def test_the_mirror_copies_small_files_links_large_ones_and_leaves_out_the_run(
        tmp_path, monkeypatch):
    monkeypatch.setattr(workdir, "COPY_MAX_BYTES", 1024)
    user = _user_dir(tmp_path)
    out = user / "runs" / "st"
    out.mkdir(parents=True)
    dst = workdir.mirror_path(out, 1)
    made = workdir.make_mirror(user, dst, skip=out)
    assert (dst / "train.py").is_file() and not (dst / "train.py").is_symlink()
    assert (dst / "data" / "shards").is_dir() and not (dst / "data").is_symlink()
    assert (dst / "big.bin").resolve() == user / "big.bin"  # over COPY_MAX_BYTES: linked
    assert os.readlink(dst / "latest") == str(user / "latest")
    assert sorted(os.listdir(dst / "runs")) == []  # the run directory is left out
    assert (made.copied, made.linked) == (3, 2)
    (dst / "config.yaml").write_text("lr: 9\n")  # a stage rewriting a file it found
    assert (user / "config.yaml").read_text() == "lr: 0.1\n"


def test_a_folder_past_the_entry_budget_is_linked_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir, "MIRROR_ENTRIES", 3)
    user = _user_dir(tmp_path)
    for i in range(10):
        (user / "data" / f"{i}.jpg").write_bytes(b"z")
    dst = tmp_path / "m"
    workdir.make_mirror(user, dst)
    assert (dst / "data").is_symlink() and (dst / "data").resolve() == user / "data"
    assert (dst / "train.py").is_file()  # the top level is always whole


# --- snapshots --------------------------------------------------------------------------

def test_changes_name_what_was_created_modified_and_removed(tmp_path):
    user = _user_dir(tmp_path)
    before = workdir.snapshot(user)
    assert "data/shards/0.bin" in before.files and before.complete
    (user / "snapshot.pt").write_bytes(b"ckpt")
    (user / "config.yaml").write_text("lr: 0.2, now longer\n")
    (user / "train.py").unlink()
    got = workdir.changes(before, workdir.snapshot(user), since_ns=0)
    assert (got.created, got.modified, got.removed) == (("snapshot.pt",), ("config.yaml",),
                                                        ("train.py",))
    assert got.to_json()["counts"] == {"created": 1, "modified": 1, "removed": 1}


def test_a_bounded_snapshot_says_so_and_claims_no_removal(tmp_path):
    user = _user_dir(tmp_path)
    short = workdir.snapshot(user, limit=2)
    assert not short.complete and len(short.files) <= 2
    got = workdir.changes(workdir.snapshot(user), short, since_ns=0)
    assert got.removed == () and not got.complete


def test_a_stage_in_a_mirror_leaves_the_users_directory_as_it_was(tmp_path):
    user = _user_dir(tmp_path)
    out = tmp_path / "st"
    cwd = workdir.prepare(user, out, 2, shared=False)
    assert cwd.path == out / "stage-2-cwd"
    (cwd.path / "snapshot.pt").write_bytes(b"ckpt")  # torch.save("snapshot.pt")
    files = cwd.finish()
    assert files.wrote.created == ("snapshot.pt",) and not files.in_yours.any
    assert not (user / "snapshot.pt").exists()
    said, warn = workdir.notes(2, files)
    assert said == [f"stage 2 wrote snapshot.pt in {cwd.path}"] and warn == []
    doc = files.to_json()
    assert doc["created"] == ["snapshot.pt"] and doc["in_your_directory"]["created"] == []


def test_a_checkpoint_the_user_had_is_copied_and_its_rewrite_a_warning(tmp_path):
    user = _user_dir(tmp_path)
    (user / "snapshot.pt").write_bytes(b"the user's own")
    cwd = workdir.prepare(user, tmp_path / "st", 1, shared=False)
    (cwd.path / "snapshot.pt").write_bytes(b"stage 1's, longer")
    files = cwd.finish()
    assert (user / "snapshot.pt").read_bytes() == b"the user's own"
    assert files.wrote.modified == ("snapshot.pt",) and not files.in_yours.any
    _, warn = workdir.notes(1, files)
    assert len(warn) == 1 and "rewrote snapshot.pt" in warn[0] and "resumed" in warn[0]


def test_a_write_that_reaches_the_users_directory_is_a_warning(tmp_path):
    user = _user_dir(tmp_path)
    cwd = workdir.prepare(user, tmp_path / "st", 1, shared=False)
    (cwd.path / "latest" / "new.txt").write_text("through the link")
    _, warn = workdir.notes(1, cwd.finish())
    assert len(warn) == 1 and "changed your directory" in warn[0] and "data/new.txt" in warn[0]


def test_shared_cwd_runs_in_the_users_directory_and_warns_of_what_stays(tmp_path):
    user = _user_dir(tmp_path)
    out = user / "runs" / "st"
    cwd = workdir.prepare(user, out, 1, shared=True)
    assert cwd.path == user.resolve() and not (out / "stage-1-cwd").exists()
    (out / "stage-1" / "logs").mkdir(parents=True)
    (out / "stage-1" / "logs" / "command.out").write_text("ddiag's own, not the job's")
    (user / "snapshot.pt").write_bytes(b"ckpt")
    files = cwd.finish()
    assert files.wrote.created == ("snapshot.pt",) and files.in_yours is None
    assert "--shared-cwd" in workdir.notes(1, files)[1][0]


# --- trained nothing --------------------------------------------------------------------

def _wall(stage: int, seconds: float, steps: int = 60) -> progress.StageWork:
    return progress.StageWork(stage, stage, seconds, throughput.from_wall(stage, steps, seconds))


def test_a_wall_timed_stage_far_shorter_than_the_last_trained_nothing():
    why = progress.trained_nothing(_wall(2, 5.0), _wall(1, 12.0), strong=False,
                                   visible=["snapshot.pt"])
    assert why is not None and "0.42x" in why and "snapshot.pt" in why and "--shared-cwd" in why
    assert "no speed-up" in why
    assert progress.trained_nothing(_wall(2, 10.0), _wall(1, 12.0), strong=False) is None
    alone = progress.trained_nothing(_wall(2, 5.0), _wall(1, 12.0), strong=False)
    assert "DistributedSampler" in alone and "--strong" in alone
    # strong scaling: 2 ranks share 1 rank's work, so 6 s is perfect and 5 s no alarm
    assert progress.trained_nothing(_wall(2, 5.0), _wall(1, 12.0), strong=True) is None
    assert progress.trained_nothing(_wall(2, 3.0), _wall(1, 12.0), strong=True) is not None
    assert progress.trained_nothing(_wall(1, 5.0), None, strong=False) is None


def test_rates_the_job_measured_are_never_trained_nothing_but_an_empty_event_log_is():
    fast = progress.StageWork(2, 2, 1.0, throughput.from_metric([100.0] * 10, 2))
    assert progress.trained_nothing(fast, _wall(1, 12.0), strong=False) is None
    empty = StageMetrics(2, 0, None, None, None, None, None, None, None, {}, source="events")
    why = progress.trained_nothing(progress.StageWork(2, 2, 4.0, empty), None, strong=False)
    assert why is not None and "no step after the 5 warm-up steps" in why


def _command_result(tmp_path: Path, seconds: list[float], shared: bool) -> ScaleTestResult:
    """Stages 1 and 2 of a command timed from wall, checked as scale_test() checks them,
    stage 1 having written snapshot.pt."""
    cfg = ScaleTestConfig(out=tmp_path, stages=(1, 2), command=("train.py",), steps=60,
                          shared_cwd=shared, cwd=tmp_path)
    r = ScaleTestResult(cfg)
    for n, s in zip(cfg.stages, seconds):
        stage = StageRun(n, n, tmp_path / f"stage-{n}", steps=[StepOutcome("command", True, s)])
        stage.files = workdir.StageFiles(tmp_path, workdir.Changes(created=("snapshot.pt",)))
        r.stages.append(stage)
        r.metrics.append(throughput.from_wall(n, 60, s))
        _check_trained(r)
    return r


def test_a_stage_that_trained_nothing_is_no_speed_up_in_the_verdict_or_json(tmp_path):
    r = _command_result(tmp_path, [12.0, 7.0], shared=True)
    assert r.stages[1].status is StageStatus.TRAINED_NOTHING
    r.efficiency = [1.0, None]  # as conclude() masks it
    r.verdict = verdict(r)
    assert r.verdict.startswith("stage 2 trained nothing: the command exited 0 after 7.0 s")
    assert "snapshot.pt" in r.verdict and not r.healthy
    doc = json.loads(json.dumps(r.to_json(), default=str))
    assert (doc["format"], doc["schema"]) == (schema.SCALE_TEST, 2)
    assert [s["status"] for s in doc["results"]] == ["ok", "trained nothing"]
    assert doc["isolation"]["mode"] == "shared" and doc["efficiency_per"] == "rank-step"
    assert "DistributedSampler" in doc["steps_meaning"]
    assert doc["results"][0]["files"]["created"] == ["snapshot.pt"]
    assert any("--shared-cwd" in w for w in doc["warnings"])
    _reports_say_it(r)
    apart = _command_result(tmp_path, [12.0, 13.0], shared=False)
    assert [s.status for s in apart.stages] == [StageStatus.OK] * 2
    assert apart.to_json()["isolation"]["mode"] == "mirror"


def _reports_say_it(r: ScaleTestResult) -> None:
    """The terminal and the HTML say where the stages ran, what --steps meant, what each
    wrote; the HTML draws no throughput for the stage that trained nothing."""
    import io

    from rich.console import Console

    from diag.report.scale_test_html import render_scale_test_html
    from diag.report.terminal import render_scale_test

    buf = io.StringIO()
    render_scale_test(r, Console(file=buf, width=400))
    lines = buf.getvalue().splitlines()
    for start in ("working directory: every stage ran in", "steps: --steps 60",
                  "warning: stage 1 wrote snapshot.pt", "verdict: stage 2 trained nothing"):
        assert any(line.startswith(start) for line in lines), (start, lines)
    html = render_scale_test_html(r)
    assert "trained nothing" in html and "warning: stage 1 wrote snapshot.pt" in html
    assert f"{r.metrics[1].samples_per_s:.1f} rank-steps/s" not in html


def test_a_change_in_steps_per_rank_is_a_warning_that_names_both_counts():
    def events(world: int, steps: int) -> StageMetrics:
        return StageMetrics(world, steps, 0.1, 0.1, 0.1, 10.0 * world, 0.8, 0.1, 0.1, {},
                            source="events")

    warn = progress.step_count_warning([1, 2], [events(1, 55), events(2, 25)])
    assert "55 at stage 1, 25 at stage 2" in warn and "DistributedSampler" in warn
    assert progress.step_count_warning([1, 2], [events(1, 55), events(2, 52)]) is None
    printed = progress.step_count_warning(
        [1, 2], [throughput.from_metric([1.0] * 60, 1), throughput.from_metric([1.0] * 30, 2)])
    assert "rates the job printed" in printed and "48 at stage 1, 24 at stage 2" in printed
    assert progress.step_count_warning([1, 2], [throughput.from_wall(1, 60, 9.0),
                                                throughput.from_wall(2, 60, 4.0)]) is None
    assert progress.efficiency_per("metric", False) == "printed unit"
    assert progress.efficiency_per("wall", True) == "job"
    assert "--steps is not used" in progress.steps_meaning("events", 60, False)


# --- the command line -------------------------------------------------------------------

def test_shared_cwd_without_a_command_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(main, ["scale-test", "--out", str(tmp_path / "st"),
                                    "--shared-cwd", "--dry-run"])
    assert res.exit_code == 2 and "--shared-cwd is about your own command" in res.output


def test_the_dry_run_says_where_each_stage_of_a_command_runs(tmp_path):
    out = tmp_path / "st"
    args = ["scale-test", "--stages", "1,2", "--out", str(out), "--no-check-env", "--dry-run"]
    text = CliRunner().invoke(main, [*args, "--", "train.py"]).output
    assert f"cd {out.resolve()}/stage-2-cwd  # a mirror of" in text
    doc = json.loads(CliRunner().invoke(main, [*args, "--json", "--shared-cwd", "--",
                                               "train.py"]).output)
    assert doc["stages"][1]["commands"][-1]["cwd"] == str(Path.cwd().resolve())


# --- real runs --------------------------------------------------------------------------

def _staged(tmp_path: Path, *extra: str) -> tuple[dict, Path]:
    """The snapshot trainer staged 1 -> 2 from a user's directory that holds it: stage 1
    trains 10 epochs of 10 steps of 150 ms (15 s); a stage that resumes trains one."""
    user = tmp_path / "proj"
    user.mkdir()
    shutil.copy(SNAPSHOT_DDP, user / "train.py")
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--stages", "1,2",
               "--no-probes", "--no-check-env", "--steps", "100", "--out", "runs/st", "--json",
               *extra, "--", sys.executable, "train.py", "--epochs", "10",
               "--steps-per-epoch", "10", "--step-ms", "150"],
              timeout=300, cwd=user, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode in (0, 1), res.stderr[-3000:]
    return json.loads(res.stdout), user


def _output(doc: dict, user: Path, stage: int) -> str:
    """The stage's output (its run_dir is as given: relative to the user's directory)."""
    return (user / doc["results"][stage - 1]["run_dir"] / "logs" / "command.out").read_text()


@pytest.mark.slow
def test_each_stage_trains_in_its_own_mirror_and_the_users_directory_keeps_no_snapshot(
        tmp_path):
    doc, user = _staged(tmp_path)
    assert [r["status"] for r in doc["results"]] == ["ok", "ok"], doc["verdict"]
    assert "resuming" not in _output(doc, user, 2) and "epoch 9" in _output(doc, user, 2)
    assert sorted(os.listdir(user)) == ["runs", "train.py"]
    for r in doc["results"]:
        assert r["files"]["created"] == ["snapshot.pt"], r["files"]
        assert r["files"]["cwd"].endswith(f"stage-{r['stage']}-cwd")
        assert not r["files"]["in_your_directory"]["counts"]["created"]
    assert doc["isolation"]["mode"] == "mirror" and doc["warnings"] == []
    assert 0.3 < doc["results"][1]["efficiency"] < 1.3


@pytest.mark.slow
def test_with_shared_cwd_the_stage_that_resumed_trained_nothing(tmp_path):
    doc, user = _staged(tmp_path, "--shared-cwd")
    assert "resuming training from snapshot at epoch 9" in _output(doc, user, 2)
    stage2 = doc["results"][1]
    assert stage2["status"] == "trained nothing" and stage2["efficiency"] is None, doc["verdict"]
    assert doc["cliff_stage"] is None and not doc["healthy"]
    assert doc["verdict"].startswith("stage 2 trained nothing") and "snapshot.pt" in doc["verdict"]
    assert (user / "snapshot.pt").exists()  # today's behaviour, and the report says so
    assert any("snapshot.pt" in w and "--shared-cwd" in w for w in doc["warnings"])
