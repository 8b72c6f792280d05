"""ZeRO-2 and ZeRO-3 with FSDP2 (``fully_shard``): parameters, gradients and optimizer
state sharded over all ranks; ZeRO-2 keeps the gathered parameters from forward to
backward (reshard_after_forward=False), ZeRO-3 frees them after forward."""

from __future__ import annotations

import warnings

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from reference_trainer.config import TrainerConfig
from reference_trainer.distributed import Dist
from reference_trainer.model import build_model
from reference_trainer.modes.base import Mode


# The head's logits are a view of the matmul output; FSDP2 warns that an in-place op on
# them would skip its backward hook. Nothing here modifies them in place (the nan fault
# adds out of place), so the warning is noise in every run's log.
warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")


class FullyShardedDataParallel(Mode):
    def __init__(self, cfg: TrainerConfig, env: Dist, *, reshard_after_forward: bool) -> None:
        model = build_model(cfg.model, cfg.data.seed).to(env.device)
        mesh = init_device_mesh(env.device.type, (env.world_size,))
        # One unit per block, as torchtitan does: each block's all-gather overlaps the
        # previous block's compute, and only one block's full weights exist at a time.
        for block in model.layers.values():
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
        self.model = self.local_module = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        self.dp_rank, self.dp_size = env.rank, env.world_size
        self.loss_ranks = env.world_size

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return {n: p.full_tensor().detach().cpu() for n, p in self.model.named_parameters()}
