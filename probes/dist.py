"""Rank-side plumbing the probes share: form the job's group, name nodes, write results.

torch is imported inside the functions: only ranks call them.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from diag.format.rundir import RunDir
from diag.launch import JobEnv


@dataclass(frozen=True)
class Group:
    """The formed process group as the probes use it."""

    job: JobEnv
    backend: str
    device: str
    node: str
    nodes: tuple[str, ...]
    """Node of every rank, by rank."""

    @property
    def leaders(self) -> dict[str, int]:
        """One rank per node (its lowest), in order of first appearance."""
        out: dict[str, int] = {}
        for rank, node in enumerate(self.nodes):
            out.setdefault(node, rank)
        return out


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def job_backend(requested: str | None = None) -> tuple[str, str]:
    """The backend training would use here (NCCL with GPUs, else gloo) and its device."""
    import torch

    backend = requested or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        return backend, f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return backend, "cpu"


def form_group(job: JobEnv, timeout_s: float, backend: str | None = None) -> Group:
    import torch
    import torch.distributed as dist

    name, device = job_backend(backend)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    dist.init_process_group(name, init_method=job.init_method, rank=job.rank,
                            world_size=job.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    nodes: list = [None] * job.world_size
    dist.all_gather_object(nodes, node_name())
    return Group(job, name, device, node_name(), tuple(nodes))


def sync(group: Group) -> None:
    """Wait for the device: NCCL calls return before the transfer is done."""
    if group.device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def close_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def result_path(out: Path, probe: str) -> Path:
    return RunDir(out).path("probes") / f"{probe}.json"


def write_result(out: Path, probe: str, doc: dict) -> Path:
    path = result_path(out, probe)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)
    return path
