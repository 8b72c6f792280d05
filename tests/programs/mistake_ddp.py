"""Test program: a DDP training script written the way users write them (gloo on CPU, a
DataLoader with workers, a model that registers a buffer, so DDP broadcasts buffers in
every forward), imports nothing of ddiag, and makes one mistake, chosen by ``--mistake``:

- ``barrier_after_save``: rank 0 saves a checkpoint and then calls ``dist.barrier()``,
  which the other ranks never call (they go on to the next step's collectives);
- ``stuck_worker``: rank 1's DataLoader worker blocks in ``__getitem__`` for ever (a read
  that never returns), so rank 1 waits on its input while the others wait in DDP;
- ``eval_all_reduce``: rank 0 evaluates and all_reduces the eval loss, alone;
- ``slow_save``: rank 0 saves for longer than the process-group timeout (``--timeout-s``);
- ``slow_rank``: rank 1's steps take 3x as long as the others' (``--step-ms`` of work per
  step on every rank, three times that on rank 1): a straggler, not a hang.

The moment the mistake begins is printed on stdout as ``MISTAKE BEGINS <unix time>``
(by the DataLoader worker, for ``stuck_worker``), so a test can time a verdict from it.

Each happens at ``--at-step``; ``--steps`` bounds the run otherwise. ``--no-buffer``: the
model registers no buffer, so the other ranks wait in backward (DDP's gradient all_reduce)
rather than in forward's buffer broadcast.
"""

from __future__ import annotations

import argparse
import datetime
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

MISTAKES = ("none", "barrier_after_save", "stuck_worker", "eval_all_reduce", "slow_save",
            "slow_rank")


class Net(torch.nn.Module):
    def __init__(self, buffer: bool) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                        torch.nn.Linear(32, 1))
        if buffer:
            self.register_buffer("seen", torch.zeros(1))

    def forward(self, x):
        if hasattr(self, "seen"):
            self.seen += x.shape[0]
        return self.body(x)


class Shards(Dataset):
    def __init__(self, n: int, stuck_from: int | None) -> None:
        self.n, self.stuck_from = n, stuck_from

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.stuck_from is not None and i >= self.stuck_from:
            begins()
            threading.Event().wait()  # a read from a mount that never answers
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randn(1, generator=g)


def begins() -> None:
    print(f"MISTAKE BEGINS {time.time():.3f}", flush=True)


def work(ms: float) -> None:
    """``ms`` of the step's own compute (a stand-in for a larger model)."""
    end, a = time.monotonic() + ms / 1000, torch.ones(64, 64)
    while time.monotonic() < end:
        a = (a @ a).clamp_(-1, 1)


def save_checkpoint(model, step: int) -> None:
    torch.save(model.module.state_dict(), f"/tmp/ddiag-mistake-{step}.pt")
    dist.barrier()  # the mistake: only rank 0 gets here


def _save_snapshot(model, seconds: float) -> None:
    torch.save(model.module.state_dict(), "/tmp/ddiag-mistake-snapshot.pt")
    time.sleep(seconds)  # a slow filesystem


def evaluate(model) -> float:
    with torch.no_grad():
        loss = model.module(torch.ones(4, 16)).pow(2).mean()
    dist.all_reduce(loss)  # the mistake: only rank 0 evaluates
    return loss.item()


def train(args, rank: int, world: int) -> None:
    model = DDP(Net(not args.no_buffer))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = 8
    stuck = args.at_step * batch * world if args.mistake == "stuck_worker" and rank == 1 else None
    data = Shards(args.steps * batch * world, stuck)
    loader = DataLoader(data, batch_size=batch, num_workers=2,
                        sampler=DistributedSampler(data, shuffle=False))
    for step, (x, y) in enumerate(loader):
        slow = args.mistake == "slow_rank" and rank == 1 and step >= args.at_step
        if slow and step == args.at_step:
            begins()
        work(args.step_ms * (3 if slow else 1))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == args.at_step and rank == 0:
            if args.mistake in ("barrier_after_save", "eval_all_reduce", "slow_save"):
                begins()
            if args.mistake == "barrier_after_save":
                save_checkpoint(model, step)
            elif args.mistake == "eval_all_reduce":
                print(f"eval {evaluate(model):.3f}", flush=True)
            elif args.mistake == "slow_save":
                _save_snapshot(model, args.timeout_s * 3)
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mistake", choices=MISTAKES, default="none")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--at-step", type=int, default=3)
    p.add_argument("--timeout-s", type=float, default=1800.0)
    p.add_argument("--step-ms", type=float, default=0.0, help="compute per step, every rank")
    p.add_argument("--no-buffer", action="store_true", help="DDP broadcasts no buffers")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    train(args, dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
