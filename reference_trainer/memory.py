"""Bytes this rank holds in parameters, gradients and optimizer state.

Sharded tensors (FSDP2 DTensors) count their local shard only, and a ZeRO-1 optimizer
counts the state of the parameters this rank owns, so ZeRO's savings show as numbers.
"""

from __future__ import annotations

import os

import torch
from torch import nn


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def tensor_bytes(t: torch.Tensor) -> int:
    shard = local(t)
    return shard.numel() * shard.element_size()


def param_bytes(model: nn.Module) -> int:
    return sum(tensor_bytes(p) for p in model.parameters())


def grad_bytes(model: nn.Module) -> int:
    return sum(tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)


def local_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """ZeroRedundancyOptimizer keeps this rank's share of the state in its inner
    ``.optim``. (Checked by shape: importing torch.distributed.optim just for isinstance
    drags TorchScript in.)"""
    inner = getattr(optimizer, "optim", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    state = local_optimizer(optimizer).state
    return sum(tensor_bytes(v) for per_param in state.values() for v in per_param.values()
               if isinstance(v, torch.Tensor))


def rss_bytes() -> int:
    """Resident set size of this process (Linux); 0 where /proc is missing."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def measure(model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> dict:
    """The fields of one ``memory`` record."""
    record = {"param_bytes": param_bytes(model), "grad_bytes": grad_bytes(model),
              "optimizer_bytes": optimizer_bytes(optimizer),
              "param_numel": sum(local(p).numel() for p in model.parameters()),
              "rss_bytes": rss_bytes()}
    if device.type == "cuda":
        record["cuda_allocated_bytes"] = torch.cuda.memory_allocated(device)
        record["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    return record
