"""Test program: DDP under the decorator where one rank blocks in its data loading at a
given step, as a deadlocked DataLoader does; optional marked pause on every rank."""

from __future__ import annotations

import argparse
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import diag
from diag.runtime import flight_recorder


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-step", type=int, default=20)
    p.add_argument("--pause-step", type=int, default=-1, help="every rank pauses here")
    p.add_argument("--pause-s", type=float, default=0.0)
    p.add_argument("--step-sleep", type=float, default=0.02)
    args = p.parse_args()
    flight_recorder.enable()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    diag.init(args.out)
    flight_recorder.install(flight_recorder.dump_path(args.out, rank))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @diag.log_step(model=model)
    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        time.sleep(args.step_sleep)

    for s in range(args.steps):
        with diag.span("data"):
            if rank == args.hang_rank and s == args.hang_step:
                threading.Event().wait()  # blocks forever, like a deadlocked loader
            x = torch.randn(8, 32)
        if s == args.pause_step:
            with diag.span("checkpoint"):
                time.sleep(args.pause_s)
        step(x)
    diag.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
