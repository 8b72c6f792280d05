"""How a scale test is started, as commands and text (pure): the salloc that holds one
Slurm allocation for every stage, and what ``--dry-run`` prints instead of running."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Mapping

from diag.format import schema
from diag.scaletest.config import ScaleTestConfig

JOB_NAME = "ddiag-scale-test"
SBATCH_LOG = "sbatch-%j.out"
"""The batch job's own stdout, in the run directory (%j: Slurm's job id)."""


def needs_allocation(cfg: ScaleTestConfig, env: Mapping[str, str]) -> bool:
    """Outside an allocation every srun would queue a job of its own: stages could land
    on different nodes, wait in the queue between stages, and the watcher could not
    reach their ranks."""
    return cfg.launcher == "slurm" and not env.get("SLURM_JOB_ID")


def allocation_too_small(cfg: ScaleTestConfig, env: Mapping[str, str]) -> str | None:
    """Inside an allocation, the largest stage must fit in it: say so before any stage
    runs rather than have its srun refused after the smaller ones."""
    nodes, need = env.get("SLURM_JOB_NUM_NODES", ""), max(cfg.stages)
    if cfg.launcher != "slurm" or not env.get("SLURM_JOB_ID") or not nodes.isdigit() \
            or int(nodes) >= need:
        return None
    return (f"--stages {','.join(map(str, cfg.stages))} needs {need} nodes, but allocation "
            f"{env['SLURM_JOB_ID']} has {nodes} (SLURM_JOB_NUM_NODES); allocate "
            f"--nodes={need}, drop the larger stages, or run outside an allocation (ddiag "
            "then starts one with salloc)")


def salloc_argv(cfg: ScaleTestConfig, command: list[str]) -> list[str]:
    """``command`` under one allocation of the largest stage. salloc runs it on this host
    (the progress stays on this terminal) and releases the allocation when it ends."""
    return ["salloc", f"--nodes={max(cfg.stages)}", "--ntasks-per-node=1",
            f"--job-name={JOB_NAME}", *command]


def sbatch_script(cfg: ScaleTestConfig, command: list[str], cwd: Path) -> str:
    """The batch script that runs ``command`` (this scale test) in one allocation."""
    out = cfg.out.resolve()
    return "\n".join([
        "#!/bin/sh",
        f"#SBATCH --job-name={JOB_NAME}",
        f"#SBATCH --nodes={max(cfg.stages)}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --output={out / SBATCH_LOG}",
        f"#SBATCH --chdir={cwd}",
        f"# ddiag scale-test: stages {','.join(map(str, cfg.stages))} (nodes), "
        f"{cfg.nproc_per_node} rank(s) per node, each stage an srun step of this job.",
        "# Slurm opens --output before the job starts, so create the run directory first:",
        f"#   mkdir -p {shlex.quote(str(out))} && sbatch --wait THIS_FILE",
        f"exec {shlex.join(command)}",
        "",
    ])


def local_plan(cfg: ScaleTestConfig) -> str:
    """Every command each local stage runs, in order: the ddiag pre-flight tools, then
    the trainer's (or the user's command's) torchrun (its port is picked again at run
    time unless --master-port)."""
    from diag.scaletest.run import preflight
    from diag.scaletest.stage import job_cmd, stage_cwd

    lines = []
    for stage in cfg.stages:
        run_dir = cfg.out / f"stage-{stage}"
        lines.append(f"# stage {stage}: {cfg.world_size(stage)} rank(s), in {run_dir}")
        lines += [shlex.join(cmd) for _, cmd in preflight(cfg, stage, run_dir)]
        name, argv, env = job_cmd(cfg, stage, run_dir)
        if name == "command":
            lines.append(f"cd {shlex.quote(str(stage_cwd(cfg, stage)))}  # "
                         + ("--shared-cwd" if cfg.shared_cwd else "a mirror of "
                            f"{shlex.quote(str(cfg.cwd.resolve()))}, made when the stage starts"))
            lines.append(f"DDIAG_RUN_DIR={shlex.quote(env['DDIAG_RUN_DIR'])} \\")
        lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"


def stage_commands(cfg: ScaleTestConfig) -> list[dict]:
    """Each stage's commands as argv lists, by name: the pre-flight tools, then the
    trainer or the user's command (srun commands on Slurm, torchrun here)."""
    from diag.scaletest.run import preflight
    from diag.scaletest.stage import job_cmd, stage_cwd

    stages = []
    for stage in cfg.stages:
        run_dir = cfg.out / f"stage-{stage}"
        commands = [{"name": name, "argv": cmd} for name, cmd in preflight(cfg, stage, run_dir)]
        name, argv, _ = job_cmd(cfg, stage, run_dir)
        # the command's folder (a mirror made when the stage starts); the trainer's: ours
        cwd = str(stage_cwd(cfg, stage)) if name == "command" else None
        commands.append({"name": name, "argv": argv, "cwd": cwd})
        stages.append({"stage": stage, "world_size": cfg.world_size(stage),
                       "run_dir": str(run_dir), "commands": commands})
    return stages


def dry_run(cfg: ScaleTestConfig, command: list[str], cwd: Path) -> str:
    if cfg.launcher == "slurm":
        return sbatch_script(cfg, command, cwd)
    return local_plan(cfg)


def dry_run_json(cfg: ScaleTestConfig, command: list[str], cwd: Path) -> dict:
    """What ``--dry-run --json`` prints: the same plan as a document. On Slurm the
    sbatch script is what would be submitted, and the stages what it would run."""
    doc = {**schema.stamp(schema.SCALE_TEST_PLAN), "launcher": cfg.launcher,
           "run_dir": str(cfg.out), "stages": stage_commands(cfg)}
    if cfg.launcher == "slurm":
        doc.update(sbatch_script=sbatch_script(cfg, command, cwd), command=command)
    return doc


def run_dir_in_use(out: Path, job_id: str | None) -> bool:
    """A run directory is free when empty, or when it holds only this batch job's own
    log (the one sbatch_script sends there)."""
    if not out.exists():
        return False
    own = SBATCH_LOG.replace("%j", job_id) if job_id else None
    return any(p.name != own for p in out.iterdir())
