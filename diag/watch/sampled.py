"""``ddiag watch --pid``: the live watcher for a job that imports nothing of ddiag.

Without heartbeats, progress is read from outside: every rank's CPU time (``/proc``, free)
each poll, and its main thread's Python stack (``py-spy dump --nonblocking``: read out of
the process's memory without stopping it) every ``sample_s``. A rank *moved* when its stack
shows it somewhere else (a rank that waits: another wait, or another line of the user's
code), or when it used more than ``CPU_MOVING`` of a core since the stall began while not
waiting on the others (a rank in a collective may spin: NCCL busy-waits). A failed sample
keeps the rank's last stack.

When no rank moved for ``stall_s`` seconds, the verdict is ``ddiag stacks``'s
(``stackgroups.verdict``) on the sampled stacks, read with how long they stayed and the
job's process-group timeout where its script shows it (``stackgroups.past_timeout``,
``pgtimeout``): some ranks waiting while others are elsewhere (``rank_hang``, or
``timeout_too_short`` past the timeout), ranks in different collectives
(``collective_mismatch``), or, after ``same_point_s`` (10 x ``stall_s``), every rank in one
collective. Ranks that all pause in their own code wait on nobody: no alarm. While the job
moves, a rank that is the odd one out in most rounds of samples is a ``straggler`` (no
alarm). A job that ends while stalled gets the verdict of its last stall.

On an alarm the stacks are captured (blocking dumps, into RUN_DIR/stacks), grouped and
analysed; with ``kill`` the ranks and their forks end, RUN_DIR/killed.json says so and the
job's log is kept in RUN_DIR/logs (``joblog``). RUN_DIR/watch.json says how any watch ended.

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
from diag.verdict import Category, Finding, Severity
from diag.format.rundir import RunDir
from diag.watch import discover, joblog, pgtimeout
from diag.watch.capture import pyspy_dump, signal_pid, write_replacing
from diag.watch.stacks import StackCapture, capture, grouped, write_record

CPU_MOVING = 0.2  # of one core, averaged since the stall began: a waiting rank uses ~0
POLL_S = 1.0
KILL_MARKER = "killed.json"
STRAGGLER_WINDOWS = 2  # stall windows of samples a straggler is judged on
LAUNCHER_EXIT_S = 15.0  # torchrun notices its workers are gone within a few seconds
RANKS_APPEAR_S = 120.0  # how long the ranks of a starting job may take to appear
END_GRACE_S = 8.0  # a stall seen this recently still explains a job that then ended


@dataclass(frozen=True)
class Sample:
    """One look at one rank: its main-thread stack (None when py-spy could not read it),
    its process's CPU seconds so far, and the py-spy document the stack came from."""

    stack: stackgroups.Stack | None
    cpu_s: float
    doc: str | None = field(default=None, compare=False, repr=False)


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


@dataclass(frozen=True)
class Stall:
    """The latest stall with a verdict: its samples, since when, last seen when."""

    finding: Finding
    samples: dict
    since: float
    seen: float


class SampleWatcher:
    """Feeds on samples of every rank; returns a PidAlarm once a hang is established.

    The verdict of a stall is ``stackgroups.verdict`` on the ranks' stacks, the one
    ``ddiag stacks`` gives, read with how long the stall lasted (``past_timeout``:
    ``pg_timeout``, (seconds, where read), when the job's process-group timeout is
    known). A rank whose sample failed keeps its last stack. While the job moves, the
    samples' odd ones out are counted: a rank that is the odd one in most of them is a
    ``straggler`` (set once, with ``straggler_at``), never an alarm."""

    def __init__(self, stall_s: float, same_point_s: float | None = None,
                 pg_timeout: tuple[float, str] | None = None, sample_s: float = 0.0) -> None:
        self.stall_s, self.sample_s = stall_s, sample_s
        self.same_point_s = same_point_s if same_point_s is not None else 10 * stall_s
        self.pg_timeout = pg_timeout
        self._ref: dict[int, Sample] = {}
        self._since: float | None = None
        self._stacks: dict[int, stackgroups.Stack] = {}
        self._odd: list[tuple[float, tuple[int, ...]]] = []
        self._moves: list[float] = []
        self.stall: Stall | None = None
        self.straggler: Finding | None = None
        self.straggler_at: float | None = None

    def reset(self) -> None:
        """The job showed progress some other way (its output grew): start over."""
        self._ref, self._since, self._odd = {}, None, []

    def observe(self, samples: dict[int, Sample], now: float) -> PidAlarm | None:
        if not samples:
            return None
        samples = self._carry(samples, now)
        if self._since is None or self._moved(samples, now):
            self._ref, self._since = dict(samples), now
            self._moves = [m for m in self._moves if now - m <= self.stall_s] + [now]
            self._find_straggler(now)
            return None
        stalled = now - self._since
        finding = self.verdict(samples, stalled)
        if finding is not None and finding.severity > Severity.INFO \
                and stalled >= max(2 * self.sample_s, 2 * POLL_S):
            self.stall = Stall(finding, dict(samples), self._since, now)
        if stalled < self.stall_s or finding is None:
            return None
        if finding.severity > Severity.INFO:
            return PidAlarm(f"no rank moved for {stalled:.0f} s; {finding.title}", self._since,
                            now, finding)
        if stalled >= self.same_point_s:
            return PidAlarm(f"every rank stopped at the same point, in one collective, for "
                            f"{stalled:.0f} s; "
                            f"{finding.title}", self._since, now, finding)
        return None

    def verdict(self, samples: dict[int, Sample], busy_s: float,
                slack_s: float = 0.0) -> Finding | None:
        """What the ranks' stacks say (as ``ddiag stacks`` says it), ``busy_s`` (to
        ``busy_s + slack_s``) into a stall."""
        stacks = [s.stack for s in samples.values() if s.stack is not None]
        missing = tuple(r for r, s in samples.items() if s.stack is None)
        found = stackgroups.verdict(stackgroups.group(stacks), missing)
        return stackgroups.past_timeout(found, busy_s, *(self.pg_timeout or (None, "")),
                                        slack_s=slack_s)

    def ended(self, now: float) -> PidAlarm | None:
        """The job's ranks are gone: if a stall with a verdict was seen within
        ``END_GRACE_S`` (plus a sample), the job ended in it (its own timeout, a crash of
        a waiting rank), and that is the verdict; its busy time runs to the end."""
        stall = self.stall
        if stall is None or now - stall.seen > END_GRACE_S + self.sample_s:
            return None
        # it stayed so until the end; it began up to a sample before it was seen
        finding = self.verdict(stall.samples, now - stall.since, self.sample_s)
        return PidAlarm(f"the job ended {now - stall.seen:.0f} s after its ranks were last "
                        f"seen stalled ({stall.seen - stall.since:.0f} s); {finding.title}",
                        stall.since, now, finding)

    def _carry(self, samples: dict[int, Sample], now: float) -> dict[int, Sample]:
        """A failed sample keeps the rank's last stack; a new round of stacks is counted
        for stragglers."""
        fresh = any(s.stack is not None and s.stack is not self._stacks.get(r)
                    for r, s in samples.items())
        out = {}
        for rank, s in samples.items():
            if s.stack is None and rank in self._stacks:
                s = Sample(self._stacks[rank], s.cpu_s, self._ref.get(rank, s).doc)
            out[rank] = s
            if s.stack is not None:
                self._stacks[rank] = s.stack
        if fresh:
            self._count_odd(out, now)
        return out

    def _count_odd(self, samples: dict[int, Sample], now: float) -> None:
        found = self.verdict(samples, 0.0)
        odd = found.culprit.ranks if found is not None and \
            found.category is Category.RANK_HANG else ()
        # two stall windows: a healthy job under load has one rank busy by chance in a few
        # samples; a straggler is busy while the others wait in most of many
        keep = STRAGGLER_WINDOWS * self.stall_s
        self._odd = [(t, r) for t, r in self._odd if now - t <= keep] + [(now, odd)]

    def _find_straggler(self, now: float) -> None:
        """Once, when the job just moved: only samples the job moved after, before the
        next sample, count (a hung rank is the odd one in every sample after its hang, with
        no movement between them; a straggler's job moves on after each)."""
        if self.straggler is None:
            ends = [t for t, _ in self._odd[1:]] + [now]
            moved_after = [r for (t, r), end in zip(self._odd, ends)
                           if any(t < m <= end for m in self._moves)]
            self.straggler = stackgroups.straggler(moved_after, self.stall_s)
            self.straggler_at = now if self.straggler is not None else None

    def _moved(self, samples: dict[int, Sample], now: float) -> bool:
        if set(samples) != set(self._ref):
            return True
        budget = CPU_MOVING * max(now - self._since, 1e-9)
        for rank, s in samples.items():
            ref = self._ref[rank]
            if s.stack is not None and ref.stack is not None and not _same_place(s.stack,
                                                                                 ref.stack):
                return True
            # a rank waiting on the others may spin (NCCL's busy-wait): its CPU is no progress
            if s.cpu_s - ref.cpu_s > budget and not _waiting(s.stack):
                return True
        return False


def _same_place(a: stackgroups.Stack, b: stackgroups.Stack) -> bool:
    """Whether two samples of a rank show it in the same place: the same frames, or, for a
    rank that waits (a collective, backward, its DataLoader), the same wait from the same
    line of the user's code, however deep inside the library's poll loop the sample fell
    (a DataLoader's queue get wakes every 5 s and loops)."""
    if a.frames == b.frames:
        return True
    state, at = stackgroups.state_of(a.frames)
    if state not in (*stackgroups.WAITING, "data"):
        return False
    return (state, at) == stackgroups.state_of(b.frames) and _user(a) == _user(b)


def _user(stack: stackgroups.Stack) -> stackgroups.Frame | None:
    return next((f for f in stack.frames if f.user), None)


def _waiting(stack: stackgroups.Stack | None) -> bool:
    return stack is not None and stackgroups.state_of(stack.frames)[0] in stackgroups.WAITING


@dataclass
class SampledWatchResult:
    """What a watch of a job without heartbeats ended with; ``target`` is what was watched
    ({"pid": N} or {"slurm_job": "J"}). ``straggler``: a rank the others kept waiting for
    while the job moved (not a hang), found at ``straggler_at``; ``pg_timeout``: the job's
    process-group timeout (seconds, where read) when visible."""

    target: dict
    run_dir: Path
    ranks: list[discover.RankProcess] = field(default_factory=list)
    alarm: PidAlarm | None = None
    captures: list[StackCapture] = field(default_factory=list)
    analysis: object | None = None
    killed: list[int] = field(default_factory=list)
    samples: int = 0
    ended: str = ""
    started_at: float = field(default_factory=time.time)
    straggler: Finding | None = None
    straggler_at: float | None = None
    pg_timeout: tuple[float, str] | None = None
    job_logs: list[joblog.JobLog] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def to_json(self) -> dict:
        # the live verdict (stacks read with how long they stayed) before analyze's of the
        # stacks it left
        verdict = self.alarm.finding.to_json() if self.alarm is not None \
            and self.alarm.finding is not None else None
        if verdict is None and self.analysis is not None and self.analysis.findings:
            verdict = self.analysis.findings[0].to_json()
        if verdict is None and self.straggler is not None:
            verdict = self.straggler.to_json()
        return {**schema.stamp(schema.WATCH), "target": self.target,
                "run_dir": str(self.run_dir), "ended": self.ended, "samples": self.samples,
                "started_at": self.started_at, "ranks": [r.to_json() for r in self.ranks],
                "alarm": self.alarm.to_json() if self.alarm else None,
                "captures": [c.to_json() for c in self.captures], "killed": self.killed,
                "straggler": self.straggler.to_json() if self.straggler else None,
                "straggler_at": self.straggler_at, "logs": [str(p) for p in self.logs],
                "pg_timeout": {"seconds": self.pg_timeout[0], "from": self.pg_timeout[1]}
                if self.pg_timeout else None,
                "verdict": verdict}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads) so far."""
    stat = discover.proc_stat(pid)
    if stat is None:
        return None
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def sample_stack(proc: discover.RankProcess) -> tuple[stackgroups.Stack | None, str | None]:
    """The rank's main-thread stack read without stopping it (``--nonblocking``), and the
    py-spy document it came from."""
    if not discover.still_rank(proc):
        return None, None
    dump, _ = pyspy_dump(proc.pid, nonblocking=True)
    try:
        doc = json.loads(dump) if dump is not None else None
    except ValueError:
        return None, None
    stack = stackgroups.from_pyspy(doc, proc.rank, "", proc.host) if doc else None
    return stack, dump if stack is not None else None


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
    slow job, not a hung one, as long as the job still prints. Whatever the ending,
    RUN_DIR/watch.json says it; a job that ended in a stall leaves its last samples in
    RUN_DIR/stacks, with the verdict they give."""
    sample_s = sample_s or min(15.0, max(1.0, stall_s / 6))
    result = SampledWatchResult({"pid": pid}, Path(run_dir))
    watcher = SampleWatcher(stall_s, same_point_s, sample_s=sample_s)
    start = time.monotonic()
    deadline = start + timeout_s if timeout_s is not None else float("inf")
    taken: dict[int, tuple] = {}
    next_sample, mark = 0.0, None
    while time.monotonic() < deadline:
        if stop():  # the caller saw the job exit and reads its outcome itself
            result.ended = "job finished"
            return result
        procs = _ranks(pid)
        if procs is None or (not procs and result.ranks):
            return _finish(result, watcher, "job finished", status)
        if not procs:
            if time.monotonic() - start > RANKS_APPEAR_S:
                result.ended = f"no rank appeared under pid {pid} in {RANKS_APPEAR_S:g} s"
                return result
            time.sleep(POLL_S)
            continue
        _new_ranks(result, watcher, procs, pid, status)
        if time.monotonic() >= next_sample:
            taken = _sample_all(procs)
            result.samples += 1
            if on_sample is not None:
                on_sample({r: t[0] for r, t in taken.items()})
            next_sample = time.monotonic() + sample_s
        samples = {p.rank: Sample(stack, cpu, doc) for p in procs
                   for stack, doc in [taken.get(p.rank, (None, None))]
                   if (cpu := cpu_seconds(p.pid)) is not None}
        if progress is not None and (now_mark := progress()) != mark:
            watcher.reset()
            mark = now_mark
        alarm = watcher.observe(samples, time.time())
        _note_straggler(result, watcher, status)
        if alarm is not None:
            _respond(result, alarm, kill, status)
            return result
        time.sleep(POLL_S)
    return _finish(result, watcher, "watch timed out", status)


def _new_ranks(result: SampledWatchResult, watcher: SampleWatcher,
               procs: list[discover.RankProcess], pid: int,
               status: Callable[[str], None]) -> None:
    if [p.pid for p in procs] == [p.pid for p in result.ranks]:
        return
    result.ranks = procs
    known = {(log.dev, log.ino) for log in result.job_logs}
    result.job_logs += [log for log in joblog.of_processes([pid, *(p.pid for p in procs)])
                        if (log.dev, log.ino) not in known]
    status(f"{len(procs)} rank(s) under pid {pid}: "
           f"{', '.join(f'{p.rank}={p.pid}' for p in procs[:8])}")
    if result.pg_timeout is None:
        result.pg_timeout = watcher.pg_timeout = pgtimeout.of_rank(
            procs[0].cmdline, discover.cwd(procs[0].pid))


def _note_straggler(result: SampledWatchResult, watcher: SampleWatcher,
                    status: Callable[[str], None]) -> None:
    if watcher.straggler is not None and result.straggler is None:
        result.straggler, result.straggler_at = watcher.straggler, watcher.straggler_at
        status(f"straggler: {watcher.straggler.title}")


def _finish(result: SampledWatchResult, watcher: SampleWatcher, ended: str,
            status: Callable[[str], None]) -> SampledWatchResult:
    """The job ended or the watch timed out: when the job ended in a stall, its last
    samples and their verdict are kept (RUN_DIR/stacks, analyze); watch.json either way."""
    from diag.analyze import analyze

    result.ended = ended
    alarm = watcher.ended(time.time()) if ended == "job finished" else None
    if alarm is not None:
        result.alarm, result.ended = alarm, "job ended in a stall"
        status(f"the job ended in a stall: {alarm.reason}")
        result.captures = _keep_samples(result, watcher.stall.samples)
        result.analysis = analyze(result.run_dir)
    write_replacing(result.run_dir / "watch.json",
                    json.dumps(result.to_json(), indent=2, default=str))
    return result


def _keep_samples(result: SampledWatchResult, samples: dict[int, Sample]) -> list[StackCapture]:
    """The stall's samples (py-spy's documents, read without stopping the ranks) as the
    run's stacks, with their capture record."""
    out = []
    for proc in result.ranks:
        s = samples.get(proc.rank)
        if s is None or s.doc is None:
            out.append(StackCapture(proc, None, "no sample of this rank's stack in the stall"))
            continue
        path = RunDir(result.run_dir).path("stacks", proc.rank, ".json")
        write_replacing(path, s.doc)
        out.append(StackCapture(proc, path, None))
    write_record(result.run_dir, out)
    return out


def _ranks(pid: int) -> list[discover.RankProcess] | None:
    try:
        return discover.ranks_under(pid)
    except discover.NoSuchProcess:
        return None


def _sample_all(procs: list[discover.RankProcess]) -> dict[int, tuple]:
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(procs)))) as pool:
        return dict(zip((p.rank for p in procs), pool.map(sample_stack, procs)))


def _respond(result: SampledWatchResult, alarm: PidAlarm, kill: bool,
             status: Callable[[str], None]) -> None:
    respond(result, alarm, lambda: capture(result.ranks, result.run_dir),
            (lambda: end_ranks(result.ranks)) if kill else None, status)
    if kill and result.job_logs:
        # the launcher prints its summary (ChildFailedError) once it sees its workers gone
        _wait_gone(result.target["pid"], LAUNCHER_EXIT_S)
        result.logs = joblog.keep(result.job_logs, result.run_dir)
        write_replacing(result.run_dir / "watch.json",
                        json.dumps(result.to_json(), indent=2, default=str))


def _wait_gone(pid: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        stat = discover.proc_stat(pid)
        if stat is None or stat[0] in "ZXx":
            return
        time.sleep(0.2)


def respond(result: SampledWatchResult, alarm: PidAlarm,
            take_stacks: Callable[[], list[StackCapture]],
            end_job: Callable[[], list[int]] | None, status: Callable[[str], None]) -> None:
    """On a hang: blocking dumps of every rank (``take_stacks``), grouped; analyze the run
    directory; end the job if asked (``end_job``: then RUN_DIR/killed.json says so, for
    analyze to read the job's log after it); write watch.json."""
    from diag.analyze import analyze

    result.alarm, result.ended = alarm, "hang detected"
    status(f"hang: {alarm.reason}; capturing stacks")
    result.captures = take_stacks()
    if result.alarm.finding is None or result.alarm.finding.severity <= Severity.INFO:
        # the blocking dumps may say more than the samples
        result.alarm.finding = grouped(result.captures, result.run_dir).finding \
            or result.alarm.finding
    result.analysis = analyze(result.run_dir)
    if end_job is not None:
        began = time.time()
        result.killed = end_job()
        write_kill_marker(result, began)
    write_replacing(result.run_dir / "watch.json",
                    json.dumps(result.to_json(), indent=2, default=str))


def write_kill_marker(result: SampledWatchResult, began: float) -> Path:
    """RUN_DIR/killed.json: watch ended this job, when (``t``: the first SIGTERM), which
    ranks, and on what verdict;
    the job's log then shows the kill (SIGTERM, ``Signal 15``, torchrun's
    ChildFailedError), which analyze reads as that verdict's symptoms."""
    finding = result.alarm.finding if result.alarm else None
    doc = {**schema.stamp(schema.WATCH_KILL), "t": began, "ended_at": time.time(),
           "by": "ddiag watch --kill",
           "target": result.target, "signal": "SIGTERM", "then": "SIGKILL",
           "ranks": result.killed,
           "pids": [p.pid for p in result.ranks if p.rank in result.killed],
           "verdict": finding.category.value if finding else None,
           "reason": result.alarm.reason if result.alarm else None}
    path = result.run_dir / KILL_MARKER
    write_replacing(path, json.dumps(doc, indent=1) + "\n")
    return path


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

