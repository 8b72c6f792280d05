"""``ddiag analyze`` against torch's own ``fr_trace`` on the same Flight Recorder dumps.

Generates N ranks x M all_reduce entries of pickled Flight Recorder dumps in torch's
format (version 2.10, NCCL-style ``pg_config`` keyed by the group name), with one rank
that never issued the last collective, then runs both analyzers side by side, each in
its own process, and prints their verdicts, wall times, peak RSS and the time ratio.

    python benchmarks/fr_compare.py [--ranks 1024] [--entries 2000]

Goal: the same culprit, and ddiag at least 5x faster.
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PREFIX = "nccl_trace_rank_"
T0_NS = 1_800_000_000 * 10**9
FRAMES = [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 3245},
          {"name": "train_step", "filename": "train.py", "line": 88}]
# Runs a module as __main__ and reports the process's own peak RSS (KiB) on stderr.
RUNNER = ("import atexit, resource, runpy, sys; "
          "atexit.register(lambda: sys.stderr.write('\\nPEAK_RSS_KB=%d\\n' % "
          "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)); "
          "mod = sys.argv[1]; sys.argv = sys.argv[1:]; runpy.run_module(mod, run_name='__main__')")


def entry(seq: int, done: bool) -> dict:
    return {"frames": FRAMES, "record_id": seq - 1, "pg_id": 0,
            "process_group": ("0", "default_pg"), "collective_seq_id": seq, "p2p_seq_id": 0,
            "op_id": seq, "profiling_name": "nccl:all_reduce",
            "time_created_ns": T0_NS + seq * 10**7, "input_sizes": [[1024, 1024]],
            "input_dtypes": ["Float"], "output_sizes": [[1024, 1024]], "output_dtypes": ["Float"],
            "state": "completed" if done else "scheduled", "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": done, "timeout_ms": 600000,
            "is_p2p": False, "thread_id": "1", "thread_name": "python", "duration_ms": None}


def generate(root: Path, ranks: int, entries: int, missing: int) -> None:
    ranks_str = str(list(range(ranks)))
    for rank in range(ranks):
        last = entries - 1 if rank == missing else entries
        doc = {"version": "2.10",
               "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks_str}},
               "pg_status": {"0": {"last_enqueued_collective": last,
                                   "last_started_collective": last,
                                   "last_completed_collective": entries - 1}},
               "entries": [entry(s, s < entries) for s in range(1, last + 1)]}
        (root / f"{PREFIX}{rank}").write_bytes(pickle.dumps(doc))


def measure(module: str, *args: str) -> dict:
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", RUNNER, module, *args],
                         capture_output=True, text=True)
    wall = time.monotonic() - start
    peak = re.search(r"PEAK_RSS_KB=(\d+)", res.stderr)
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(int(peak.group(1)) / 1024) if peak else None,
            "exit": res.returncode, "stdout": res.stdout, "stderr": res.stderr}


def fr_trace_verdict(out: str) -> list[int] | None:
    missing = re.search(r"missing ranks:\s*\{([\d,\s]+)\}", out)
    return sorted(int(r) for r in missing.group(1).split(",")) if missing else None


def ddiag_verdict(out: str) -> tuple[str | None, list[int] | None]:
    try:
        top = json.loads(out)["findings"][0]
    except (ValueError, KeyError, IndexError):
        return None, None
    return top["category"], top["culprit"]["ranks"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--entries", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    missing = args.ranks * 3 // 4 + 1
    root = Path(tempfile.mkdtemp(prefix="ddiag-fr-"))
    try:
        t0 = time.monotonic()
        generate(root, args.ranks, args.entries, missing)
        size = sum(f.stat().st_size for f in root.iterdir()) / 2**20
        ours = measure("diag.cli", "analyze", str(root), "--json")
        theirs = measure("torch.distributed.flight_recorder.fr_trace", str(root),
                         "--prefix", PREFIX)
    finally:
        shutil.rmtree(root)
    category, culprit = ddiag_verdict(ours["stdout"])
    result = {
        "ranks": args.ranks, "entries_per_rank": args.entries, "dump_mb": round(size),
        "generate_s": round(time.monotonic() - t0 - ours["wall_s"] - theirs["wall_s"], 1),
        "injected_missing_rank": missing,
        "ddiag": {"wall_s": ours["wall_s"], "peak_rss_mb": ours["peak_rss_mb"],
                  "category": category, "culprit": culprit},
        "fr_trace": {"wall_s": theirs["wall_s"], "peak_rss_mb": theirs["peak_rss_mb"],
                     "missing_ranks": fr_trace_verdict(theirs["stdout"] + theirs["stderr"]),
                     "exit": theirs["exit"]},
    }
    result["speedup"] = round(theirs["wall_s"] / ours["wall_s"], 1) if ours["wall_s"] else None
    result["same_culprit"] = culprit == result["fr_trace"]["missing_ranks"] == [missing]
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
