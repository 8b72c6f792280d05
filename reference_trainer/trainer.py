"""The training loop: load, one instrumented step, a metrics all_reduce, memory records,
and the end-of-run summary."""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.distributed as dist

import diag
from reference_trainer import memory
from reference_trainer.config import TrainerConfig
from reference_trainer.data import batches, build_loader
from reference_trainer.distributed import Dist
from reference_trainer.faults import Faults
from reference_trainer.modes import Mode, build_mode

StepFn = Callable[[torch.Tensor, torch.Tensor], dict]


class Trainer:
    """One rank's run: its parallelism (mode), its loader, its faults, and the loop."""

    def __init__(self, cfg: TrainerConfig, env: Dist) -> None:
        self.cfg, self.env = cfg, env
        self.faults = Faults(cfg.faults, env.rank, env.device)
        self.mode: Mode = build_mode(cfg, env)
        self.mode.local_module.register_forward_hook(self.faults.poison_output)
        self.loader = build_loader(cfg.model, cfg.data, self.faults.data_faults(),
                                   dp_rank=self.mode.dp_rank, dp_size=self.mode.dp_size,
                                   pin_memory=env.device.type == "cuda")
        self.losses: list[float] = []
        self.memory: dict = {}

    def train(self) -> float:
        """Run every step; returns steps/s after the first (warm-up) step."""
        step_fn = self._make_step()
        data = batches(self.loader)
        try:
            started = None
            for step in range(self.cfg.steps):
                with diag.span("data"):
                    tokens, targets = (t.to(self.env.device, non_blocking=True)
                                       for t in next(data))
                self.losses.append(step_fn(tokens, targets)["global_loss"])
                self._after_step(step)
                started = started or time.monotonic()
        finally:
            data.close()  # stop loader workers now, not when a traceback lets go of them
        elapsed = time.monotonic() - started
        return (self.cfg.steps - 1) / elapsed if self.cfg.steps > 1 and elapsed > 0 else 0.0

    def _make_step(self) -> StepFn:
        mode, faults = self.mode, self.faults

        @diag.log_step(model=mode.model)
        def train_step(tokens: torch.Tensor, targets: torch.Tensor) -> dict:
            step = diag.current_step()
            mode.optimizer.zero_grad(set_to_none=True)
            with diag.span("forward"):
                faults.in_forward(step)
            loss = mode.forward_backward(tokens, targets)
            with diag.span("optimizer"):
                mode.optimizer_step()
            return {"loss": loss, "global_loss": self._global_loss(loss, step)}

        return train_step

    def _global_loss(self, loss: torch.Tensor | None, step: int) -> float:
        """The global batch's mean loss, by one all_reduce every step, as most training
        loops do for logging. (The shape_mismatch fault lengthens this tensor.)"""
        metrics = torch.zeros(1 + self.faults.metrics_extra(step), device=self.env.device)
        if loss is not None:
            metrics[0] = loss.float()
        dist.all_reduce(metrics)
        return float(metrics[0]) / self.mode.loss_ranks

    def _after_step(self, step: int) -> None:
        if step in (0, self.cfg.steps - 1):
            # After the first step the optimizer state exists; the last shows the steady state.
            self.memory = memory.measure(self.mode.model, self.mode.optimizer, self.env.device)
            diag.record("memory", **self.memory)
        if self.faults.extra_collective(step):
            # The classic bug: a checkpoint path that only one rank takes, with a
            # barrier inside it that the other ranks never enter.
            with diag.span("checkpoint"):
                dist.barrier()

    def summary(self, steps_per_s: float, wall_s: float) -> dict:
        """Every rank calls this (it gathers each rank's memory record)."""
        per_rank: list[dict] = [{}] * self.env.world_size
        dist.all_gather_object(per_rank, {"rank": self.env.rank, **self.memory})
        cfg = self.cfg
        return {
            "mode": cfg.parallel.mode, "world_size": self.env.world_size,
            "pp": cfg.parallel.pp if cfg.parallel.mode == "pipeline" else 1,
            "dp": self.mode.dp_size, "schedule": cfg.parallel.schedule
            if cfg.parallel.mode == "pipeline" else None,
            "microbatches": cfg.parallel.microbatches if cfg.parallel.mode == "pipeline" else None,
            "device": str(self.env.device), "backend": self.env.backend,
            "steps": cfg.steps, "batch": cfg.data.batch,
            "global_batch": cfg.data.batch * self.mode.dp_size,
            "losses": self.losses, "final_loss": self.losses[-1] if self.losses else None,
            "steps_per_s": round(steps_per_s, 3), "wall_s": round(wall_s, 3),
            "memory": per_rank,
        }

    def save_params(self) -> None:
        """Every rank calls this (FSDP gathers); rank 0 writes the file."""
        state = self.mode.full_state_dict()
        if self.env.rank == 0:
            self.cfg.save_params.parent.mkdir(parents=True, exist_ok=True)
            torch.save(state, self.cfg.save_params)
