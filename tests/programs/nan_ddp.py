"""Test program: DDP under the decorator where one rank feeds a NaN into one step's
gradient bucket; ``--bucket-view`` trains with ``gradient_as_bucket_view=True``."""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import diag


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--nan-rank", type=int, default=1)
    p.add_argument("--nan-step", type=int, default=2)
    p.add_argument("--bucket-view", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    diag.init(args.out)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 1)),
                gradient_as_bucket_view=args.bucket_view)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @diag.log_step(model=model)
    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    for i in range(args.steps):
        x = torch.randn(8, 16)
        if i == args.nan_step and dist.get_rank() == args.nan_rank:
            x[0, 0] = float("nan")
        step(x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
