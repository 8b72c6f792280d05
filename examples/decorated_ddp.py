"""A small DDP training loop instrumented with ddiag: the decorator in its natural habitat.

    torchrun --nproc-per-node 2 examples/decorated_ddp.py --out runs/demo --steps 30

Runs on CPU with gloo (or alone, without torchrun). The tests drive it too.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import diag


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="run directory (default: $DDIAG_RUN_DIR)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="extra seconds per step, to pace the loop in tests")
    p.add_argument("--print-steps", action="store_true",
                   help="print each finished step as a JSON line on stdout (for tests)")
    p.add_argument("--print-stats", action="store_true",
                   help="print the writer's counters as JSON on stdout at the end")
    return p.parse_args(argv)


def build(width: int) -> torch.nn.Module:
    torch.manual_seed(0)  # identical initial weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 1))


def main(argv=None) -> None:
    args = parse_args(argv)
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    model = build(args.width)
    if distributed:
        model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    diag.init(args.out)
    gen = torch.Generator().manual_seed(1000 + rank)

    @diag.log_step(model=model)
    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        with diag.span("forward"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        with diag.span("backward"):
            loss.backward()
        with diag.span("optimizer"):
            opt.step()
        time.sleep(args.step_sleep)
        return loss

    for _ in range(args.steps):
        with diag.span("data"):
            x = torch.randn(args.batch, args.width, generator=gen)
            y = x.sum(dim=1, keepdim=True) * 0.1
        train_step(x, y)
        if args.print_steps:
            # One write per line: both ranks share the pipe when run under torchrun.
            line = json.dumps({"rank": rank, "step": diag.current_step(), "t": time.time()})
            os.write(1, (line + "\n").encode())
    if distributed:
        dist.barrier()
    diag.shutdown()
    if args.print_stats:
        w = diag.writer()
        print(json.dumps({"rank": rank, "written": w.written, "dropped": w.dropped}), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
