"""Time ``ddiag analyze`` on a generated 512-rank x 500-step run directory.

The run has what a DDP job under the decorator writes per rank and step: a step record
and two bucket all_reduces, plus heartbeats; rank 137 of 512 (the same fraction of
another world) hangs before the last step's collectives, so the verdict can be checked
as well as timed. Memory is the peak PSS of analyze and its worker processes together
(``proctree.py``).

    python benchmarks/analyze_scale.py [--ranks 512] [--steps 500] [--keep DIR [--reuse]]
    python benchmarks/analyze_scale.py --ranks 4096 --steps 1000 --keep /tmp/r4096

Goals (issue 22), on a 2-core machine: 512 x 500 in 3 s and 1 GB; 4096 x 1000 (about
4 GB of event logs) in 30 s and 4 GB.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from diag.format import schema
from diag.runtime.eventlog import encode

sys.path.insert(0, str(Path(__file__).parent))
from proctree import measure  # noqa: E402

T0 = 1_800_000_000.0
HUNG_FRACTION = 137 / 512  # rank 137 of 512


def hung_rank(world: int) -> int:
    return int(world * HUNG_FRACTION)


def write_rank(root: Path, rank: int, world: int, steps: int) -> None:
    hung = hung_rank(world)
    lines = [encode({"kind": "header", **schema.stamp(schema.EVENTS), "run_id": "bench",
                     "rank": rank, "local_rank": rank % 8, "world_size": world,
                     "host": f"node{rank // 8:03d}", "pid": 10000 + rank, "backend": "nccl",
                     "t": T0, "mono": 0.0, "step": -1})]
    seq = 0
    last = steps - 1 if rank == hung else steps
    for step in range(last):
        t = T0 + step * 0.25
        for bucket in range(2):
            seq += 1
            lines.append(encode({
                "kind": "collective", "op": "all_reduce", "group": "0", "group_desc": "default_pg",
                "group_size": world, "rank": rank, "pid": 10000 + rank, "step": step,
                "in_step": True, "t": t + 0.1 + bucket * 0.05 + (rank % 7) * 1e-4,
                "mono": step * 0.25, "seq": seq, "in_numel": 6_553_600, "in_bytes": 26_214_400,
                "in_dtype": "float32", "in_shape": [6_553_600], "out_numel": 6_553_600,
                "dur_s": 0.012, "async": True, "torch_seq": seq + 3}))
        lines.append(encode({
            "kind": "step", "rank": rank, "pid": 10000 + rank, "step": step, "in_step": True,
            "t": t + 0.24, "mono": step * 0.25 + 0.24, "dur_s": 0.23, "iter_s": 0.25,
            "phases": {"data": 0.01, "forward": 0.07, "backward": 0.13, "optimizer": 0.02},
            "args": [{"name": "arg0", "shape": [8, 1024], "dtype": "int64"}],
            "loss": 2.5 - step * 1e-3, "comm_s": 0.024, "ncoll": 2, "grad_norm": 1.1,
            "nonfinite": None, "sent_nonfinite": None}))
    (root / "events" / f"rank{rank:05d}.jsonl").write_bytes(b"".join(lines))
    pending = None if rank == hung else {"op": "all_reduce", "group": "0",
                                              "seq": seq + 1, "t": T0 + steps * 0.25}
    (root / "heartbeat" / f"rank{rank:05d}.json").write_text(json.dumps({
        **schema.stamp(schema.HEARTBEAT), "rank": rank, "pid": 10000 + rank,
        "t": T0 + steps * 0.25 + 60, "step": last - 1, "seq": {"0": seq}, "pending": pending,
        "span": {"name": "data", "since": T0} if rank == hung else None}))


def generate(root: Path, ranks: int, steps: int) -> None:
    for sub in ("events", "heartbeat"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    with multiprocessing.Pool() as pool:
        pool.map(partial(write_rank, root, world=ranks, steps=steps), range(ranks), chunksize=16)


def time_analyze(root: Path) -> dict:
    m = measure([sys.executable, "-m", "diag.cli", "analyze", str(root), "--json"])
    doc = json.loads(m.stdout) if m.stdout.strip() else {}
    top = (doc.get("findings") or [{}])[0]
    return {"wall_s": m.wall_s, "peak_mb": m.peak_mb, "exit": m.returncode,
            "top_category": top.get("category"), "top_ranks": top.get("culprit", {}).get("ranks"),
            "stderr": m.stderr[-500:]}


# (ranks, steps) -> (seconds, MB): issue 22's goals; other sizes are measured, not judged.
GOALS = {(512, 500): (3.0, 1024), (4096, 1000): (30.0, 4096)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=512)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--keep", type=Path, help="generate into this directory and keep it")
    p.add_argument("--reuse", action="store_true",
                   help="with --keep: analyse what the directory holds if it was generated")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="ddiag-scale-"))
    t0 = time.monotonic()
    if not (args.reuse and (root / "events").is_dir()):
        generate(root, args.ranks, args.steps)
    size_mb = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20
    result = {"ranks": args.ranks, "steps": args.steps, "input_mb": round(size_mb),
              "generate_s": round(time.monotonic() - t0, 1), **time_analyze(root)}
    result["verdict_ok"] = (result["top_category"] == "rank_hang"
                            and result["top_ranks"] == [hung_rank(args.ranks)])
    goal = GOALS.get((args.ranks, args.steps))
    if goal:
        result["goal"] = f"<= {goal[0]} s, <= {goal[1]} MB"
        result["goal_met"] = (result["verdict_ok"] and result["wall_s"] <= goal[0]
                              and result["peak_mb"] <= goal[1])
    if not args.keep:
        shutil.rmtree(root)
    print(json.dumps(result) if args.json else "\n".join(f"{k:>14}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
