"""``ddiag watch --pid``: the live watcher for a job that imports nothing of ddiag.

Without heartbeats, progress is read from outside: every rank's CPU time (``/proc``, free)
each poll, and its main thread's Python stack (``py-spy dump --nonblocking``: read out of
the process's memory without stopping it) every ``sample_s``. A rank *moved* when its stack
changed, or when it used more than ``CPU_MOVING`` of a core since the stall began while not
waiting on the others (a rank in a collective may spin: NCCL busy-waits). The watcher
alarms when no rank moved for ``stall_s`` seconds and

- some ranks sit in a collective or in backward (waiting on the others) while some are
  elsewhere (the grouping of diag/analyze/stackgroups.py names them), or
- every rank sits in a collective or backward at the same point, for ``same_point_s``
  (default 10 x ``stall_s``): an all-rank network stall looks like this, a long collective
  too.

Ranks that all pause in their own code (a checkpoint, a sleep, I/O) are not waiting on one
another: no alarm, however long. On an alarm the stacks are captured (blocking dumps, into
RUN_DIR/stacks), grouped and analysed, and with ``kill`` the ranks and their forks end.

Known limit: the NCCL path (ranks that busy-wait on the GPU) has not run on a GPU here.
"""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from diag.analyze import stackgroups
from diag.format import schema
from diag.launch import STOP_GRACE_S, stop
from diag.verdict import Finding
from diag.watch import discover
from diag.watch.capture import pyspy_dump, signal_pid, write_replacing
from diag.watch.stacks import StackCapture, capture, grouped

CPU_MOVING = 0.2  # of one core, averaged since the stall began: a waiting rank uses ~0
POLL_S = 1.0
RANKS_APPEAR_S = 120.0  # how long the ranks of a starting job may take to appear


@dataclass(frozen=True)
class Sample:
    """One look at one rank: its main-thread stack (None when py-spy could not read it)
    and its process's CPU seconds so far."""

    stack: stackgroups.Stack | None
    cpu_s: float


@dataclass
class PidAlarm:
    reason: str
    stalled_since: float
    detected_at: float
    finding: Finding | None

    def to_json(self) -> dict:
        return {"reason": self.reason, "stalled_since": self.stalled_since,
                "detected_at": self.detected_at,
                "finding": self.finding.to_json() if self.finding else None}


class SampleWatcher:
    """Feeds on samples of every rank; returns a PidAlarm once a hang is established."""

    def __init__(self, stall_s: float, same_point_s: float | None = None) -> None:
        self.stall_s = stall_s
        self.same_point_s = same_point_s if same_point_s is not None else 10 * stall_s
        self._ref: dict[int, Sample] = {}
        self._since: float | None = None

    def reset(self) -> None:
        """The job showed progress some other way (its output grew): start over."""
        self._ref, self._since = {}, None

    def observe(self, samples: dict[int, Sample], now: float) -> PidAlarm | None:
        if not samples:
            return None
        if self._since is None or self._moved(samples, now):
            self._ref, self._since = dict(samples), now
            return None
        stalled = now - self._since
        if stalled < self.stall_s:
            return None
        stacks = [s.stack for s in samples.values() if s.stack is not None]
        groups = stackgroups.group(stacks)
        finding = stackgroups.odd_ones(groups)
        if finding is not None:
            return PidAlarm(f"no rank moved for {stalled:.0f} s; {finding.title}", self._since,
                            now, finding)
        waiting = groups and all(g.state in stackgroups.WAITING for g in groups)
        if waiting and stalled >= self.same_point_s:
            return PidAlarm(f"every rank stopped in {groups[0].state} at the same point for "
                            f"{stalled:.0f} s", self._since, now, None)
        return None

    def _moved(self, samples: dict[int, Sample], now: float) -> bool:
        if set(samples) != set(self._ref):
            return True
        budget = CPU_MOVING * max(now - self._since, 1e-9)
        for rank, s in samples.items():
            ref = self._ref[rank]
            if s.stack is not None and ref.stack is not None and s.stack.frames != ref.stack.frames:
                return True
            # a rank waiting on the others may spin (NCCL's busy-wait): its CPU is no progress
            if s.cpu_s - ref.cpu_s > budget and not _waiting(s.stack):
                return True
        return False


def _waiting(stack: stackgroups.Stack | None) -> bool:
    return stack is not None and stackgroups.state_of(stack.frames)[0] in stackgroups.WAITING


@dataclass
class SampledWatchResult:
    """What a watch of a job without heartbeats ended with; ``target`` is what was watched
    ({"pid": N} or {"slurm_job": "J"})."""

    target: dict
    run_dir: Path
    ranks: list[discover.RankProcess] = field(default_factory=list)
    alarm: PidAlarm | None = None
    captures: list[StackCapture] = field(default_factory=list)
    analysis: object | None = None
    killed: list[int] = field(default_factory=list)
    samples: int = 0
    ended: str = ""

    def to_json(self) -> dict:
        verdict = self.analysis.findings[0].to_json() if self.analysis is not None \
            and self.analysis.findings else None
        return {**schema.stamp(schema.WATCH), "target": self.target,
                "run_dir": str(self.run_dir), "ended": self.ended, "samples": self.samples,
                "ranks": [r.to_json() for r in self.ranks],
                "alarm": self.alarm.to_json() if self.alarm else None,
                "captures": [c.to_json() for c in self.captures], "killed": self.killed,
                "verdict": verdict}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads) so far."""
    stat = discover.proc_stat(pid)
    if stat is None:
        return None
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def sample_stack(proc: discover.RankProcess) -> stackgroups.Stack | None:
    """The rank's main-thread stack read without stopping it (``--nonblocking``)."""
    if not discover.still_rank(proc):
        return None
    dump, _ = pyspy_dump(proc.pid, nonblocking=True)
    try:
        doc = json.loads(dump) if dump is not None else None
    except ValueError:
        return None
    return stackgroups.from_pyspy(doc, proc.rank, "", proc.host) if doc else None


def watch_pid(pid: int, run_dir: Path, stall_s: float = 60.0, *, kill: bool = False,
              sample_s: float | None = None, timeout_s: float | None = None,
              same_point_s: float | None = None,
              status: Callable[[str], None] = lambda _: None,
              on_sample: Callable[[dict[int, stackgroups.Stack | None]], None] | None = None,
              stop: Callable[[], bool] = lambda: False,
              progress: Callable[[], object] | None = None) -> SampledWatchResult:
    """Watch the job under ``pid`` until a hang (then respond), its ranks ending,
    ``stop()`` (the caller saw the job exit), or ``timeout_s``. ``sample_s``: seconds
    between stack samples (default stall_s / 6, between 1 and 15 s); ``on_sample`` hears
    each round of them (rank -> stack, None where py-spy could not read it).
    ``progress``: a reading that changes while the job makes progress (scale-test: the
    size of the job's output, which it owns); a change counts as movement. A rank that
    sleeps or waits on its input in every sample, with the others waiting for it, is a
    slow job, not a hung one, as long as the job still prints."""
    sample_s = sample_s or min(15.0, max(1.0, stall_s / 6))
    result = SampledWatchResult({"pid": pid}, Path(run_dir))
    watcher = SampleWatcher(stall_s, same_point_s)
    start = time.monotonic()
    deadline = start + timeout_s if timeout_s is not None else float("inf")
    stacks: dict[int, stackgroups.Stack | None] = {}
    next_sample, mark = 0.0, None
    while time.monotonic() < deadline:
        procs = None if stop() else _ranks(pid)
        if procs is None or (not procs and result.ranks):
            result.ended = "job finished"
            return result
        if not procs:
            if time.monotonic() - start > RANKS_APPEAR_S:
                result.ended = f"no rank appeared under pid {pid} in {RANKS_APPEAR_S:g} s"
                return result
            time.sleep(POLL_S)
            continue
        if [p.pid for p in procs] != [p.pid for p in result.ranks]:
            result.ranks = procs
            status(f"{len(procs)} rank(s) under pid {pid}: "
                   f"{', '.join(f'{p.rank}={p.pid}' for p in procs[:8])}")
        if time.monotonic() >= next_sample:
            stacks = _sample_all(procs)
            result.samples += 1
            if on_sample is not None:
                on_sample(stacks)
            next_sample = time.monotonic() + sample_s
        samples = {p.rank: Sample(stacks.get(p.rank), cpu) for p in procs
                   if (cpu := cpu_seconds(p.pid)) is not None}
        if progress is not None and (now_mark := progress()) != mark:
            watcher.reset()
            mark = now_mark
        alarm = watcher.observe(samples, time.time())
        if alarm is not None:
            _respond(result, alarm, kill, status)
            return result
        time.sleep(POLL_S)
    result.ended = "watch timed out"
    return result


def _ranks(pid: int) -> list[discover.RankProcess] | None:
    try:
        return discover.ranks_under(pid)
    except discover.NoSuchProcess:
        return None


def _sample_all(procs: list[discover.RankProcess]) -> dict[int, stackgroups.Stack | None]:
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(procs)))) as pool:
        return dict(zip((p.rank for p in procs), pool.map(sample_stack, procs)))


def _respond(result: SampledWatchResult, alarm: PidAlarm, kill: bool,
             status: Callable[[str], None]) -> None:
    respond(result, alarm, lambda: capture(result.ranks, result.run_dir),
            (lambda: end_ranks(result.ranks)) if kill else None, status)


def respond(result: SampledWatchResult, alarm: PidAlarm,
            take_stacks: Callable[[], list[StackCapture]],
            end_job: Callable[[], list[int]] | None, status: Callable[[str], None]) -> None:
    """On a hang: blocking dumps of every rank (``take_stacks``), grouped; analyze the run
    directory; end the job if asked (``end_job``); write watch.json."""
    from diag.analyze import analyze

    result.alarm, result.ended = alarm, "hang detected"
    status(f"hang: {alarm.reason}; capturing stacks")
    result.captures = take_stacks()
    if result.alarm.finding is None:  # the blocking dumps may say more than the samples
        result.alarm.finding = grouped(result.captures, result.run_dir).finding
    result.analysis = analyze(result.run_dir)
    if end_job is not None:
        result.killed = end_job()
    write_replacing(result.run_dir / "watch.json",
                    json.dumps(result.to_json(), indent=2, default=str))


def end_ranks(procs: list[discover.RankProcess], grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM the ranks that are still the processes found, SIGKILL what is left after
    ``grace_s``; then their forks (DataLoader workers), which a SIGKILLed rank leaves."""
    forks = [p for proc in procs for p in _forks(proc)]

    def send(signum: int) -> None:
        for p in procs:
            if discover.still_rank(p):
                signal_pid(p.pid, signum)

    def ended(seconds: float | None) -> bool:
        deadline = time.monotonic() + (float("inf") if seconds is None else seconds)
        while any(discover.still_rank(p) for p in procs):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    stop(send, ended, grace_s, kill_wait_s=5.0)
    for pid, began in forks:
        if (discover.proc_stat(pid) or [None] * 20)[19] == began:
            signal_pid(pid, signal.SIGKILL)
    return [p.rank for p in procs]


def _forks(proc: discover.RankProcess) -> list[tuple[int, str]]:
    """(pid, start ticks) of the rank's descendants that carry its RANK: its forks."""
    out = []
    for pid in discover.descendants(proc.pid):
        env = discover.rank_env(pid)
        stat = discover.proc_stat(pid)
        if env and env["RANK"] == proc.rank and stat:
            out.append((pid, stat[19]))
    return out

