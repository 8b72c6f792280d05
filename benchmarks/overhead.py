"""Step-time overhead of the ddiag decorator, side by side in one run.

Two gloo ranks train three identical DDP models in alternating blocks, so drift in
machine load hits all alike:

- ``stock``: DDP as shipped (C++ bucket all_reduce), ddiag's wrappers removed;
- ``hook``: DDP with torch's own ``allreduce_hook`` (the Python comm-hook path that ddiag
  uses to see buckets), ddiag's wrappers removed;
- ``ddiag``: ``@diag.log_step(model=...)`` with everything on: phases, shapes, loss, grad
  norm, every collective recorded through ddiag's hook.

``ddiag / hook`` is the cost of the instrumentation itself (same communication path);
``ddiag / stock`` is what a user of stock DDP sees. Each ddiag block ends with a
synchronous flush of the event log inside the timed region, which charges all
background writing to the ddiag side.

    python benchmarks/overhead.py [--rounds 10] [--block 25] [--batch 256]

Goal: ddiag / hook < 1.01.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

VARIANTS = ("stock", "hook", "ddiag")


def build(width: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(width, 1))


def make_step(model, opt):
    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def timed_block(step, x, y, n: int, flush=None) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t0)
    if flush is not None:
        t0 = time.perf_counter()
        flush()
        times[-1] += time.perf_counter() - t0
    return times


def worker(rank: int, world: int, init_file: str, args, queue) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    import diag
    from diag import collectives, instrument
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    diag.init(args.run_dir)
    models = {name: DDP(build(args.width, args.layers)) for name in VARIANTS}
    models["hook"].register_comm_hook(None, allreduce_hook)
    steps = {name: make_step(m, torch.optim.SGD(m.parameters(), lr=1e-3))
             for name, m in models.items()}
    steps["ddiag"] = diag.log_step(steps["ddiag"], model=models["ddiag"])
    x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, 1)
    times = {name: [] for name in VARIANTS}
    for r in range(args.rounds + 1):  # round 0 warms up every variant, untimed
        for name in VARIANTS if r % 2 else VARIANTS[::-1]:
            if name == "ddiag":
                collectives.install(instrument._state.recorder)
            else:
                collectives.uninstall()
            flush = diag.writer().flush if name == "ddiag" and diag.writer() else None
            block = timed_block(steps[name], x, y, args.block, flush)
            times[name] += block if r else []
    diag.shutdown()
    queue.put({"rank": rank, "times": times, "written": diag.writer().written,
               "dropped": diag.writer().dropped})
    dist.destroy_process_group()


def summarize(results: list[dict], args) -> dict:
    t = {name: [x for r in results for x in r["times"][name]] for name in VARIANTS}
    med = {name: statistics.median(v) for name, v in t.items()}
    return {
        "world_size": args.world, "batch": args.batch,
        "steps_per_variant_per_rank": len(results[0]["times"]["ddiag"]),
        **{f"{name}_median_ms": round(med[name] * 1000, 3) for name in VARIANTS},
        "ratio_ddiag_vs_hook_total": round(sum(t["ddiag"]) / sum(t["hook"]), 4),
        "ratio_ddiag_vs_hook_median": round(med["ddiag"] / med["hook"], 4),
        "ratio_ddiag_vs_stock_total": round(sum(t["ddiag"]) / sum(t["stock"]), 4),
        "ratio_ddiag_vs_stock_median": round(med["ddiag"] / med["stock"], 4),
        "records_written": sum(r["written"] for r in results),
        "records_dropped": sum(r["dropped"] for r in results),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--block", type=int, default=25)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=256, help="per rank; ~20 ms steps here")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        args.run_dir = os.path.join(tmp, "run")
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        mp.spawn(worker, args=(args.world, os.path.join(tmp, "init"), args, queue),
                 nprocs=args.world, join=True)
        results = sorted((queue.get(timeout=60) for _ in range(args.world)),
                         key=lambda r: r["rank"])
    summary = summarize(results, args)
    if not args.json:
        for k, v in summary.items():
            print(f"{k:>28}: {v}")
        met = summary["ratio_ddiag_vs_hook_total"] < 1.01
        print(f"\ngoal: ddiag / hook < 1.01 -> {'met' if met else 'NOT met'}")
    else:
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
