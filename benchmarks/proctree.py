"""Wall time and peak memory of a command together with every process it starts.

``ddiag analyze`` reads large inputs in worker processes, so the peak RSS of the command's
own process (``ru_maxrss``) undercounts, and summing RSS counts the pages a forked worker
shares with its parent twice. This samples, every ``interval`` seconds, the proportional
set size (PSS: shared pages split between their sharers) of the process and all its
descendants, and reports the largest sum: the memory the run held at its peak. Samples
can miss a spike shorter than the interval.

    from proctree import measure
    m = measure([sys.executable, "-m", "diag.cli", "analyze", DIR, "--json"])
    m.wall_s, m.peak_mb, m.stdout
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Measured:
    wall_s: float
    peak_mb: float  # peak of the summed PSS of the process tree
    returncode: int
    stdout: str
    stderr: str


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def measure(cmd: list[str], interval: float = 0.05, timeout: float = 3600,
            **popen) -> Measured:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, **popen)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], sum(_pss_kb(p) for p in _tree(proc.pid)))
                done.wait(interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            proc.wait(timeout)
        finally:
            wall = time.monotonic() - start
            done.set()
            sampler.join()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0), err.seek(0)
        return Measured(round(wall, 2), round(peak[0] / 1024), proc.returncode,
                        out.read().decode(errors="replace"), err.read().decode(errors="replace"))


if __name__ == "__main__":  # python benchmarks/proctree.py CMD...
    import sys

    m = measure(sys.argv[1:])
    print(f"wall {m.wall_s} s, peak PSS of the process tree {m.peak_mb} MB, exit {m.returncode}",
          file=sys.stderr)
    sys.stdout.write(m.stdout)
    os._exit(m.returncode)
