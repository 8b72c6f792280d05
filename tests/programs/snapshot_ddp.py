"""Test program: the PyTorch DDP tutorial's trainer (``multigpu_torchrun.py``), shrunk to
gloo on CPU and imports nothing of ddiag. As there, rank 0 saves ``snapshot.pt`` in the
working directory after every epoch (``EPOCHS_RUN`` is the epoch just finished), and a
run that finds one resumes from it: run twice in one directory, the second run trains
only the last epoch.

Unlike the tutorial, each rank does ``--steps-per-epoch`` steps whatever the world size
(no DistributedSampler), so the work per rank is the same at every stage; each step
sleeps ``--step-ms`` so that training, not start-up, sets the run's length. Rank 0
prints one ``epoch E steps S`` line per epoch it trains.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

SNAPSHOT = "snapshot.pt"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps-per-epoch", type=int, default=10)
    p.add_argument("--step-ms", type=float, default=100.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    first = 0
    if os.path.exists(SNAPSHOT):  # the tutorial's Trainer._load_snapshot
        snap = torch.load(SNAPSHOT)
        model.module.load_state_dict(snap["MODEL_STATE"])
        first = snap["EPOCHS_RUN"]
        print(f"resuming training from snapshot at epoch {first}", flush=True)
    for epoch in range(first, args.epochs):
        for _ in range(args.steps_per_epoch):
            time.sleep(args.step_ms / 1000)
            loss = model(torch.randn(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            torch.save({"MODEL_STATE": model.module.state_dict(), "EPOCHS_RUN": epoch},
                       SNAPSHOT)
            print(f"epoch {epoch} steps {args.steps_per_epoch}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
