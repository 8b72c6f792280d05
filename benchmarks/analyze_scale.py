"""Time ``ddiag analyze`` on a generated 512-rank x 500-step run directory.

The run has what a DDP job under the decorator writes per rank and step: a step record
and two bucket all_reduces, plus heartbeats; rank 137 hangs before the last step's
collectives, so the verdict can be checked as well as timed.

    python benchmarks/analyze_scale.py [--ranks 512] [--steps 500] [--keep DIR]

Goal: under 20 s and under 4 GB peak RSS on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diag.format import schema
from diag.runtime.eventlog import encode

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
    for rank in range(ranks):
        write_rank(root, rank, ranks, steps)


def time_analyze(root: Path) -> dict:
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "diag.cli", "analyze", str(root), "--json"],
                         capture_output=True, text=True)
    wall = time.monotonic() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    doc = json.loads(res.stdout) if res.stdout.strip() else {}
    top = (doc.get("findings") or [{}])[0]
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(peak_kb / 1024), "exit": res.returncode,
            "top_category": top.get("category"), "top_ranks": top.get("culprit", {}).get("ranks"),
            "stderr": res.stderr[-500:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=512)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--keep", type=Path, help="generate into this directory and keep it")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="ddiag-scale-"))
    t0 = time.monotonic()
    generate(root, args.ranks, args.steps)
    size_mb = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20
    result = {"ranks": args.ranks, "steps": args.steps, "input_mb": round(size_mb),
              "generate_s": round(time.monotonic() - t0, 1), **time_analyze(root)}
    result["verdict_ok"] = (result["top_category"] == "rank_hang"
                            and result["top_ranks"] == [hung_rank(args.ranks)])
    if not args.keep:
        shutil.rmtree(root)
    print(json.dumps(result) if args.json else "\n".join(f"{k:>14}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
