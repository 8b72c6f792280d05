"""DDP, and ZeRO-1: DDP with ZeroRedundancyOptimizer, each rank keeping the optimizer
state of its own share of the parameters and broadcasting them after its step."""

from __future__ import annotations

import torch
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from reference_trainer.config import TrainerConfig
from reference_trainer.distributed import Dist
from reference_trainer.model import build_model
from reference_trainer.modes.base import Mode


class DataParallel(Mode):
    def __init__(self, cfg: TrainerConfig, env: Dist, *, zero1: bool) -> None:
        self.local_module = build_model(cfg.model, cfg.data.seed).to(env.device)
        on_gpu = env.device.type == "cuda"
        self.model = DDP(self.local_module, device_ids=[env.device.index] if on_gpu else None)
        if zero1:
            self.optimizer = ZeroRedundancyOptimizer(
                self.model.parameters(), optimizer_class=torch.optim.AdamW, lr=cfg.lr)
        else:
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)
        self.dp_rank, self.dp_size = env.rank, env.world_size
        self.loss_ranks = env.world_size
