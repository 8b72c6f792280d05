"""Pipeline parallelism with ``torch.distributed.pipelining`` (GPipe or 1F1B), and hybrid
pipeline x data parallelism when the world holds several pipeline replicas.

Ranks are laid out replica-major: replica d holds ranks d*K .. d*K+K-1, one per stage,
so the pipeline's point-to-point traffic stays between neighbouring ranks (on one node
when K divides the GPUs per node) and the data-parallel all_reduce of stage s runs over
ranks s, K+s, 2K+s, ...
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

import diag
from reference_trainer.config import TrainerConfig
from reference_trainer.distributed import Dist
from reference_trainer.model import build_model, cut_stage, loss_fn
from reference_trainer.modes.base import Mode

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Pipeline(Mode):
    def __init__(self, cfg: TrainerConfig, env: Dist) -> None:
        stages = cfg.parallel.pp
        self.dp_size = env.world_size // stages
        mesh = init_device_mesh(env.device.type, (self.dp_size, stages),
                                mesh_dim_names=("dp", "pp"))
        self.stage_index = mesh.get_local_rank("pp")
        self.dp_rank = mesh.get_local_rank("dp")
        self.dp_group = mesh.get_group("dp")
        # Build the whole model from the seed, then cut: every stage starts from exactly
        # the weights the unpipelined model has.
        whole = build_model(cfg.model, cfg.data.seed)
        self.model = self.local_module = cut_stage(whole, self.stage_index, stages).to(env.device)
        self.stage = PipelineStage(self.model, self.stage_index, stages, env.device,
                                   group=mesh.get_group("pp"))
        _time_chunks(self.stage)
        self.schedule = SCHEDULES[cfg.parallel.schedule](
            self.stage, n_microbatches=cfg.parallel.microbatches, loss_fn=loss_fn)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr)
        self.loss_ranks = self.dp_size  # one last stage per replica

    def forward_backward(self, tokens: torch.Tensor, targets: torch.Tensor
                         ) -> torch.Tensor | None:
        losses: list[torch.Tensor] = []
        inputs = (tokens,) if self.stage.is_first else ()
        target = targets if self.stage.is_last else None
        self.schedule.step(*inputs, target=target, losses=losses if self.stage.is_last else None)
        if self.dp_size > 1:
            with diag.span("backward"):
                self._all_reduce_grads()
        # Equal micro-batches, so the mean of their losses is the batch's mean loss.
        return torch.stack(losses).mean().detach() if losses else None

    def _all_reduce_grads(self) -> None:
        """Average this stage's gradients over its replicas in one flat all_reduce."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        flat = torch._utils._flatten_dense_tensors(grads)
        dist.all_reduce(flat, group=self.dp_group)
        flat /= self.dp_size
        for grad, synced in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
            grad.copy_(synced)


def _time_chunks(stage: PipelineStage) -> None:
    """Count each micro-batch's forward and backward compute as the forward and backward
    phases; the time a stage waits on its neighbours stays outside both, as pipeline
    bubble. Falls back to no phases if a torch version renames these methods."""
    for method, phase in (("forward_one_chunk", "forward"), ("backward_one_chunk", "backward")):
        original = getattr(stage, method, None)
        if original is not None:
            setattr(stage, method, _in_span(phase, original))


def _in_span(phase: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with diag.span(phase):
            return fn(*args, **kwargs)

    return run
