"""Process-group setup and teardown: device, backend, Flight Recorder, and a standalone
single-rank group when the trainer runs without a launcher."""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from diag.runtime import flight_recorder


@dataclass(frozen=True)
class Dist:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str


def pick_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to this process "
                         "(check CUDA_VISIBLE_DEVICES, or use --device cpu)")
    return torch.device("cuda", local_rank) if name == "cuda" else torch.device("cpu")


def _standalone_env() -> None:
    """Make ``python -m reference_trainer`` alone a world of one, on a free local port."""
    if "RANK" in os.environ:
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def setup(device_name: str, timeout_s: float) -> Dist:
    """Create the process group (gloo on CPU, NCCL on CUDA) with the Flight Recorder on."""
    _standalone_env()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_name, local_rank)
    flight_recorder.enable()  # torch reads the buffer size when the group is created
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before NCCL init, so each rank binds its own GPU
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=device if device.type == "cuda" else None)
    return Dist(rank=dist.get_rank(), world_size=dist.get_world_size(),
                local_rank=local_rank, device=device, backend=backend)


def close() -> None:
    """Tear the group down after a clean run; a failed run just exits (a broken group
    can block in destroy)."""
    if dist.is_initialized():
        # Everyone finishes its last collective before anyone closes its connections: a
        # gloo rank tearing down while a peer still reads from it was seen to abort
        # ("terminate called without an active exception") on the lab.
        dist.barrier()
        dist.destroy_process_group()
