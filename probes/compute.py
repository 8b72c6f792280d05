"""``probe compute``: matmul throughput of every rank at once, to find slow nodes.

All ranks multiply together, as in training, so ranks that share a node's cores or a
throttled GPU show it. A rank below ``slow_ratio`` x the median is flagged.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Sequence

from diag.format import schema


def tflops(n: int, iters: int, seconds: float) -> float:
    """An n x n by n x n matmul is 2 n^3 floating-point operations."""
    return 2 * n**3 * iters / seconds / 1e12 if seconds > 0 else 0.0


@dataclass(frozen=True)
class RankCompute:
    rank: int
    node: str
    device: str
    n: int
    iters: int
    seconds: float

    @property
    def tflops(self) -> float:
        return tflops(self.n, self.iters, self.seconds)


@dataclass(frozen=True)
class ComputeReport:
    ranks: tuple[RankCompute, ...]
    median_tflops: float
    slow_ratio: float
    slow_ranks: tuple[int, ...]
    dtype: str = "float32"
    seconds: float = 0.0

    def to_json(self) -> dict:
        slow = set(self.slow_ranks)
        return {**schema.stamp(schema.PROBE_COMPUTE), "dtype": self.dtype,
                "median_tflops": self.median_tflops, "slow_ratio": self.slow_ratio,
                "slow_ranks": list(self.slow_ranks), "seconds": round(self.seconds, 3),
                "ranks": [{**asdict(r), "tflops": r.tflops, "slow": r.rank in slow}
                          for r in self.ranks]}


def analyze(ranks: Sequence[RankCompute], slow_ratio: float = 0.8, dtype: str = "float32",
            seconds: float = 0.0) -> ComputeReport:
    median = statistics.median(r.tflops for r in ranks) if ranks else 0.0
    slow = tuple(r.rank for r in ranks if r.tflops < slow_ratio * median)
    return ComputeReport(tuple(ranks), median, slow_ratio, slow, dtype, seconds)


# --- inside the ranks ------------------------------------------------------------------

def _matmuls(n: int, iters: int, device: str, dtype: str) -> float:
    import torch

    a = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    torch.matmul(a, b)  # warm-up: allocator, kernels, thread pool
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        torch.matmul(a, b)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run(group, n: int = 1024, target_s: float = 1.0, dtype: str = "float32",
        slow_ratio: float = 0.8) -> ComputeReport | None:
    import torch.distributed as dist

    start = time.monotonic()
    one = _matmuls(n, 1, group.device, dtype)
    iters = max(1, int(target_s / max(one, 1e-6)))
    dist.barrier()  # start together: contention between ranks is part of the answer
    mine = RankCompute(group.job.rank, group.node, group.device, n, iters,
                       _matmuls(n, iters, group.device, dtype))
    parts: list = [None] * group.job.world_size if group.job.rank == 0 else None
    dist.gather_object(asdict(mine), parts, dst=0)
    if group.job.rank != 0:
        return None
    return analyze([RankCompute(**p) for p in parts], slow_ratio, dtype, time.monotonic() - start)
