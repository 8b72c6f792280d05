"""The watcher's edges: stacks with py-spy, Flight Recorder dumps by signal, ending a job.

Every rank's heartbeat names its pid and host. Ranks on this host are reached directly;
ranks on other nodes of a Slurm job through ``srun --overlap`` onto their node.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from diag.rundir import RunDir
from diag.watch import RankBeat

PYSPY_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Capture:
    rank: int
    path: Path | None
    error: str | None


def local(beat: RankBeat) -> bool:
    return beat.host in (None, socket.gethostname())


def on_node(beat: RankBeat, cmd: list[str], job_id: str | None = None) -> list[str] | None:
    """``cmd`` to run where the rank runs: here, or on its node through a Slurm step that
    overlaps the job's own (``job_id``, default this process's SLURM_JOB_ID). None when
    the rank is remote and no Slurm job is known."""
    if local(beat):
        return cmd
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    return ["srun", "--overlap", f"--jobid={job_id}", "-N1", "-n1",
            f"--nodelist={beat.host}", *cmd]


def pyspy_cmd(beat: RankBeat, job_id: str | None = None) -> list[str] | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return on_node(beat, [spy, "dump", "--pid", str(beat.pid), "--json"], job_id)


def capture_stack(run_dir: Path, beat: RankBeat, job_id: str | None = None) -> Capture:
    """``py-spy dump --json`` of one rank into RUN_DIR/stacks/rankNNNNN.json."""
    out = RunDir(run_dir).path("stacks", beat.rank, ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = pyspy_cmd(beat, job_id)
    if cmd is None:
        return Capture(beat.rank, None, f"rank {beat.rank} runs on {beat.host}: run ddiag "
                                        "watch inside the job's Slurm allocation to reach it")
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=PYSPY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Capture(beat.rank, None, f"py-spy: {exc}")
    if res.returncode != 0:
        hint = (" (py-spy needs ptrace rights: run as root, or add SYS_PTRACE to the "
                "container)" if "ermission" in res.stderr else "")
        return Capture(beat.rank, None, f"py-spy exit {res.returncode}: "
                                        f"{res.stderr.strip()[:300]}{hint}")
    out.write_text(res.stdout)
    return Capture(beat.rank, out, None)


def request_fr_dumps(beats: dict[int, RankBeat], job_id: str | None = None) -> list[int]:
    """Signal every local rank that advertises a Flight Recorder dump handler. A rank
    without one is never signalled: SIGUSR1's default action would kill it."""
    sent = []
    for rank, beat in sorted(beats.items()):
        if not (beat.fr_signal and beat.pid and hasattr(signal, beat.fr_signal)):
            continue
        if local(beat):
            _signal(beat.pid, getattr(signal, beat.fr_signal))
            sent.append(rank)
        elif (cmd := on_node(beat, ["kill", f"-{beat.fr_signal[3:]}", str(beat.pid)], job_id)):
            subprocess.run(cmd, capture_output=True, timeout=PYSPY_TIMEOUT_S)
            sent.append(rank)
    return sent


def end_job(beats: dict[int, RankBeat], grace_s: float = 10.0) -> list[int]:
    """SIGTERM every local rank (their handlers flush logs and dump), SIGKILL the rest
    after ``grace_s``; under Slurm, ``scancel`` the job step instead."""
    if os.environ.get("SLURM_JOB_ID") and not all(local(b) for b in beats.values()):
        subprocess.run(["scancel", os.environ["SLURM_JOB_ID"]], capture_output=True, timeout=30)
        return sorted(beats)
    pids = {r: b.pid for r, b in beats.items() if b.pid and local(b)}
    for pid in pids.values():
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids.values()):
        time.sleep(0.1)
    for pid in pids.values():
        _signal(pid, signal.SIGKILL)
    return sorted(pids)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
