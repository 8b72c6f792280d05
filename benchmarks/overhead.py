"""Step-time overhead of the ddiag decorator, interleaved step by step in one run.

Gloo ranks run three variants of the same DDP training step. Every round runs each
variant for ``--per-round`` steps in an order shuffled afresh each round; every rank
draws the same order from ``--seed``, as DDP ranks must run the same model each step.

- ``stock``: DDP as shipped (C++ bucket all_reduce), ddiag's wrappers removed;
- ``hook``: DDP with torch's own ``allreduce_hook`` (the Python comm-hook path that ddiag
  uses to see buckets), ddiag's wrappers removed;
- ``ddiag``: ``@diag.log_step(model=...)`` with everything on: phases, shapes, loss, grad
  norm, NaN check of every reduction input, every collective recorded.

``hook`` and ``ddiag`` train one and the same model (its comm hook switches between
torch's and ddiag's), so they differ in nothing but ddiag: ``ddiag / hook`` is the cost
of the instrumentation. ``stock`` needs a model of its own, so ``ddiag / stock`` (what a
user of stock DDP sees) also carries any difference between two model instances.

The event log is written inside ddiag's timed steps: every ``--flush-every`` (10) ddiag
steps, the batch the writer thread would write every 0.2 s at 20 ms steps, with the
thread's own flushing turned off. So all serialising and writing is charged to ddiag, not
to whichever step the writer thread happens to run beside. An untimed barrier starts
every step on all ranks together, so one rank's slow step is not charged to the other
rank's next variant.

Two views of each step: wall time, and the CPU time of the training thread (which runs
all of ddiag's per-step work; unlike wall time it does not include waiting for the other
rank or for a core, so it is far less noisy). Both come as the ratio of totals with a 95%
bootstrap interval (rounds resampled, variants paired within a round), the ratio of
medians, and the difference in microseconds per step. A third view, the CPU time of
the whole process during the step (``proc_ddiag_vs_hook``), adds ddiag's work on other
threads, such as the bucket norms taken in gloo's completion callbacks. The writer thread's own CPU (the
1 s heartbeat) is reported apart, per second of run.

    python benchmarks/overhead.py [--rounds 600] [--per-round 1] [--batch 768] [--json]
                                  [--raw FILE]

Goal: ddiag / hook < 1.01.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import tempfile
import threading
import time
from queue import Empty

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import diag
from diag.runtime import collectives, instrument
from diag.format import schema

VARIANTS = ("stock", "hook", "ddiag")
GOAL = 1.01
BOOTSTRAP_SAMPLES = 4000


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


def build_variants(args, comm_hook) -> dict:
    """The step function of each variant; ``hook`` and ``ddiag`` share one model."""
    stock, shared = DDP(build(args.width, args.layers)), DDP(build(args.width, args.layers))
    # ddiag keeps a hook it finds; this one is registered with the state ddiag's has
    shared.register_comm_hook(collectives.hook_state(shared), comm_hook)
    steps = {name: make_step(m, torch.optim.SGD(m.parameters(), lr=1e-3))
             for name, m in (("stock", stock), ("hook", shared))}
    steps["ddiag"] = diag.log_step(steps["hook"], model=shared)
    return steps


class DdiagSwitch:
    """Turns ddiag's process-wide parts on for ddiag's steps only: its collective
    wrappers (torch's ``allreduce_hook`` calls ``dist.all_reduce`` through the namespace,
    so the other variants would pay for recording too) and its comm hook on the shared
    model. The wrappers are made once, then swapped in and out."""

    def __init__(self) -> None:
        collectives.uninstall()
        self.wrapped = {op: getattr(dist, op)
                        for op in collectives.install(instrument._state.recorder)}
        self.originals = {op: fn.__wrapped__ for op, fn in self.wrapped.items()}
        self.on = False

    def set(self, on: bool) -> None:
        self.on = on
        for op, fn in (self.wrapped if on else self.originals).items():
            setattr(dist, op, fn)

    def comm_hook(self, state, bucket):
        """torch's allreduce_hook on ``hook`` steps, ddiag's recording hook on ddiag's."""
        if self.on:
            return collectives.ddp_recording_hook(state, bucket)
        return allreduce_hook(state.process_group, bucket)


def timed_step(step, x, y, flush) -> tuple[float, float]:
    """(wall, training-thread CPU, process CPU) seconds of one step, the ddiag log flush
    included. The process's CPU adds what other threads did meanwhile: on gloo, the
    communication thread that runs the all_reduce completion callbacks."""
    p0, c0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
    step(x, y)
    if flush is not None:
        flush()
    return time.perf_counter() - t0, time.thread_time() - c0, time.process_time() - p0


def run_rounds(steps: dict, x, y, rounds: int, per_round: int, rng: random.Random,
               switch: DdiagSwitch, flush) -> dict:
    """Per variant, the (wall, cpu) of every step, in round order."""
    times = {name: [] for name in VARIANTS}
    for _ in range(rounds):
        order = list(VARIANTS)
        rng.shuffle(order)
        for name in order:
            for _ in range(per_round):
                dist.barrier()  # while nothing records, so ddiag logs only its own steps
                switch.set(name == "ddiag")
                times[name].append(timed_step(steps[name], x, y,
                                              flush if name == "ddiag" else None))
                switch.set(False)
    return times


def log_flusher(every: int):
    """Write ddiag's queued records every ``every`` ddiag steps, inside that step's timed
    region. The writer thread does the same every 0.2 s in a real run, which at 20 ms
    steps is every 10 steps; here its own flushing is off, so none of it escapes."""
    steps = itertools.count(1)

    def flush() -> None:
        if next(steps) % every == 0:
            diag.writer().flush()

    return flush


def writer_cpu_s() -> float:
    """CPU seconds the ddiag writer thread has used: its 1 s heartbeat (records are all
    written inside ddiag's steps)."""
    for thread in threading.enumerate():
        if thread.name == "ddiag-writer":
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return 0.0


def worker(rank: int, world: int, init_file: str, args, queue) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    # The benchmark writes the log itself, inside ddiag's timed steps (see log_flusher).
    diag.init(args.run_dir, flush_interval_s=24 * 3600)
    switch = DdiagSwitch()
    steps = build_variants(args, switch.comm_hook)
    torch.manual_seed(rank)
    x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, 1)
    rng = random.Random(args.seed)  # the same draws on every rank
    flush = log_flusher(args.flush_every)
    run_rounds(steps, x, y, args.warmup, 1, rng, switch, flush)
    writer0, t0 = writer_cpu_s(), time.perf_counter()
    times = run_rounds(steps, x, y, args.rounds, args.per_round, rng, switch, flush)
    writer_share = (writer_cpu_s() - writer0) / (time.perf_counter() - t0)
    diag.shutdown()
    queue.put({"rank": rank, "times": times, "writer_share": writer_share,
               "written": diag.writer().written, "dropped": diag.writer().dropped})
    dist.destroy_process_group()


def per_round(results: list[dict], name: str, view: int, steps_per_round: int) -> np.ndarray:
    """Seconds per round of one variant, averaged over ranks (ranks step together)."""
    per_rank = np.array([[t[view] for t in r["times"][name]] for r in results])
    return per_rank.mean(axis=0).reshape(-1, steps_per_round).sum(axis=1)


def paired_ratio(a: np.ndarray, b: np.ndarray, steps_per_round: int, seed: int) -> dict:
    """a against b, rounds paired: ratio of totals with its 95% bootstrap interval,
    ratio of medians, and the difference in microseconds per step with its interval."""
    idx = np.random.default_rng(seed).integers(0, len(a), (BOOTSTRAP_SAMPLES, len(a)))
    sa, sb = a[idx].sum(axis=1), b[idx].sum(axis=1)
    per_step_us = 1e6 / (len(a) * steps_per_round)
    return {
        "total": round(float(a.sum() / b.sum()), 4),
        "ci95": [round(float(q), 4) for q in np.percentile(sa / sb, [2.5, 97.5])],
        "median": round(float(np.median(a) / np.median(b)), 4),
        "overhead_us_per_step": round(float((a.sum() - b.sum()) * per_step_us), 1),
        "overhead_us_ci95": [round(float(q), 1)
                             for q in np.percentile((sa - sb) * per_step_us, [2.5, 97.5])],
    }


def median_ms(results: list[dict], name: str, view: int) -> float:
    return round(statistics.median(t[view] for r in results for t in r["times"][name]) * 1e3, 3)


def summarize(results: list[dict], args, load: dict) -> dict:
    k = args.per_round
    wall = {name: per_round(results, name, 0, k) for name in VARIANTS}
    cpu = {name: per_round(results, name, 1, k) for name in VARIANTS}
    proc = {name: per_round(results, name, 2, k) for name in VARIANTS}
    hook_steps = [t[0] for r in results for t in r["times"]["hook"]]
    summary = {
        "world_size": args.world, "batch": args.batch,
        "steps_per_variant_per_rank": len(results[0]["times"]["ddiag"]),
        **{f"{name}_median_ms": median_ms(results, name, 0) for name in VARIANTS},
        "hook_step_ms_p10_p90": [round(float(q) * 1e3, 2)
                                 for q in np.percentile(hook_steps, [10, 90])],
        "hook_cpu_median_ms": median_ms(results, "hook", 1),
        "wall_ddiag_vs_hook": paired_ratio(wall["ddiag"], wall["hook"], k, args.seed),
        "wall_ddiag_vs_stock": paired_ratio(wall["ddiag"], wall["stock"], k, args.seed),
        "cpu_ddiag_vs_hook": paired_ratio(cpu["ddiag"], cpu["hook"], k, args.seed),
        "proc_ddiag_vs_hook": paired_ratio(proc["ddiag"], proc["hook"], k, args.seed),
        "proc_hook_median_ms": median_ms(results, "hook", 2),
        "writer_thread_cpu_pct_of_wall": round(
            100 * statistics.mean(r["writer_share"] for r in results), 3),
        "records_written": sum(r["written"] for r in results),
        "records_dropped": sum(r["dropped"] for r in results),
        **load,
    }
    summary["goal"] = f"ddiag / hook < {GOAL}: {verdict(summary['wall_ddiag_vs_hook'])}"
    return summary


def report(summary: dict) -> None:
    for key, value in summary.items():
        if isinstance(value, dict):
            print(f"{key:>28}: " + ", ".join(f"{k} {v}" for k, v in value.items()))
        else:
            print(f"{key:>28}: {value}")


def verdict(ratio: dict) -> str:
    """Met only when the whole 95% interval is below the goal; a point estimate below it
    with an interval across it is noise, not evidence."""
    low, high = ratio["ci95"]
    if high < GOAL:
        return f"met (ratio {ratio['total']}, 95% interval [{low}, {high}])"
    if low >= GOAL:
        return f"NOT met (ratio {ratio['total']}, 95% interval [{low}, {high}])"
    return (f"not shown (ratio {ratio['total']}, 95% interval [{low}, {high}] spans it; "
            "run more --rounds on a quieter machine)")


def collect(ranks, queue, world: int) -> list[dict]:
    """Every rank's result, read before joining: a rank cannot exit while its result
    is still in the pipe. A rank that died raises here instead of leaving us waiting."""
    results = []
    while len(results) < world:
        try:
            results.append(queue.get(timeout=1))
        except Empty:
            ranks.join(timeout=0)
    while not ranks.join():
        pass
    return sorted(results, key=lambda r: r["rank"])


def write_raw(path: str, results: list[dict], summary: dict) -> None:
    """Every step's times, beside the summary; refuses to overwrite a file."""
    doc = {**schema.stamp(schema.OVERHEAD_RAW), "variants": list(VARIANTS),
           "fields": ["wall_s", "thread_cpu_s", "process_cpu_s"], "summary": summary,
           "ranks": [{"rank": r["rank"], "times": r["times"]} for r in results]}
    with open(path, "x") as f:
        json.dump(doc, f)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rounds", type=int, default=600)
    p.add_argument("--per-round", type=int, default=1, help="steps of a variant per round")
    p.add_argument("--warmup", type=int, default=20, help="untimed rounds first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flush-every", type=int, default=10,
                   help="write the log every N ddiag steps, inside the step (0.2 s at 20 ms)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=768, help="per rank; ~20 ms steps here")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    p.add_argument("--raw", metavar="FILE",
                   help="also write every step's (wall, thread CPU, process CPU) per rank "
                        "and variant to FILE (JSON), for other statistics")
    args = p.parse_args()
    for name in ("world", "rounds", "per_round", "flush_every", "batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got: {getattr(args, name)}")
    if args.raw and os.path.exists(args.raw):
        p.error(f"--raw {args.raw}: the file exists; give a new path (nothing is overwritten)")
    load = {"loadavg_1m_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        args.run_dir = os.path.join(tmp, "run")
        queue = mp.get_context("spawn").Queue()
        ranks = mp.spawn(worker, args=(args.world, os.path.join(tmp, "init"), args, queue),
                         nprocs=args.world, join=False)
        results = collect(ranks, queue, args.world)
    load["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    summary = summarize(results, args, load)
    if args.raw:
        write_raw(args.raw, results, summary)
    if args.json:
        print(json.dumps(summary))
    else:
        report(summary)


if __name__ == "__main__":
    main()
