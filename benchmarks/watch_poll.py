"""What ``ddiag watch`` costs per second beside a large job: the CPU share of a core its
heartbeat polls take, at a fixed 0.5 s poll against the adaptive poll (issue 22).

A writer process rewrites N ranks' heartbeats every second, as live ranks do (same
progress, fresh time), into a run directory; the watcher runs in its own process for
``--seconds`` with a stall window it never reaches, once per mode, and its CPU time
(user + system, from wait4) over its wall time is the share.

    python benchmarks/watch_poll.py [--ranks 4096] [--seconds 30] [--stall 60]

Goal: a few percent of a core at 4096 ranks.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diag.format import schema

WATCHER = ("import sys; from pathlib import Path; from diag.watch.loop import watch; "
           "r = watch(Path(sys.argv[1]), float(sys.argv[2]), timeout_s=float(sys.argv[3]), "
           "cpu_share=None if sys.argv[4] == 'fixed' else 0.03); print(r.ended)")


def beat(root: Path, rank: int) -> None:
    doc = {**schema.stamp(schema.HEARTBEAT), "rank": rank, "pid": 10000 + rank,
           "t": time.time(), "step": 10, "seq": {"0": 20}, "pending": None, "span": None}
    tmp = root / "heartbeat" / f".rank{rank:05d}.json.tmp"
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, root / "heartbeat" / f"rank{rank:05d}.json")


def writer(root: Path, ranks: int, stop) -> None:
    while not stop.is_set():
        start = time.monotonic()
        for rank in range(ranks):
            beat(root, rank)
        stop.wait(max(0.0, 1.0 - (time.monotonic() - start)))


def watch_share(root: Path, mode: str, seconds: float, stall: float) -> dict:
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", WATCHER, str(root), str(stall), str(seconds),
                             mode], stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    ended = proc.stdout.read().strip()
    cpu = usage.ru_utime + usage.ru_stime
    return {"mode": mode, "wall_s": round(wall, 1), "cpu_s": round(cpu, 2),
            "core_share": round(cpu / wall, 4), "ended": ended}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4096)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--stall", type=float, default=60.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddiag-poll-") as tmp:
        root = Path(tmp)
        (root / "heartbeat").mkdir()
        (root / "events").mkdir()
        for rank in range(args.ranks):
            beat(root, rank)
        stop = multiprocessing.Event()
        feeder = multiprocessing.Process(target=writer, args=(root, args.ranks, stop))
        feeder.start()
        try:
            results = [watch_share(root, mode, args.seconds, args.stall)
                       for mode in ("fixed", "adaptive")]
        finally:
            stop.set()
            feeder.join()
    print(json.dumps({"ranks": args.ranks, "stall_s": args.stall, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
