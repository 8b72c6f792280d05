"""What a scale test runs: stages, trainer mode, launcher, limits."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from diag.launch import LAUNCHERS
from diag.scaletest.throughput import compile_metric
from reference_trainer.config import MODES


def default_stages(launcher: str, cores: int | None = None) -> tuple[int, ...]:
    """Local stages are process counts on this host: powers of two up to its cores, so a
    drop in efficiency means the job, not an oversubscribed machine. Slurm stages are
    node counts."""
    if launcher == "slurm":
        return (1, 2, 4)
    cores = cores or os.cpu_count() or 1
    stages, n = [], 1
    while n <= max(cores, 2):
        stages.append(n)
        n *= 2
    return tuple(stages)


@dataclass(frozen=True, kw_only=True)
class ScaleTestConfig:
    out: Path
    """Run directory; each stage writes RUN_DIR/stage-<n>/."""
    stages: tuple[int, ...]
    """Process counts (local) or node counts (slurm), strictly increasing."""
    mode: str = "ddp"
    """Reference-trainer parallelism."""
    launcher: str = "local"
    nproc_per_node: int = 1
    """Ranks per node (slurm); local stages set the process count directly."""
    steps: int = 100
    """Trainer steps per stage; the first 5 are warm-up and not measured."""
    batch: int = 8
    """Per-rank micro-batch (weak scaling keeps it fixed)."""
    strong: bool = False
    """Strong scaling: keep the global batch of the first stage instead."""
    stage_timeout_s: float = 300.0
    stall_s: float = 30.0
    """Seconds without progress before the watcher calls a hang."""
    cliff_drop: float = 0.2
    """A stage whose efficiency is more than this fraction below the previous measured
    stage's is a candidate for the cliff (see ``run.locate_cliff``)."""
    keep_going: bool = False
    """Run the later stages after a stage fails."""
    inject: tuple[str, ...] = ()
    """Trainer --inject specs, applied to every stage."""
    env_on: tuple[str, ...] = ()
    """NODE:VAR=VALUE: set VAR on that node for every step of every stage (rehearsal)."""
    master_port: int | None = None
    """Rendezvous port for every launch (default: a fresh one per launch)."""
    slurm_job_id: str | None = None
    """The Slurm allocation every stage runs in (SLURM_JOB_ID): the hang watcher reaches
    ranks on other nodes through ``srun --overlap --jobid`` into it. None: no allocation
    (local launcher, or each srun makes its own)."""
    probes: bool = True
    check_env: bool = True
    trainer_args: tuple[str, ...] = field(default_factory=tuple)
    command: tuple[str, ...] = ()
    """The user's own training command, staged instead of the reference trainer: a script
    and its arguments, ``-m module ...``, or an executable (diag.launch.LaunchSpec.program).
    Empty: the reference trainer."""
    metric: str | None = None
    """Regex over a command's stdout and stderr whose group 1 (or whole match) is the
    throughput it prints; used when the command writes no event logs."""
    shared_cwd: bool = False
    """Run every stage of a command in ``cwd`` itself, as before (--shared-cwd): each
    stage then sees what the earlier ones wrote there. Default: each stage runs in a
    mirror of ``cwd`` of its own (diag.scaletest.workdir)."""
    cwd: Path = field(default_factory=Path.cwd)
    """The user's working directory, where the command was given."""
    sample_s: float = 2.0
    """Seconds between rounds of stack samples of a command's ranks (py-spy
    --nonblocking): the hang watcher's and the straggler count's input."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}, got: {self.mode}")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"--launcher must be {' or '.join(LAUNCHERS)}, got: {self.launcher}")
        if not self.stages or list(self.stages) != sorted(set(self.stages)) or self.stages[0] < 1:
            raise ValueError(f"--stages must be increasing positive counts, e.g. 1,2,4; "
                             f"got: {','.join(map(str, self.stages))}")
        if self.steps < 10 and not self.command:
            raise ValueError(f"--steps must be >= 10 (5 warm-up + measured), got: {self.steps}")
        if self.metric is not None:
            if not self.command:
                raise ValueError("--metric reads the output of your own command: give it "
                                 "after --, e.g. ddiag scale-test --metric REGEX -- train.py")
            compile_metric(self.metric)
        if self.shared_cwd and not self.command:
            raise ValueError("--shared-cwd is about your own command's working directory: "
                             "give the command after --, or drop --shared-cwd")
        if self.mode == "pipeline" and self.stages[0] < 2 and not self.command:
            raise ValueError("--mode pipeline needs at least 2 ranks per stage: start "
                             "--stages at 2")

    @property
    def job(self) -> str:
        """What each stage runs, in a title: the trainer's mode, or the command."""
        if not self.command:
            return self.mode
        text = " ".join(self.command)
        return text if len(text) <= 60 else text[:57] + "..."

    def world_size(self, stage: int) -> int:
        return stage * self.nproc_per_node if self.launcher == "slurm" else stage

    def per_rank_batch(self, stage: int) -> int:
        if not self.strong:
            return self.batch
        first = self.world_size(self.stages[0])
        return max(1, self.batch * first // self.world_size(stage))
