"""``ddiag analyze`` against torch's own ``fr_trace`` on the same Flight Recorder dumps.

Generates N ranks x M all_reduce entries of pickled Flight Recorder dumps in torch's
format (version 2.10, NCCL-style ``pg_config`` keyed by the group name), with one rank
that never issued the last collective, then runs both analyzers side by side, each in
its own process, and prints their verdicts, wall times, peak memory (PSS of the process
and any workers it starts, ``proctree.py``) and the ratios.

    python benchmarks/fr_compare.py [--ranks 1024] [--entries 2000]

Goal (issue 22): the same culprit, ddiag at least 20x faster and in at most a fifth of
fr_trace's memory.
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import proctree  # noqa: E402

PREFIX = "nccl_trace_rank_"
T0_NS = 1_800_000_000 * 10**9
FRAMES = [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 3245},
          {"name": "train_step", "filename": "train.py", "line": 88}]
# Runs a module as __main__.
RUNNER = ("import runpy, sys; mod = sys.argv[1]; sys.argv = sys.argv[1:]; "
          "runpy.run_module(mod, run_name='__main__')")
SPEEDUP_GOAL, MEMORY_GOAL = 20.0, 0.2


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
    m = proctree.measure([sys.executable, "-c", RUNNER, module, *args])
    return {"wall_s": m.wall_s, "peak_mb": m.peak_mb, "exit": m.returncode, "stdout": m.stdout,
            "stderr": m.stderr}


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
        "ddiag": {"wall_s": ours["wall_s"], "peak_mb": ours["peak_mb"],
                  "category": category, "culprit": culprit},
        "fr_trace": {"wall_s": theirs["wall_s"], "peak_mb": theirs["peak_mb"],
                     "missing_ranks": fr_trace_verdict(theirs["stdout"] + theirs["stderr"]),
                     "exit": theirs["exit"]},
    }
    result["speedup"] = round(theirs["wall_s"] / ours["wall_s"], 1) if ours["wall_s"] else None
    result["memory_ratio"] = round(ours["peak_mb"] / theirs["peak_mb"], 3) \
        if theirs["peak_mb"] else None
    result["same_culprit"] = culprit == result["fr_trace"]["missing_ranks"] == [missing]
    result["goal_met"] = bool(result["same_culprit"] and (result["speedup"] or 0) >= SPEEDUP_GOAL
                              and (result["memory_ratio"] or 1) <= MEMORY_GOAL)
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
