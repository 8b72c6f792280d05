"""``ddiag watch --slurm-job JOBID``: the sampling watcher (diag/watch/sampled.py) for a
Slurm job that imports nothing of ddiag, on every node at once.

One step spans the job's nodes, ``srun --overlap --jobid JOBID -N<nodes>
--ntasks-per-node=1``, and runs ``python -m diag.watch.slurmstacks --sample`` on each: a
JSON line a second per node with its ranks' CPU time and, every ``sample_s``, their main
stacks (py-spy --nonblocking). Only processes slurmd names as the job's are looked at. This
side keeps each node's latest line and feeds them to the same decision as ``--pid``; on a
hang it stops the sampling step, takes blocking dumps on every node
(diag/watch/slurmstacks.capture_job), analyses, and with ``kill`` cancels the job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from diag.analyze import stackgroups
from diag.launch import stop_group
from diag.watch.discover import RankProcess
from diag.watch.sampled import (POLL_S, Sample, SampledWatchResult, SampleWatcher, respond)
from diag.watch.slurmstacks import capture_job, job_nodes

START_S = 120.0  # how long the sampling step may take to report its first line


def watch_job(job_id: str, run_dir: Path, stall_s: float = 60.0, *, kill: bool = False,
              sample_s: float | None = None, timeout_s: float | None = None,
              same_point_s: float | None = None,
              status: Callable[[str], None] = lambda _: None,
              on_sample: Callable[[dict], None] | None = None,
              stop: Callable[[], bool] = lambda: False,
              progress: Callable[[], object] | None = None) -> SampledWatchResult:
    """Watch the job until a hang (then respond), the job ending, ``stop()``, or
    ``timeout_s``; ``on_sample``, ``stop`` and ``progress`` as for sampled.watch_pid (a
    scale-test stage is one step of the job it watches). Raises slurmstacks.SlurmJobError
    when the job is not running."""
    sample_s = sample_s or min(15.0, max(1.0, stall_s / 6))
    nodes = job_nodes(job_id)
    result = SampledWatchResult({"slurm_job": job_id, "nodes": nodes}, Path(run_dir))
    step = subprocess.Popen(
        ["srun", "--overlap", f"--jobid={job_id}", f"-N{len(nodes)}", f"-n{len(nodes)}",
         "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}", sys.executable, "-m",
         "diag.watch.slurmstacks", "--sample", job_id, str(sample_s)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    latest: dict[str, dict] = {}
    reader = threading.Thread(target=_read, args=(step, latest), daemon=True)
    reader.start()
    hooks = _Hooks(sample_s, on_sample, stop, progress)
    try:
        _loop(result, step, latest, SampleWatcher(stall_s, same_point_s), timeout_s, status,
              hooks)
    finally:
        stop_group(step, grace_s=2.0)
    if result.alarm is not None:
        respond(result, result.alarm, lambda: capture_job(job_id, result.run_dir),
                (lambda: _cancel(job_id, result)) if kill else None, status)
    return result


class _Hooks:
    """What a caller (scale-test's stage) adds to the watch: a round of stacks every
    ``sample_s`` for its tally, a stop of its own, a progress reading."""

    def __init__(self, sample_s: float, on_sample, stop, progress) -> None:
        self.sample_s, self.on_sample, self.stop, self.progress = sample_s, on_sample, stop, \
            progress
        self.next_round = time.monotonic() + sample_s

    def round(self, samples: dict[int, Sample]) -> None:
        if self.on_sample is not None and samples and time.monotonic() >= self.next_round:
            self.on_sample({r: s.stack for r, s in samples.items()})
            self.next_round = time.monotonic() + self.sample_s


def _loop(result: SampledWatchResult, step: subprocess.Popen, latest: dict,
          watcher: SampleWatcher, timeout_s: float | None,
          status: Callable[[str], None], hooks: _Hooks) -> None:
    start = time.monotonic()
    deadline = start + timeout_s if timeout_s is not None else float("inf")
    seen_t: dict[str, float] = {}
    mark = None
    while time.monotonic() < deadline:
        if hooks.stop():
            result.ended = "job finished"
            return
        if step.poll() is not None:
            result.ended = "job finished" if latest else "the sampling step ended: is ddiag " \
                                                        "installed at this path on the nodes?"
            return
        if not latest and time.monotonic() - start > START_S:
            result.ended = f"no sample from the job's nodes in {START_S:g} s"
            return
        ranks, samples = _combine(dict(latest))
        if [(p.host, p.pid) for p in ranks] != [(p.host, p.pid) for p in result.ranks]:
            result.ranks = ranks
            status(f"{len(ranks)} rank(s) on {len(latest)} node(s)")
        result.samples += sum(1 for h, d in latest.items() if seen_t.get(h) != d["t"])
        seen_t = {h: d["t"] for h, d in latest.items()}
        hooks.round(samples)
        if hooks.progress is not None and (now_mark := hooks.progress()) != mark:
            watcher.reset()  # the job printed: it moves, whatever its stacks show
            mark = now_mark
        alarm = watcher.observe(samples, time.time()) if samples else None
        if alarm is not None:
            result.alarm = alarm
            return
        time.sleep(POLL_S)
    result.ended = "watch timed out"


def _read(step: subprocess.Popen, latest: dict) -> None:
    for line in step.stdout:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("ranks"), list) and doc.get("host"):
            latest[str(doc["host"])] = doc


def _combine(latest: dict[str, dict]) -> tuple[list[RankProcess], dict[int, Sample]]:
    ranks, samples = [], {}
    for host, doc in sorted(latest.items()):
        for row in doc["ranks"]:
            if type(row.get("rank")) is not int or not isinstance(row.get("cpu_s"), (int, float)):
                continue
            ranks.append(RankProcess(row.get("pid") or 0, row["rank"], row.get("local_rank"),
                                     row.get("world_size"), str(row.get("started")), host,
                                     str(row.get("cmdline", ""))[:4096]))
            samples[row["rank"]] = Sample(_stack(row, host), float(row["cpu_s"]))
    return sorted(ranks, key=lambda p: p.rank), samples


def _stack(row: dict, host: str) -> stackgroups.Stack | None:
    frames = row.get("frames")
    if not isinstance(frames, list):
        return None
    return stackgroups.Stack(row["rank"], tuple(
        stackgroups.Frame(str(f[0]), str(f[1]), f[2] if type(f[2]) is int else None)
        for f in frames if isinstance(f, list) and len(f) == 3), "", None, host, row.get("pid"))


def _cancel(job_id: str, result: SampledWatchResult) -> list[int]:
    subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    return [p.rank for p in result.ranks]
