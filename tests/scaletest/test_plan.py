"""How a scale test starts: the salloc around a Slurm run outside an allocation, the
sbatch script and local commands --dry-run prints, the job id the hang watcher gets,
and the status display. No trainer runs here."""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from diag.report.terminal import scale_test_status
from diag.scaletest import plan
from diag.scaletest.config import ScaleTestConfig
from tests.util import run

COMMAND = [sys.executable, "-m", "diag.cli", "scale-test", "--launcher", "slurm",
           "--stages", "1,2,4", "--out", "/runs/st"]


def slurm_cfg(**kw) -> ScaleTestConfig:
    return ScaleTestConfig(out=Path("/runs/st"), stages=(1, 2, 4), launcher="slurm", **kw)


def test_slurm_outside_an_allocation_needs_one():
    assert plan.needs_allocation(slurm_cfg(), {})
    assert not plan.needs_allocation(slurm_cfg(), {"SLURM_JOB_ID": "42"})
    assert not plan.needs_allocation(ScaleTestConfig(out=Path("x"), stages=(1, 2)), {})


def test_an_allocation_smaller_than_the_largest_stage_is_refused_up_front():
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2"}
    problem = plan.allocation_too_small(slurm_cfg(), env)
    assert "needs 4 nodes, but allocation 42 has 2" in problem and "--nodes=4" in problem
    assert plan.allocation_too_small(slurm_cfg(), {**env, "SLURM_JOB_NUM_NODES": "4"}) is None
    assert plan.allocation_too_small(slurm_cfg(), {}) is None


def test_salloc_holds_the_largest_stage_for_the_whole_test():
    assert plan.salloc_argv(slurm_cfg(), COMMAND) == [
        "salloc", "--nodes=4", "--ntasks-per-node=1", "--job-name=ddiag-scale-test", *COMMAND]


def test_sbatch_script_directives_come_first_and_the_command_last():
    script = plan.sbatch_script(slurm_cfg(), COMMAND, Path("/home/me"))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert lines[1:6] == ["#SBATCH --job-name=ddiag-scale-test", "#SBATCH --nodes=4",
                          "#SBATCH --ntasks-per-node=1", "#SBATCH --output=/runs/st/sbatch-%j.out",
                          "#SBATCH --chdir=/home/me"]
    # sbatch reads directives only up to the first command.
    assert [ln for ln in lines if not ln.startswith("#")] == [
        "exec " + " ".join(COMMAND)]


def test_local_dry_run_lists_every_stage_command_in_order():
    cfg = ScaleTestConfig(out=Path("/runs/st"), stages=(1, 2), master_port=29555)
    text = plan.dry_run(cfg, [], Path("/"))
    torchruns = [ln for ln in text.splitlines() if "torch.distributed.run" in ln]
    assert [re.search(r"--nproc-per-node=(\d+)", t).group(1) for t in torchruns] == ["1", "2"]
    assert all("--master-port=29555" in t and "-m reference_trainer" in t for t in torchruns)
    assert text.index("# stage 1:") < text.index("check-env") < text.index("# stage 2:")


def test_a_run_dir_holding_only_this_jobs_log_is_free(tmp_path):
    assert not plan.run_dir_in_use(tmp_path / "new", None)
    (tmp_path / "sbatch-42.out").write_text("")
    assert not plan.run_dir_in_use(tmp_path, "42")
    assert plan.run_dir_in_use(tmp_path, "43") and plan.run_dir_in_use(tmp_path, None)


def ddiag(*args: str, env: dict | None = None):
    return run([sys.executable, "-m", "diag.cli", "scale-test", *args], timeout=60,
               env={**os.environ, **(env or {})})


def test_cli_dry_run_prints_the_script_and_runs_nothing(tmp_path):
    out = tmp_path / "st"
    res = ddiag("--launcher", "slurm", "--stages", "1,2", "--nproc-per-node", "2",
                "--no-probes", "--html", "r.html", "--out", str(out), "--dry-run",
                env={"SLURM_JOB_ID": ""})
    assert res.returncode == 0, res.stderr
    assert "#SBATCH --nodes=2" in res.stdout and not out.exists()
    command = res.stdout.strip().splitlines()[-1]
    assert command == (f"exec {sys.executable} -m diag.cli scale-test --stages 1,2 --launcher "
                       f"slurm --nproc-per-node 2 --no-probes --html r.html --out {out}")


def test_cli_outside_an_allocation_execs_salloc(tmp_path):
    """A stand-in salloc on PATH records what it was asked to run."""
    fake = tmp_path / "bin" / "salloc"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\nexit 7\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "SLURM_JOB_ID": ""}
    res = ddiag("--launcher", "slurm", "--stages", "1,2", "--out", str(tmp_path / "st"),
                "--json", env=env)
    assert res.returncode == 7 and "running under salloc --nodes=2" in res.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:3] == ["--nodes=2", "--ntasks-per-node=1", "--job-name=ddiag-scale-test"]
    assert argv[3:] == [sys.executable, "-m", "diag.cli", "scale-test", "--stages", "1,2",
                        "--launcher", "slurm", "--json", "--out", str(tmp_path / "st")]
    assert not (tmp_path / "st").exists()


def test_the_hang_watcher_gets_the_allocation(tmp_path):
    from diag.scaletest.stage import _watch_into
    from diag.format.heartbeat import RankBeat
    from diag.watch.capture import on_node

    seen = {}

    def fake_watch(run_dir, stall_s, **kw):
        seen.update(kw)
        return SimpleNamespace(alarm=None)

    proc = SimpleNamespace(poll=lambda: 0)
    _watch_into(fake_watch, tmp_path, slurm_cfg(slurm_job_id="42"), proc, {}, print)
    assert seen["slurm_job_id"] == "42"
    remote = RankBeat(1, 99, "node2", 0.0, 1, (), None, None, None)
    assert on_node(remote, ["true"], "42")[:3] == ["srun", "--overlap", "--jobid=42"]


def test_plain_status_lines_off_a_terminal(capsys):
    with scale_test_status(slurm_cfg(), live=False) as status:
        status("stage 1: check-env")
    assert capsys.readouterr().err == "ddiag scale-test: stage 1: check-env\n"


def test_live_display_keeps_each_finished_step_with_its_duration():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with scale_test_status(slurm_cfg(nproc_per_node=2), live=True, console=console) as status:
        status("stage 2: check-env")
        status("stage 2: training ddp on 4 rank(s)")
        status("hang: ranks [3] lag; ending the stage")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert re.search(r"stage 2: check-env  \(\d+\.\d s\)", text)
    assert re.search(r"stage 2: training ddp on 4 rank\(s\)  \(\d+\.\d s\)", text)
    assert "stage 2/3 (4 ranks)" in text  # the live line's last frame
    assert "  hang: ranks [3] lag; ending the stage\n" in text  # news, not a timed step


def test_model_size_reaches_every_stage_trainer_and_bad_sizes_are_refused(tmp_path):
    res = ddiag("--stages", "1,2", "--vocab", "8192", "--width", "96", "--out",
                str(tmp_path / "st"), "--dry-run")
    assert res.returncode == 0, res.stderr
    trainers = [line for line in res.stdout.splitlines() if "reference_trainer" in line]
    assert len(trainers) == 2
    assert all("--width 96 --vocab 8192" in line for line in trainers)
    bad = ddiag("--vocab", "0", "--out", str(tmp_path / "st2"), "--dry-run")
    assert bad.returncode == 2 and "--vocab" in bad.stderr
