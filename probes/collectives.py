"""``probe collectives``: a size sweep of all_reduce, all_gather, reduce_scatter and
broadcast, with algbw and busbw as nccl-tests defines them.

``size`` is nccl-tests' size column: the bytes of the largest buffer of the operation
(all_reduce and broadcast: the tensor; all_gather: the gathered output; reduce_scatter:
the input that is scattered). ``algbw = size / time``; ``busbw = algbw * factor(op, n)``,
which makes results comparable across world sizes and with the link's line rate.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from diag.format import schema

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def algbw(nbytes: int, seconds: float) -> float:
    """GB/s (10^9 bytes per second), as nccl-tests prints it."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw(op: str, nbytes: int, seconds: float, world_size: int) -> float:
    return algbw(nbytes, seconds) * FACTORS[op](world_size)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"need 4 <= min_bytes <= max_bytes and factor >= 2, got: "
                         f"{min_bytes}, {max_bytes}, {factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


@dataclass(frozen=True)
class Row:
    """One (op, size) point: times are per iteration, in microseconds."""

    op: str
    size: int
    count: int
    """float32 elements of the sized buffer."""
    iters: int
    time_us: float
    """Mean over ranks of each rank's mean iteration time (nccl-tests' default)."""
    max_time_us: float
    """The slowest rank's mean iteration time."""
    algbw: float
    busbw: float


def row(op: str, size: int, iters: int, times_s: Sequence[float]) -> Row:
    n = len(times_s)
    mean = sum(times_s) / n
    return Row(op, size, size // 4, iters, mean * 1e6, max(times_s) * 1e6, algbw(size, mean),
               busbw(op, size, mean, n))


@dataclass(frozen=True)
class CollectivesReport:
    world_size: int
    backend: str
    rows: tuple[Row, ...]
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {**schema.stamp(schema.PROBE_COLLECTIVES), "world_size": self.world_size,
                "backend": self.backend, "seconds": round(self.seconds, 3),
                "units": {"size": "bytes", "time_us": "microseconds",
                          "algbw": "GB/s", "busbw": "GB/s"},
                "rows": [asdict(r) for r in self.rows]}


# --- inside the ranks ------------------------------------------------------------------

def _op_call(op: str, size: int, n: int, device: str) -> Callable[[], None]:
    """A closure running one ``op`` of nccl-tests size ``size`` over ``n`` ranks."""
    import torch
    import torch.distributed as dist

    numel = max(n, size // 4 // n * n)  # divisible by n for the scatter/gather ops
    big, part = torch.ones(numel, device=device), torch.ones(numel // n, device=device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return {"all_reduce": lambda: dist.all_reduce(big),
            "all_gather": lambda: gather(big, part),
            "reduce_scatter": lambda: scatter(part, big),
            "broadcast": lambda: dist.broadcast(big, 0)}[op]


def _time(call: Callable[[], None], iters: int, group) -> float:
    import torch.distributed as dist

    from probes.dist import sync

    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    sync(group)
    return (time.perf_counter() - start) / iters


def _agreed_iters(estimate_s: float, target_s: float, max_iters: int, group) -> int:
    """Every rank must run the same count: size it by the slowest rank's estimate."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([estimate_s], dtype=torch.float64, device=group.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return max(1, min(max_iters, int(target_s / max(t.item(), 1e-6))))


def measure(group, op: str, size: int, target_s: float, max_iters: int) -> Row | None:
    import torch.distributed as dist

    n = group.job.world_size
    call = _op_call(op, size, n, group.device)
    estimate = _time(call, 1, group)  # also the warm-up: first use connects the pairs
    iters = _agreed_iters(estimate, target_s, max_iters, group)
    mine = _time(call, iters, group)
    times: list = [None] * n
    dist.all_gather_object(times, mine)
    return row(op, max(n, size // 4 // n * n) * 4, iters, times) if group.job.rank == 0 else None


def run(group, ops: Sequence[str] = OPS, sizes: Sequence[int] = (), target_s: float = 0.1,
        max_iters: int = 50) -> CollectivesReport | None:
    start = time.monotonic()
    rows = [measure(group, op, size, target_s, max_iters) for op in ops for size in sizes]
    if group.job.rank != 0:
        return None
    return CollectivesReport(group.job.world_size, group.backend, tuple(rows),
                             time.monotonic() - start)
