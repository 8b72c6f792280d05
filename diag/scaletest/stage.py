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

from diag.analyze.busywait import BusyTally, straggler
from diag.format import schema
from diag.launch import STEPS_END_S, stop_group, wait_steps_ended
from diag.scaletest.config import ScaleTestConfig
from diag.scaletest.workdir import StageFiles
from diag.verdict import Finding

KILL_MARKER = "killed.json"  # diag/watch/sampled.py writes the same for watch --kill
SAMPLES_FILE = "stack-samples.json"
"""A command's stage: what its rounds of stack samples showed (busywait.BusyTally)."""


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
    NO_METRIC = "no metric"
    """The command ran, wrote no event logs, and --metric matched no number in its
    output: the stage has no throughput."""
    TRAINED_NOTHING = "trained nothing"
    """The command exited 0 but did less work than the previous stage (it resumed a
    checkpoint, or recorded no step): its number is no speed-up, and efficiency and the
    cliff leave it out (diag.scaletest.progress)."""


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
    findings: list[Finding] = field(default_factory=list)
    """From the stage's stack samples (a command's straggler); analyze adds its own."""
    files: StageFiles | None = None
    """What a command wrote where it ran (and in the user's directory); None for the
    reference trainer, which writes only into its run directory."""


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


def _launch(cfg: ScaleTestConfig, stage: int, program: tuple[str, ...] = ()):
    from diag.launch import LaunchSpec, parse_env_on

    local = cfg.launcher == "local"
    return LaunchSpec(cfg.launcher, nodes=1 if local else stage,
                      nproc_per_node=stage if local else cfg.nproc_per_node,
                      env_on=parse_env_on(cfg.env_on), master_port=cfg.master_port,
                      timeout_s=cfg.stage_timeout_s, program=program)


def trainer_cmd(cfg: ScaleTestConfig, stage: int, run_dir: Path
                ) -> tuple[list[str], dict[str, str]]:
    """The trainer launched the way check-env and the probes launch their ranks
    (diag.launch: torchrun here, or srun with one torchrun per node)."""
    from diag.launch import command

    args = ["--mode", cfg.mode, "--steps", str(cfg.steps),
            "--batch", str(cfg.per_rank_batch(stage)), "--out", str(run_dir), "--json",
            "--timeout-s", str(int(min(cfg.stage_timeout_s, 600))), *cfg.trainer_args]
    if cfg.mode == "pipeline":
        args += ["--pp", "2"]
    for spec in injections_for(cfg.inject, cfg.world_size(stage)):
        args += ["--inject", spec]
    argv, env = command(_launch(cfg, stage), "reference_trainer", args)
    return argv, {**env, **_env()}


def command_cmd(cfg: ScaleTestConfig, stage: int, run_dir: Path
                ) -> tuple[list[str], dict[str, str]]:
    """The user's command, launched as the trainer is; DDIAG_RUN_DIR names the stage's
    directory, so a command that uses the decorator writes its event logs there. PWD
    names the folder it runs in (a shell would set it; Popen's cwd does not)."""
    from diag.launch import command

    argv, env = command(_launch(cfg, stage, cfg.command), None, ())
    return argv, {**env, **_env(), "DDIAG_RUN_DIR": str(run_dir.resolve()),
                  "PWD": str(stage_cwd(cfg, stage))}


def stage_cwd(cfg: ScaleTestConfig, stage: int) -> Path:
    """Where a command's stage runs: the user's directory (--shared-cwd), or its own
    mirror of it beside the stage's run directory."""
    from diag.scaletest.workdir import mirror_path

    return cfg.cwd.resolve() if cfg.shared_cwd else mirror_path(cfg.out.resolve(), stage)


def job_cmd(cfg: ScaleTestConfig, stage: int, run_dir: Path
            ) -> tuple[str, list[str], dict[str, str]]:
    """What the stage runs after its pre-flight tools, by name: ``command`` (the user's)
    or ``trainer`` (the reference trainer)."""
    if cfg.command:
        return ("command", *command_cmd(cfg, stage, run_dir))
    return ("trainer", *trainer_cmd(cfg, stage, run_dir))


def run_trainer(cfg: ScaleTestConfig, stage: int, run_dir: Path,
                status: Callable[[str], None], tally: BusyTally | None = None
                ) -> tuple[StepOutcome, dict | None]:
    """The trainer (or the command) with the hang watcher beside it; a hang or a timeout
    ends the stage. A command is watched from outside (its stacks sampled, each round
    into ``tally``): under the launched torchrun here, on every node of the allocation
    under Slurm; the reference trainer by the decorator's heartbeats."""
    start = time.monotonic()
    log_dir = run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    name, argv, env = job_cmd(cfg, stage, run_dir)
    cwd = stage_cwd(cfg, stage) if cfg.command else None
    proc = subprocess.Popen(argv, env=env, text=True, cwd=cwd,
                            stdout=open(log_dir / f"{name}.out", "w"),
                            stderr=open(log_dir / f"{name}.err", "w"), start_new_session=True)
    hang: dict = {}
    watcher = _watcher(run_dir, cfg, proc, hang, status, tally)
    watcher.start()
    try:
        proc.wait(timeout=cfg.stage_timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        hang.setdefault("stopped_at", time.time())
    except BaseException:
        stop_group(proc)
        raise
    seconds = time.monotonic() - start  # the job's own time: a command's wall throughput
    stop_group(proc)
    watcher.join(timeout=60)
    if "stopped_at" in hang:
        _mark_ended(run_dir, hang, timed_out, cfg.stage_timeout_s)
    if cfg.slurm_job_id and not wait_steps_ended(cfg.slurm_job_id):
        status(f"job {cfg.slurm_job_id}: steps still running {STEPS_END_S:.0f} s after "
               "the stage ended (squeue -s)")
    return _trainer_outcome(name, proc, run_dir, seconds, timed_out, hang), hang.get("doc")


def _watcher(run_dir, cfg, proc, hang: dict, status, tally) -> threading.Thread:
    if cfg.command and (cfg.launcher == "local" or cfg.slurm_job_id):
        return threading.Thread(target=_watch_sampled_into, daemon=True,
                                args=(run_dir, cfg, proc, hang, status, tally))
    from diag.watch.loop import watch

    return threading.Thread(target=_watch_into, daemon=True,
                            args=(watch, run_dir, cfg, proc, hang, status))


def _watch_into(watch, run_dir, cfg, proc, hang: dict, status) -> None:
    result = watch(run_dir, cfg.stall_s, kill=False, timeout_s=cfg.stage_timeout_s,
                   stop=lambda: proc.poll() is not None, status=lambda line: None,
                   slurm_job_id=cfg.slurm_job_id)
    if result.alarm is not None:
        hang["doc"] = result.to_json()
        status(f"hang: ranks {list(result.alarm.laggards)} lag; ending the stage")
        hang["stopped_at"] = time.time()
        stop_group(proc)


def _watch_sampled_into(run_dir, cfg, proc, hang: dict, status, tally) -> None:
    """The watcher for a job without heartbeats: stacks and CPU time of the ranks under
    the launched torchrun, or, under Slurm, of the ranks in the allocation the stage is a
    step of (on every node); on a hang their stacks land in the stage's stacks/."""
    from diag.watch.sampled import watch_pid
    from diag.watch.slurmstacks import SlurmJobError
    from diag.watch.slurmwatch import watch_job

    hooks = dict(sample_s=cfg.sample_s, timeout_s=cfg.stage_timeout_s,
                 status=lambda line: None, on_sample=tally.add if tally is not None else None,
                 stop=lambda: proc.poll() is not None,
                 progress=lambda: _output_size(run_dir / "logs"))
    try:
        result = watch_pid(proc.pid, run_dir, cfg.stall_s, **hooks) \
            if cfg.launcher == "local" else watch_job(cfg.slurm_job_id, run_dir, cfg.stall_s,
                                                      **hooks)
    except SlurmJobError as exc:  # the allocation went away under the stage
        status(f"watcher: {exc}")
        return
    if result.alarm is not None:
        hang["doc"] = result.to_json()
        status(f"hang: {result.alarm.reason}; ending the stage")
        hang["stopped_at"] = time.time()
        stop_group(proc)


def _mark_ended(run_dir: Path, hang: dict, timed_out: bool, timeout_s: float) -> None:
    """The stage's killed.json (``ddiag.watch_kill``, as ``watch --kill`` writes it): the
    scale test ended this job, so what the job printed while dying (SIGTERM, torchrun's
    ChildFailedError) is read by analyze as a symptom of why, not as an incident."""
    doc = hang.get("doc") or {}
    why = (f"the stage ran past its --stage-timeout of {timeout_s:g} s" if timed_out and
           not doc else (doc.get("alarm") or {}).get("reason") or "the hang watcher alarmed")
    found = (doc.get("alarm") or {}).get("finding") or doc.get("verdict") or {}
    verdict = found.get("category") if isinstance(found, dict) else None
    marker = {**schema.stamp(schema.WATCH_KILL), "t": hang["stopped_at"],
              "ended_at": time.time(), "by": "ddiag scale-test", "target": str(run_dir),
              "signal": "SIGTERM", "then": "SIGKILL", "ranks": [], "pids": [],
              "verdict": verdict, "reason": why}
    try:
        (run_dir / KILL_MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    except OSError:
        pass  # the marker helps analyze; the stage's result stands without it


def _output_size(log_dir: Path) -> int:
    """Bytes the command has printed so far: a job that prints is making progress."""
    return sum(p.stat().st_size for p in (log_dir / "command.out", log_dir / "command.err")
               if p.exists())


def _trainer_outcome(name: str, proc, run_dir: Path, seconds: float, timed_out: bool,
                     hang: dict) -> StepOutcome:
    # a command's output is the user's: a JSON line there is not our trainer's summary
    doc = _json_or_none((run_dir / "logs" / f"{name}.out").read_text()) \
        if name == "trainer" else None
    if hang:
        return StepOutcome(name, False, seconds, "hang detected by the watcher", doc)
    if timed_out:
        return StepOutcome(name, False, seconds, "stage timed out", doc)
    if proc.returncode != 0:
        err = (run_dir / "logs" / f"{name}.err").read_text()
        if doc is not None and _every_rank_closed(run_dir):
            # trained to the end and said so; a rank then died in gloo's teardown (seen on
            # the lab: "terminate called without an active exception"): the stage's
            # figures stand, and the exit is reported beside them
            return StepOutcome(name, True, seconds, f"exit {proc.returncode} in teardown, "
                               f"after every rank finished: {_tail(err)}", doc)
        return StepOutcome(name, False, seconds, f"exit {proc.returncode}: {_tail(err)}", doc)
    return StepOutcome(name, True, seconds, "", doc)


def _every_rank_closed(run_dir: Path) -> bool:
    """Every rank's event log ends with its ``close`` record: each rank left training."""
    logs = sorted((run_dir / "events").glob("rank*.jsonl"))
    return bool(logs) and all(_last_line(p).startswith('{"kind":"close"') for p in logs)


def _last_line(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 4096))
        lines = f.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


def sampled_findings(run_dir: Path, tally: BusyTally) -> list[Finding]:
    """The straggler the stage's stack samples show, if any; the tally is kept in the
    stage's directory (the finding's evidence points there)."""
    path = run_dir / SAMPLES_FILE
    path.write_text(json.dumps({**schema.stamp(schema.STACK_SAMPLES), **tally.to_json()},
                               indent=2))
    found = straggler(tally, str(path))
    return [found] if found is not None else []
