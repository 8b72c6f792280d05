"""Decorator cost on a transformer under DDP at world size 1: plain step vs
``@diag.log_step`` vs ``@diag.log_step(model=...)``, with host syncs per step.

On CUDA: bf16, NCCL, and the host-device synchronisations each variant makes per step,
counted with ``torch.cuda.set_sync_debug_mode("warn")``. Without a GPU: float32, gloo,
a small model, and syncs "n/a". Each variant trains a model of its own (same seed), so
the plain step keeps DDP's own C++ all_reduce while ``model=`` installs ddiag's comm
hook: ``ratio_vs_plain`` is what a user of stock DDP sees. Rounds interleave the
variants (the order reversed every other round); the device is synchronised only at
round ends, so a variant that makes the host wait inside its steps pays for it.

    python benchmarks/gpu_overhead.py [--rounds 12] [--steps 10] [--width W] [--layers L]
                                      [--batch B] [--seq S] [--json]

Defaults: W 1024, L 4, B 4, S 1024 on CUDA (an 8.6 ms step on an H200 at main bf7813d);
W 64, L 2, B 4, S 32 on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import diag

try:
    from benchmarks.overhead import paired_ratio, report
except ImportError:  # run as a script: its own folder is on the path, not the repository
    from overhead import paired_ratio, report

VARIANTS = ("plain", "log_step", "log_step_model")
GPU_SIZE = {"width": 1024, "layers": 4, "batch": 4, "seq": 1024}
CPU_SIZE = {"width": 64, "layers": 2, "batch": 4, "seq": 32}


def build(args, device: str, dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.TransformerEncoderLayer(args.width, args.heads, 4 * args.width,
                                               batch_first=True, dtype=dtype, device=device)
              for _ in range(args.layers)]
    return DDP(torch.nn.Sequential(*layers))


def make_step(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(x):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def build_variants(args, device: str, dtype) -> dict:
    """Each variant's step, each on a model of its own (``model=`` hooks its DDP)."""
    models = {name: build(args, device, dtype) for name in VARIANTS}
    steps = {name: make_step(model) for name, model in models.items()}
    steps["log_step"] = diag.log_step(steps["log_step"])
    steps["log_step_model"] = diag.log_step(model=models["log_step_model"])(
        steps["log_step_model"])
    return steps


def sync_device(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def syncs_per_step(step, x, n: int) -> float:
    """Host-device synchronisations per step, as torch's sync debug mode warns them."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(n):
                step(x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return sum("synchroniz" in str(w.message) for w in caught) / n


def run_rounds(steps: dict, x, rounds: int, per_round: int, cuda: bool) -> dict:
    """Seconds per step of each variant, one value per round."""
    times = {name: [] for name in steps}
    for r in range(rounds):
        for name in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            step = steps[name]
            sync_device(cuda)
            t0 = time.perf_counter()
            for _ in range(per_round):
                step(x)
            sync_device(cuda)
            times[name].append((time.perf_counter() - t0) / per_round)
    return times


def summarize(times: dict, syncs, args, cuda: bool, dtype) -> dict:
    med = {name: float(np.median(v)) for name, v in times.items()}
    plain = np.array(times["plain"])
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "backend": dist.get_backend(), "dtype": str(dtype).removeprefix("torch."),
        "width": args.width, "layers": args.layers, "batch": args.batch, "seq": args.seq,
        "rounds": args.rounds, "steps_per_round": args.steps,
        "step_ms_median": {k: round(v * 1e3, 3) for k, v in med.items()},
        "ratio_vs_plain": {k: round(v / med["plain"], 4) for k, v in med.items()},
        "ratio_vs_plain_total": {k: paired_ratio(np.array(v), plain, 1, args.seed)
                                 for k, v in times.items() if k != "plain"},
        "syncs_per_step": syncs,
        "records_written": diag.writer().written, "records_dropped": diag.writer().dropped,
        "torch": torch.__version__,
    }


def measure(args, tmp: str) -> dict:
    cuda = torch.cuda.is_available() and not args.cpu
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    if cuda:
        torch.cuda.set_device(0)
    else:  # two intra-op threads on a busy 2-core machine made steps 7-40x slower
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{tmp}/init",
                            rank=0, world_size=1)
    try:
        diag.init(os.path.join(tmp, "run"))
        steps = build_variants(args, device, dtype)
        x = torch.randn(args.batch, args.seq, args.width, device=device, dtype=dtype)
        for step in steps.values():
            for _ in range(args.warmup):
                step(x)
        sync_device(cuda)
        syncs = ({name: syncs_per_step(step, x, args.steps) for name, step in steps.items()}
                 if cuda else "n/a")
        times = run_rounds(steps, x, args.rounds, args.steps, cuda)
        diag.shutdown()  # the last steps' values are read here (no wait on the device before)
        return summarize(times, syncs, args, cuda, dtype)
    finally:
        dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=10, help="steps of a variant per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps of each variant first")
    p.add_argument("--width", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--seq", type=int)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seed", type=int, default=0, help="of the bootstrap intervals")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even with a GPU")
    p.add_argument("--json", action="store_true", help="print only the JSON result")
    args = p.parse_args()
    size = CPU_SIZE if args.cpu or not torch.cuda.is_available() else GPU_SIZE
    for name, default in size.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    for name in ("rounds", "steps", "width", "layers", "batch", "seq", "heads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got: {getattr(args, name)}")
    if args.width % args.heads:
        p.error(f"--width {args.width} must be a multiple of --heads {args.heads}")
    with tempfile.TemporaryDirectory() as tmp:
        summary = measure(args, tmp)
    if args.json:
        print(json.dumps(summary))
    else:
        report(summary)


if __name__ == "__main__":
    main()
