"""Test program: DDP under the decorator where one rank feeds a NaN into one step's
gradient bucket; ``--bucket-view`` trains with ``gradient_as_bucket_view=True``.

``--shadow`` also trains a copy of the model with torch's own ``allreduce_hook`` on the
same batches, and exits 3 unless both end with bitwise equal parameters: ddiag's comm
hook must not change what training computes."""

from __future__ import annotations

import argparse
import copy
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import diag


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--nan-rank", type=int, default=1)
    p.add_argument("--nan-step", type=int, default=2)
    p.add_argument("--bucket-view", action="store_true")
    p.add_argument("--shadow", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    diag.init(args.out)
    torch.manual_seed(0)
    inner = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 1))
    shadow_inner = copy.deepcopy(inner)
    model = DDP(inner, gradient_as_bucket_view=args.bucket_view)
    step = diag.log_step(train_step(model), model=model)
    shadow = DDP(shadow_inner, gradient_as_bucket_view=args.bucket_view)
    shadow.register_comm_hook(None, allreduce_hook)
    shadow_step = train_step(shadow)

    for i in range(args.steps):
        x = torch.randn(8, 16)
        if i == args.nan_step and dist.get_rank() == args.nan_rank:
            x[0, 0] = float("nan")
        step(x)
        if args.shadow:
            shadow_step(x)
    if args.shadow and not all(torch.equal(a, b) for a, b in
                               zip(model.parameters(), shadow.parameters())):
        print("parameters differ from torch's allreduce_hook", file=sys.stderr)
        sys.exit(3)
    # every rank done before any tears gloo down: a peer's pairs closing under a rank
    # still in teardown aborts it ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()


def train_step(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    return step


if __name__ == "__main__":
    main()
