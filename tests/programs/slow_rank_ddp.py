"""Test program: DDP under the decorator where one rank's forward takes longer every
step, so the other ranks wait for its gradient buckets at the end of their backward."""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import diag


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--slow-s", type=float, default=0.2)
    args = p.parse_args()
    dist.init_process_group("gloo")
    diag.init(args.out)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    slow = dist.get_rank() == args.slow_rank

    @diag.log_step(model=model)
    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        if slow:
            time.sleep(args.slow_s)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.steps):
        step(torch.randn(8, 32))
    dist.barrier()  # every rank done before any tears gloo down (see nan_ddp.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
