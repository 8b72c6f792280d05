"""Running one stage: check-env, probes, then the trainer with the watcher beside it.

Everything is launched through real engines: torchrun on this host, or srun steps inside
a Slurm allocation (the CLI starts one with salloc when there is none). Each stage's
process group is killed as a whole when it ends, times out or hangs, so no rank outlives
its stage.
"""

from __future__ import annotations

import enum
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from diag.launch import stop_group
from diag.scaletest.config import ScaleTestConfig


@dataclass
class StepOutcome:
    name: str
    ok: bool
    seconds: float
    detail: str = ""
    doc: dict | None = None


class StageStatus(str, enum.Enum):
    """How a stage ended; the value is what scale-test.json says."""

    OK = "ok"
    HANG = "hang"
    """The watcher saw ranks stop making progress and ended the stage."""
    FAILED = "failed"
    """The trainer exited non-zero or timed out, with no hang seen."""
    CHECK_ENV_FAILED = "check-env failed"
    """check-env reported a failure: the trainer was not started."""


@dataclass
class StageRun:
    stage: int
    world_size: int
    run_dir: Path
    steps: list[StepOutcome] = field(default_factory=list)
    trainer: dict | None = None
    hang: dict | None = None
    status: StageStatus = StageStatus.OK
    reason: str = ""
    busiest: tuple[str, int, int] | None = None
    """(node, ranks, cores) of the node with the most ranks per core, from check-env's
    snapshots; None without them."""


def ddiag_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "diag.cli", *args]


def launch_args(cfg: ScaleTestConfig, stage: int) -> list[str]:
    extra = [a for spec in cfg.env_on for a in ("--env-on", spec)]
    if cfg.master_port:
        extra += ["--master-port", str(cfg.master_port)]
    if cfg.launcher == "local":
        return ["--launcher", "local", "--nproc-per-node", str(stage), *extra]
    return ["--launcher", "slurm", "--nodes", str(stage),
            "--nproc-per-node", str(cfg.nproc_per_node), *extra]


def run_tool(name: str, cmd: list[str], timeout: float, log_dir: Path) -> StepOutcome:
    """A ddiag sub-command with --json, its output kept in the stage's logs/. A probe
    that ran and flagged something exits 1 with its report: that is a result (analyze
    reads it), not a failure to run."""
    start = time.monotonic()
    res = _run_group(cmd, timeout, log_dir / f"{name}.out", log_dir / f"{name}.err")
    doc = _json_or_none(res[1])
    ran = res[0] == 0 or (name.startswith("probe") and res[0] == 1)
    ok = ran and doc is not None
    detail = "" if ok else (f"exit {res[0]}: " + _tail(res[2]))
    return StepOutcome(name, ok, time.monotonic() - start, detail, doc)


def _run_group(cmd: list[str], timeout: float, out: Path, err: Path,
               env: dict | None = None) -> tuple[int, str, str]:
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or _env(), start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        stdout, stderr = proc.communicate()
        stderr += f"\nddiag scale-test: stopped after {timeout:.0f} s"
    except BaseException:
        stop_group(proc)
        raise
    out.write_text(stdout)
    err.write_text(stderr)
    return proc.returncode, stdout, stderr


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1"}


def _json_or_none(text: str) -> dict | None:
    """The JSON document a tool printed: the whole output, or its last JSON line (the
    trainer prints log lines before its one-line summary)."""
    candidates = [text] + [line for line in reversed(text.strip().splitlines())
                           if line.startswith("{")]
    for candidate in candidates:
        try:
            doc = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def _tail(text: str, n: int = 400) -> str:
    return " ".join(text.strip().splitlines()[-3:])[-n:]


def injections_for(specs: tuple[str, ...], world_size: int) -> list[str]:
    """The --inject specs whose rank exists at this stage's world size (a fault on rank 5
    applies from the stage with 6 ranks on)."""
    keep = []
    for spec in specs:
        match = re.search(r"(?:^|:)rank=(\d+)", spec)
        if match is None or int(match.group(1)) < world_size:
            keep.append(spec)
    return keep


def trainer_cmd(cfg: ScaleTestConfig, stage: int, run_dir: Path
                ) -> tuple[list[str], dict[str, str]]:
    """The trainer launched the way check-env and the probes launch their ranks
    (diag.launch: torchrun here, or srun with one torchrun per node)."""
    from diag.launch import LaunchSpec, command, parse_env_on

    args = ["--mode", cfg.mode, "--steps", str(cfg.steps),
            "--batch", str(cfg.per_rank_batch(stage)), "--out", str(run_dir), "--json",
            "--timeout-s", str(int(min(cfg.stage_timeout_s, 600))), *cfg.trainer_args]
    if cfg.mode == "pipeline":
        args += ["--pp", "2"]
    for spec in injections_for(cfg.inject, cfg.world_size(stage)):
        args += ["--inject", spec]
    local = cfg.launcher == "local"
    launch = LaunchSpec(cfg.launcher, nodes=1 if local else stage,
                        nproc_per_node=stage if local else cfg.nproc_per_node,
                        env_on=parse_env_on(cfg.env_on), master_port=cfg.master_port,
                        timeout_s=cfg.stage_timeout_s)
    argv, env = command(launch, "reference_trainer", args)
    return argv, {**env, **_env()}


def run_trainer(cfg: ScaleTestConfig, stage: int, run_dir: Path,
                status: Callable[[str], None]) -> tuple[StepOutcome, dict | None]:
    """The trainer with the hang watcher beside it; a hang or a timeout ends the stage."""
    from diag.watch.loop import watch

    start = time.monotonic()
    log_dir = run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    argv, env = trainer_cmd(cfg, stage, run_dir)
    proc = subprocess.Popen(argv, env=env, text=True,
                            stdout=open(log_dir / "trainer.out", "w"),
                            stderr=open(log_dir / "trainer.err", "w"), start_new_session=True)
    hang: dict = {}
    watcher = threading.Thread(target=_watch_into, daemon=True, args=(
        watch, run_dir, cfg, proc, hang, status))
    watcher.start()
    try:
        proc.wait(timeout=cfg.stage_timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:
        stop_group(proc)
        raise
    stop_group(proc)
    watcher.join(timeout=60)
    return _trainer_outcome(proc, run_dir, start, timed_out, hang), hang.get("doc")


def _watch_into(watch, run_dir, cfg, proc, hang: dict, status) -> None:
    result = watch(run_dir, cfg.stall_s, kill=False, timeout_s=cfg.stage_timeout_s,
                   stop=lambda: proc.poll() is not None, status=lambda line: None,
                   slurm_job_id=cfg.slurm_job_id)
    if result.alarm is not None:
        hang["doc"] = result.to_json()
        status(f"hang: ranks {list(result.alarm.laggards)} lag; ending the stage")
        stop_group(proc)


def _trainer_outcome(proc, run_dir: Path, start: float, timed_out: bool, hang: dict
                     ) -> StepOutcome:
    seconds = time.monotonic() - start
    out = (run_dir / "logs" / "trainer.out").read_text()
    doc = _json_or_none(out)
    if hang:
        return StepOutcome("trainer", False, seconds, "hang detected by the watcher", doc)
    if timed_out:
        return StepOutcome("trainer", False, seconds, "stage timed out", doc)
    if proc.returncode != 0:
        err = (run_dir / "logs" / "trainer.err").read_text()
        return StepOutcome("trainer", False, seconds, f"exit {proc.returncode}: {_tail(err)}", doc)
    return StepOutcome("trainer", True, seconds, "", doc)
