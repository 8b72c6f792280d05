"""What ``ddiag watch --pid`` costs the job it watches: a plain DDP script (no ddiag
import; tests/programs/plain_ddp.py, gloo, 2 ranks) timed alone and under the watcher,
alternating, in one run. The watcher samples at its fastest documented rate (``--stall
6``: a stack sample of every rank each second, CPU time each second), so the figure bounds
the default (``--stall 60``: a stack sample every 10 s).

    python benchmarks/watch_sampling.py [--pairs 3] [--steps 400] [--width 512]

Goal: a few percent at most (issue 21). On a 2-core machine the watcher's own py-spy
processes compete with the two ranks for the cores, so this is the worst case.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.util import free_port, quiet_env, kill_tree  # noqa: E402

PLAIN = REPO / "tests" / "programs" / "plain_ddp.py"
_DONE = re.compile(r"done in (?P<s>[\d.]+) s")


def one_run(steps: int, width: int, watched: bool, out: Path) -> tuple[float, int]:
    """(the job's own training time in s, stack samples the watcher took)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(PLAIN),
           "--steps", str(steps), "--width", str(width)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           env=quiet_env(), start_new_session=True)
    watcher = None
    if watched:
        watcher = subprocess.Popen([sys.executable, "-m", "diag.cli", "watch", str(out), "--pid",
                                    str(job.pid), "--stall", "6", "--timeout", "600", "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        stdout, _ = job.communicate(timeout=900)
    finally:
        if job.poll() is None:
            kill_tree(job)
    samples = 0
    if watcher is not None:
        doc = json.loads(watcher.communicate(timeout=120)[0])
        samples = doc["samples"]
        assert doc["alarm"] is None, doc["alarm"]
    m = _DONE.search(stdout)
    if not m:
        raise RuntimeError(f"the job printed no 'done in': {stdout[-500:]}")
    return float(m.group("s")), samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--out", type=Path, default=Path("/tmp/ddiag-watch-sampling"))
    args = p.parse_args(argv)
    alone, watched, samples = [], [], []
    for i in range(args.pairs):
        for w in ((False, True) if i % 2 == 0 else (True, False)):
            seconds, n = one_run(args.steps, args.width, w, args.out / f"run{i}-{int(w)}")
            (watched if w else alone).append(seconds)
            samples += [n] if w else []
            print(f"pair {i}: {'watched' if w else 'alone  '} {seconds:.2f} s"
                  + (f" ({n} stack samples)" if w else ""), flush=True)
    a, b = statistics.median(alone), statistics.median(watched)
    print(f"median alone {a:.2f} s, watched {b:.2f} s: overhead {100 * (b / a - 1):+.1f}% "
          f"({statistics.median(samples):.0f} stack samples of 2 ranks per run, "
          f"{args.steps} steps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
