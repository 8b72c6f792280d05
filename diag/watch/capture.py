"""The watcher's edges: stacks with py-spy, Flight Recorder dumps by signal, ending a job.

Every rank's heartbeat names its pid and host. Ranks on this host are reached directly;
ranks on other nodes of a Slurm job through ``srun --overlap`` onto their node. Either way
nothing is signalled or traced before ``diag.watch.verify`` has checked, where the pid
lives, that it is a rank of this run (``Gate``); what it refuses is reported.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from diag.format.heartbeat import RankBeat
from diag.format.infile import open_regular
from diag.format.rundir import RunDir
from diag.launch import STOP_GRACE_S, stop
from diag.watch import verify

PYSPY_TIMEOUT_S = 20.0
FR_SIGNAL = "SIGUSR1"  # the only signal a Flight Recorder dump is ever requested with
_HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


@dataclass(frozen=True)
class Capture:
    rank: int
    path: Path | None
    error: str | None


@dataclass(frozen=True)
class Refusal:
    """An action ddiag watch would not take on a rank's pid, and why."""

    rank: int
    pid: object  # as the heartbeat named it
    host: str | None
    action: str  # "fr_dump", "stack" or "kill"
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


class Gate:
    """Lets the watcher act only on pids verified as this run's ranks
    (``diag.watch.verify``): here before acting, on another node by the same check run
    there in front of the command. Keeps every refusal."""

    def __init__(self, run_dir: Path, job_id: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.job_id = job_id or os.environ.get("SLURM_JOB_ID")
        self.refused: list[Refusal] = []
        self._why: dict[int, str | None] = {}

    def refuse(self, beat: RankBeat, action: str, reason: str) -> str:
        self.refused.append(Refusal(beat.rank, beat.pid, beat.host, action, reason))
        return f"refused: {reason}"

    def verified_here(self, beat: RankBeat, action: str) -> str | None:
        """None when ``beat`` names a rank of this run on this host; else the refusal."""
        if beat.rank not in self._why:
            self._why[beat.rank] = verify.why_not_rank(
                str(self.run_dir), beat.rank, beat.pid, rank_started(self.run_dir, beat))
        why = self._why[beat.rank]
        return self.refuse(beat, action, why) if why else None

    def command(self, beat: RankBeat, action: str, argv: list[str]) -> tuple[list | None, str]:
        """``argv`` to run against the rank, or None and why not: here once verified;
        on another node behind the check, through ``srun --overlap``."""
        if local(beat):
            why = self.verified_here(beat, action)
            return (None, why) if why else (argv, "")
        if not _HOSTNAME.fullmatch(beat.host) or type(beat.pid) is not int or beat.pid <= 1:
            return None, self.refuse(beat, action, f"host {beat.host!r} / pid {beat.pid!r} "
                                                   "cannot name a rank on another node")
        cmd = on_node(beat, guarded_cmd(self.run_dir, beat, argv), self.job_id)
        if cmd is None:
            return None, (f"rank {beat.rank} runs on {beat.host}: run ddiag watch inside the "
                          "job's Slurm allocation to reach it")
        return cmd, ""

    def run(self, beat: RankBeat, action: str,
            argv: list[str]) -> tuple[subprocess.CompletedProcess | None, str]:
        """Run ``argv`` against the rank: (CompletedProcess, "") or (None, why not)."""
        cmd, why = self.command(beat, action, argv)
        if cmd is None:
            return None, why
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=PYSPY_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{Path(argv[0]).name}: {exc}"
        if res.returncode == verify.REFUSED_EXIT and not local(beat):
            said = [line for line in res.stderr.splitlines() if line.startswith("refused: ")]
            reason = said[-1].removeprefix("refused: ") if said else res.stderr.strip()
            return None, self.refuse(beat, action, f"on {beat.host}: {reason[:300]}")
        return res, ""


def rank_started(run_dir: Path, beat: RankBeat) -> float | None:
    """When the rank's process says it began: its heartbeat's ``started``, or, from a
    ddiag that did not write it, its event log header's time when that names the pid."""
    if beat.started is not None:
        return beat.started
    try:
        with open_regular(RunDir(run_dir).events(beat.rank)) as fh:
            header = json.loads(fh.readline(65536))
    except (OSError, ValueError):
        return None
    if not isinstance(header, dict) or header.get("pid") != beat.pid:
        return None
    t = header.get("t")
    return float(t) if type(t) in (int, float) else None


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


def guarded_cmd(run_dir: Path, beat: RankBeat, argv: list[str]) -> list[str]:
    """``argv`` behind ``diag.watch.verify``'s check of the beat's pid, as one command
    for the rank's node: the check runs where the pid lives. Assumes this Python at the
    same path there, as the ranks' own ddiag does."""
    started = rank_started(run_dir, beat)
    return [sys.executable, "-c", Path(verify.__file__).read_text(),
            str(Path(run_dir).resolve()), str(beat.rank), str(beat.pid),
            "-" if started is None else repr(started), *argv]


def pyspy_argv(pid: int) -> list[str]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [spy, "dump", "--pid", str(pid), "--json"]


def pyspy_failure(returncode: int, stderr: str) -> str:
    """What a failed py-spy run says, with the fix when it lacked ptrace rights."""
    hint = (" (py-spy needs ptrace rights: run as root, or add SYS_PTRACE to the "
            "container)" if "ermission" in stderr else "")
    return f"py-spy exit {returncode}: {stderr.strip()[:300]}{hint}"


def pyspy_dump(pid: int, nonblocking: bool = False) -> tuple[str | None, str | None]:
    """``py-spy dump --json`` of a process on this host, already verified by the caller:
    (its JSON text, None) or (None, why not). ``nonblocking`` reads the process's memory
    without stopping it."""
    argv = [*pyspy_argv(pid), *(["--nonblocking"] if nonblocking else [])]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=PYSPY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"py-spy: {exc}"
    if res.returncode != 0:
        return None, pyspy_failure(res.returncode, res.stderr)
    return res.stdout, None


def capture_stack(gate: Gate, beat: RankBeat) -> Capture:
    """``py-spy dump --json`` of one verified rank into RUN_DIR/stacks/rankNNNNN.json."""
    res, why = gate.run(beat, "stack", pyspy_argv(beat.pid))
    if res is None:
        return Capture(beat.rank, None, why)
    if res.returncode != 0:
        return Capture(beat.rank, None, pyspy_failure(res.returncode, res.stderr))
    out = RunDir(gate.run_dir).path("stacks", beat.rank, ".json")
    write_replacing(out, res.stdout)
    return Capture(beat.rank, out, None)


def write_replacing(path: Path, text: str) -> None:
    """Write aside, then rename over ``path``: a symlink planted at ``path`` is replaced,
    never written through (the watcher runs as root in a directory others write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def request_fr_dumps(gate: Gate, beats: dict[int, RankBeat]) -> list[int]:
    """SIGUSR1 to every verified rank that advertises a Flight Recorder dump handler. A
    rank without one is never signalled: SIGUSR1's default action would kill it. A
    heartbeat naming any other signal is refused: the heartbeat only says yes or no."""
    sent = []
    for rank, beat in sorted(beats.items()):
        if beat.fr_signal is None:
            continue
        if beat.fr_signal != FR_SIGNAL:
            gate.refuse(beat, "fr_dump", f"fr_signal {beat.fr_signal!r}: {FR_SIGNAL} is the "
                                         "only Flight Recorder signal ddiag sends")
            continue
        if local(beat):
            if gate.verified_here(beat, "fr_dump") is None and \
                    signal_pid(beat.pid, signal.SIGUSR1):
                sent.append(rank)
            continue
        res, _ = gate.run(beat, "fr_dump", ["kill", f"-{FR_SIGNAL[3:]}", str(beat.pid)])
        if res is not None and res.returncode == 0:
            sent.append(rank)
    return sent


def end_job(gate: Gate, beats: dict[int, RankBeat], grace_s: float = STOP_GRACE_S
            ) -> list[int]:
    """SIGTERM every verified local rank (their handlers flush logs and dump), SIGKILL
    those still running after ``grace_s``; under Slurm, ``scancel`` the job instead."""
    if os.environ.get("SLURM_JOB_ID") and not all(local(b) for b in beats.values()):
        subprocess.run(["scancel", os.environ["SLURM_JOB_ID"]], capture_output=True, timeout=30)
        return sorted(beats)
    # The start time tells the rank from a process that took its pid after it exited.
    pids = {r: (b.pid, verify.start_ticks(b.pid)) for r, b in beats.items()
            if local(b) and gate.verified_here(b, "kill") is None}

    def send(signum: int) -> None:
        for pid, began in pids.values():
            if began is not None and verify.start_ticks(pid) == began:
                signal_pid(pid, signum)

    def ended(seconds: float | None) -> bool:
        deadline = time.monotonic() + (float("inf") if seconds is None else seconds)
        while any(_alive(p) for p, _ in pids.values()):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    stop(send, ended, grace_s, kill_wait_s=0.0)
    return sorted(pids)


def signal_pid(pid: int, signum: int) -> bool:
    """Send ``signum`` to one verified process; False when it is gone or not ours."""
    if type(pid) is not int or pid <= 1:  # a group, every process, or init: never
        raise ValueError(f"refusing to signal pid {pid!r}")
    try:
        os.kill(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
