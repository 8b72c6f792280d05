"""Test program: a plain DDP training script that imports nothing of ddiag, as users have.

gloo on CPU, a DataLoader with one worker per rank. ``--stuck-rank R`` makes rank R's
DataLoader worker block forever in its dataset's ``__getitem__`` at ``--stuck-step``, so
that rank waits in the DataLoader's queue get while the others wait in DDP's all_reduce:
the hang users find with py-spy. ``--slow-rank R --slow-ms M`` makes rank R's steps M ms
longer (a straggler). ``--pause-at STEP --pause-s S`` makes every rank pause together
(a checkpoint). Prints ``step N ... samples/s`` lines for scale-test's ``--metric``.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

BATCH = 16


class Samples(Dataset):
    def __init__(self, steps: int, stuck: bool, stuck_step: int) -> None:
        self.steps, self.stuck, self.stuck_step = steps, stuck, stuck_step

    def __len__(self) -> int:
        return self.steps * BATCH

    def __getitem__(self, i: int):
        if self.stuck and i // BATCH >= self.stuck_step:
            threading.Event().wait()  # a worker blocked on I/O that never returns
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), torch.randn(1, generator=g)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--stuck-rank", type=int, default=-1)
    p.add_argument("--stuck-step", type=int, default=3)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--step-ms", type=float, default=0.0, help="extra work per step, all ranks")
    p.add_argument("--pause-at", type=int, default=-1)
    p.add_argument("--pause-s", type=float, default=0.0)
    p.add_argument("--width", type=int, default=64, help="hidden size: the step's compute")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, args.width), torch.nn.ReLU(),
                                    torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                    torch.nn.Linear(args.width, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(Samples(args.steps, rank == args.stuck_rank, args.stuck_step),
                      batch_size=BATCH, num_workers=1)
    t0 = time.monotonic()
    for step, (x, y) in enumerate(data):
        if step == args.pause_at:
            time.sleep(args.pause_s)
        extra = args.step_ms + (args.slow_ms if rank == args.slow_rank else 0.0)
        if extra:
            time.sleep(extra / 1000)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            rate = (step + 1) * BATCH * dist.get_world_size() / (time.monotonic() - t0)
            print(f"step {step} loss {loss.item():.4f} {rate:.1f} samples/s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"done in {time.monotonic() - t0:.1f} s pid {os.getpid()}", flush=True)


if __name__ == "__main__":
    main()
