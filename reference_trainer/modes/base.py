"""What every parallelism offers the training loop."""

from __future__ import annotations

import torch
from torch import nn

import diag
from reference_trainer.model import loss_fn


class Mode:
    """One parallelism: the wrapped model, its optimizer, and one forward + backward."""

    model: nn.Module
    """What ``diag.log_step(model=)`` checks gradients on (the DDP/FSDP wrapper)."""
    local_module: nn.Module
    """The module whose output the ``nan`` fault poisons (this rank's part of the net)."""
    optimizer: torch.optim.Optimizer
    dp_rank: int = 0
    """This rank's data shard."""
    dp_size: int = 1
    """How many data shards (replicas) there are."""
    loss_ranks: int = 1
    """How many ranks hold a loss; the metrics all_reduce divides by it."""

    def forward_backward(self, tokens: torch.Tensor, targets: torch.Tensor
                         ) -> torch.Tensor | None:
        """Loss of this rank's batch (None where this rank computes no loss)."""
        with diag.span("forward"):
            loss = loss_fn(self.model(tokens), targets)
        with diag.span("backward"):
            loss.backward()
        return loss.detach()

    def optimizer_step(self) -> None:
        self.optimizer.step()

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Whole parameters by name (a collective where they are sharded)."""
        return {n: p.detach().cpu().clone() for n, p in self.local_module.named_parameters()}
