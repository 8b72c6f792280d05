"""The parallelisms the reference trainer runs, behind one small interface (``Mode``)."""

from __future__ import annotations

from reference_trainer.config import TrainerConfig
from reference_trainer.distributed import Dist
from reference_trainer.modes.base import Mode


def build_mode(cfg: TrainerConfig, env: Dist) -> Mode:
    """The model built from the seed, wrapped for ``cfg.parallel.mode``."""
    mode = cfg.parallel.mode
    if mode in ("ddp", "zero1"):
        from reference_trainer.modes.data_parallel import DataParallel

        return DataParallel(cfg, env, zero1=mode == "zero1")
    if mode in ("zero2", "zero3"):
        from reference_trainer.modes.fully_sharded import FullyShardedDataParallel

        return FullyShardedDataParallel(cfg, env, reshard_after_forward=mode == "zero3")
    from reference_trainer.modes.pipeline import Pipeline

    return Pipeline(cfg, env)


__all__ = ["Mode", "build_mode"]
