"""Runs the watcher beside a live job: poll heartbeats, and on a hang capture the
evidence, analyse it, and optionally end the job. Called by ``ddiag watch`` and by
scale-test for every stage."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from diag.format import schema
from diag.format.heartbeat import scan_beats
from diag.format.infile import open_regular
from diag.format.rundir import RunDir
from diag.watch.decide import Alarm, Watcher
from diag.watch.capture import (Capture, Gate, Refusal, capture_stack, end_job,
                                request_fr_dumps, write_replacing)

FR_WAIT_S = 3.0
DIR_APPEAR_S = 60.0  # how long a run directory that is not there yet may take to appear
_DOING = {"fr_dump": "ask for a Flight Recorder dump of", "stack": "trace", "kill": "end"}


@dataclass
class WatchResult:
    """What a watch ended with. ``alarm`` is None when the job finished or the watch
    timed out without a hang."""

    run_dir: str
    alarm: Alarm | None = None
    captures: list[Capture] = field(default_factory=list)
    fr_requested: list[int] = field(default_factory=list)
    analysis: object | None = None
    killed: list[int] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    malformed: dict[str, str] = field(default_factory=dict)  # heartbeat path -> why
    ended: str = ""

    def to_json(self) -> dict:
        return {**schema.stamp(schema.WATCH), "run_dir": self.run_dir, "ended": self.ended,
                "alarm": self.alarm.to_json() if self.alarm else None,
                "captures": [{"rank": c.rank, "path": str(c.path) if c.path else None,
                              "error": c.error} for c in self.captures],
                "fr_requested": self.fr_requested, "killed": self.killed,
                "refused": [r.to_json() for r in self.refused],
                "malformed": [{"path": p, "reason": why} for p, why in self.malformed.items()],
                "verdict": _verdict(self.analysis)}


def _verdict(analysis) -> dict | None:
    if analysis is None or not analysis.findings:
        return None
    return analysis.findings[0].to_json()


def wait_for_dir(run_dir: Path, limit_s: float, poll_s: float = 0.2) -> bool:
    """Whether ``run_dir`` is a directory within ``limit_s``: watch may start together
    with the job that creates it, but a wrong path must not mean waiting forever."""
    deadline = time.monotonic() + limit_s
    while not run_dir.is_dir():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def job_finished(run_dir: Path, ranks: set[int]) -> bool:
    """Every rank that beat has written its clean-shutdown record."""
    events = RunDir(run_dir).path("events")
    for rank in ranks:
        try:
            with open_regular(events / f"rank{rank:05d}.jsonl") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4096))
                if b'"kind":"close"' not in fh.read():
                    return False
        except OSError:
            return False
    return bool(ranks)


# A poll reads every rank's heartbeat (each rank rewrites its own every second): about
# 40 us a rank, 0.16 s of CPU at 4096 ranks. The watcher shares the login node with the
# job's own tooling, so past small jobs it polls less often rather than cost more than
# this share of a core; a hang is still caught within a tenth of the stall window.
POLL_CPU_SHARE = 0.03


def poll_interval(poll_s: float, stall_s: float, poll_cpu_s: float,
                  cpu_share: float | None = POLL_CPU_SHARE) -> float:
    """The pause after a poll that cost ``poll_cpu_s`` of CPU: ``poll_s``, or longer so
    that polling stays under ``cpu_share`` of a core, but never past stall_s / 10."""
    if cpu_share is None:
        return poll_s
    return max(poll_s, min(poll_cpu_s / cpu_share, stall_s / 10))


def watch(run_dir: Path, stall_s: float = 60.0, *, kill: bool = False, poll_s: float = 0.5,
          timeout_s: float | None = None, same_point_s: float | None = None,
          status: Callable[[str], None] = lambda _: None,
          stop: Callable[[], bool] = lambda: False,
          slurm_job_id: str | None = None,
          warn: Callable[[str], None] | None = None,
          cpu_share: float | None = POLL_CPU_SHARE) -> WatchResult:
    """Watch until a hang (then respond), the job finishing, ``stop()`` (the caller saw
    the job exit), or ``timeout_s``. ``slurm_job_id`` is the allocation the ranks run in,
    through which stacks of ranks on other nodes are captured (default: SLURM_JOB_ID).
    ``warn`` (default: ``status``) hears once of each malformed heartbeat. Polls every
    ``poll_s``, or less often when that would cost more than ``cpu_share`` of a core
    (``poll_interval``; None: always ``poll_s``)."""
    watcher = Watcher(stall_s, same_point_s)
    result = WatchResult(str(run_dir))
    last_line = None
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None
    while deadline is None or time.monotonic() < deadline:
        cpu = time.process_time()
        beats, malformed = scan_beats(run_dir)
        _note_malformed(result, malformed, warn or status)
        if (beats and job_finished(run_dir, set(beats))) or stop():
            result.ended = "job finished"
            return result
        alarm = watcher.observe(beats, time.time())
        if alarm is not None:
            respond(run_dir, alarm, result, kill, status, slurm_job_id)
            return result
        line = _status_line(beats)
        if line != last_line:
            status(line)
            last_line = line
        pause = poll_interval(poll_s, stall_s, time.process_time() - cpu, cpu_share)
        if deadline is not None:
            pause = max(0.0, min(pause, deadline - time.monotonic()))
        time.sleep(pause)
    result.ended = "watch timed out"
    return result


def respond(run_dir: Path, alarm: Alarm, result: WatchResult, kill: bool,
            status: Callable[[str], None], slurm_job_id: str | None = None) -> None:
    from diag.analyze import analyze

    result.alarm, result.ended = alarm, "hang detected"
    status(f"hang: ranks {list(alarm.laggards)} lag ({alarm.reason}); capturing stacks")
    gate = Gate(run_dir, slurm_job_id)
    result.fr_requested = request_fr_dumps(gate, alarm.beats)
    result.captures = [capture_stack(gate, b) for _, b in sorted(alarm.beats.items())]
    _wait_for_fr(run_dir, result.fr_requested, alarm.detected_at)
    result.analysis = analyze(run_dir)
    if kill:
        result.killed = end_job(gate, alarm.beats)
    result.refused = gate.refused
    for r in gate.refused:
        status(f"did not {_DOING[r.action]} rank {r.rank}: {r.reason}")
    write_replacing(run_dir / "watch.json",
                    json.dumps(result.to_json(), indent=2, default=str))


def _note_malformed(result: WatchResult, malformed: dict, warn: Callable[[str], None]) -> None:
    for path, why in malformed.items():
        if str(path) not in result.malformed:
            result.malformed[str(path)] = why
            warn(f"ignoring malformed heartbeat {path}: {why}")


def _wait_for_fr(run_dir: Path, ranks: list[int], since: float) -> None:
    deadline = time.monotonic() + FR_WAIT_S
    paths = [RunDir(run_dir).path("fr", r, ".json") for r in ranks]
    while time.monotonic() < deadline:
        if all(p.exists() and p.stat().st_mtime >= since - 1 for p in paths):
            return
        time.sleep(0.1)


def _status_line(beats) -> str:
    if not beats:
        return "waiting for heartbeats"
    steps = [b.step for b in beats.values()]
    # Coarse on purpose: a line per ten steps, not per poll.
    return f"{len(beats)} ranks, steps {min(steps) // 10 * 10}..{max(steps) // 10 * 10}+"
