"""``probe compute``: matmul throughput of every rank at once, against its peers and its peak.

All ranks multiply together, as in training, so ranks that share a node's cores or a
throttled GPU show it. A rank below ``slow_ratio`` x the median is flagged; a GPU rank
below ``peak_ratio`` x its datasheet peak (``peaks.tsv``) at a large size is flagged too.
"""

from __future__ import annotations

import enum
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from diag.format import schema
from probes import peaks

WARMUP = 3
"""Untimed matmuls first: the allocator, cuBLAS's choice of kernel and workspace, thread
pools and GPU clocks all settle in them."""
LARGE_N = 4096
"""From this size on a matmul fills a data-centre GPU; below it a low fraction of peak
says more about the size than about the device, so it is not flagged."""
DEFAULT_N = {"cpu": 1024, "cuda": 8192}
DEFAULT_DTYPE = {"cpu": "float32", "cuda": "bfloat16"}
PEAK_FIX = ("check clocks, throttling and power on that GPU: `nvidia-smi -q -d PERFORMANCE` "
            "(clock event reasons: power cap, thermal or hardware slowdown), `nvidia-smi -q -d "
            "CLOCK,POWER` (clocks held low, a lowered power limit), and that no other process "
            "uses it (`nvidia-smi`)")


def tflops(n: int, iters: int, seconds: float) -> float:
    """An n x n by n x n matmul is 2 n^3 floating-point operations."""
    return 2 * n**3 * iters / seconds / 1e12 if seconds > 0 else 0.0


@dataclass(frozen=True)
class RankCompute:
    """One rank's measurement: ``iters`` matmuls of side ``n`` took ``seconds``."""

    rank: int
    node: str
    device: str
    n: int
    iters: int
    seconds: float
    """Device time between two CUDA events (timer "cuda_events"), else host time."""
    device_name: str = ""
    """``torch.cuda.get_device_name()``, "cpu" on CPU: the key into the peak table."""
    math: str = ""
    """The math the matmul ran in (fp32, tf32, bf16, fp16): which peak applies."""
    timer: str = "host"

    @property
    def tflops(self) -> float:
        return tflops(self.n, self.iters, self.seconds)


@dataclass(frozen=True)
class RankPeak:
    """A rank's rate against its device's datasheet peak; None where there is no peak."""

    peak_device: str | None = None
    peak_tflops: float | None = None
    fraction: float | None = None
    """tflops / peak_tflops: 0.8 means 80% of what the datasheet promises."""


class Verdict(str, enum.Enum):
    SLOW_VS_PEERS = "slow_vs_peers"
    BELOW_PEAK = "below_peak"
    PEAK_UNKNOWN = "peak_unknown"
    TOO_SMALL_FOR_PEAK = "too_small_for_peak"


@dataclass(frozen=True)
class ComputeFinding:
    verdict: Verdict
    severity: str
    """"warn" (exit 1) or "info"."""
    ranks: tuple[int, ...]
    message: str
    fix: str

    def to_json(self) -> dict:
        return {**asdict(self), "verdict": self.verdict.value, "ranks": list(self.ranks)}


@dataclass(frozen=True)
class ComputeReport:
    ranks: tuple[RankCompute, ...]
    median_tflops: float
    slow_ratio: float
    slow_ranks: tuple[int, ...]
    dtype: str = "float32"
    seconds: float = 0.0
    peak_ratio: float = 0.5
    peaks: tuple[RankPeak, ...] = ()
    """By position in ``ranks``."""
    below_peak_ranks: tuple[int, ...] = ()
    findings: tuple[ComputeFinding, ...] = ()

    def to_json(self) -> dict:
        return {**schema.stamp(schema.PROBE_COMPUTE), "dtype": self.dtype,
                "median_tflops": self.median_tflops, "slow_ratio": self.slow_ratio,
                "slow_ranks": list(self.slow_ranks), "peak_ratio": self.peak_ratio,
                "below_peak_ranks": list(self.below_peak_ranks),
                "seconds": round(self.seconds, 3),
                "findings": [f.to_json() for f in self.findings],
                "ranks": [self._rank_json(r, p) for r, p in zip(self.ranks, self.peaks)]}

    def _rank_json(self, r: RankCompute, p: RankPeak) -> dict:
        return {**asdict(r), "tflops": r.tflops, "slow": r.rank in self.slow_ranks,
                "peak_device": p.peak_device, "peak_tflops": p.peak_tflops,
                "fraction_of_peak": p.fraction, "below_peak": r.rank in self.below_peak_ranks}


def analyze(ranks: Sequence[RankCompute], slow_ratio: float = 0.8, dtype: str = "float32",
            seconds: float = 0.0, peak_ratio: float = 0.5,
            rows: tuple[peaks.DevicePeak, ...] | None = None) -> ComputeReport:
    median = statistics.median(r.tflops for r in ranks) if ranks else 0.0
    slow = tuple(r.rank for r in ranks if r.tflops < slow_ratio * median)
    against = tuple(peak_of(r, rows) for r in ranks)
    below = tuple(r.rank for r, p in zip(ranks, against)
                  if p.fraction is not None and r.n >= LARGE_N and p.fraction < peak_ratio)
    findings = (_slow_findings(ranks, slow, median, slow_ratio)
                + _below_peak_findings(ranks, against, below, peak_ratio)
                + _no_peak_findings(ranks, against) + _too_small(ranks, against))
    return ComputeReport(tuple(ranks), median, slow_ratio, slow, dtype, seconds, peak_ratio,
                         against, below, findings)


def peak_of(r: RankCompute, rows: tuple[peaks.DevicePeak, ...] | None = None) -> RankPeak:
    row = peaks.match(r.device_name, rows) if r.device.startswith("cuda") else None
    peak = row.tflops.get(r.math) if row else None
    if row is None or not peak:
        return RankPeak(row.device if row else None)
    return RankPeak(row.device, peak, r.tflops / peak)


def _who(r: RankCompute) -> str:
    return f"rank {r.rank} ({r.node}, {r.device_name or r.device})"


def _slow_findings(ranks, slow, median, slow_ratio) -> tuple[ComputeFinding, ...]:
    on_gpu = any(r.device.startswith("cuda") for r in ranks)
    fix = (PEAK_FIX if on_gpu else "look for other processes on that node's cores (`top`) "
           "and a lowered CPU frequency (`cpupower frequency-info`)")
    usual = statistics.mode(r.device_name for r in ranks) if ranks else ""
    return tuple(ComputeFinding(
        Verdict.SLOW_VS_PEERS, "warn", (r.rank,),
        f"{_who(r)}: {r.tflops:.3g} TFLOP/s, {r.tflops / median:.2f} x the median "
        f"{median:.3g} of {len(ranks)} ranks (flagged below {slow_ratio:g})"
        + _other_model(r, usual), fix) for r in ranks if r.rank in slow)


def _other_model(r: RankCompute, usual: str) -> str:
    """A slower model among faster ones is expected to lag: say so, it is not a fault."""
    if not r.device_name or r.device_name == usual:
        return ""
    return f"; its GPU is a {r.device_name}, most ranks' a {usual}: a slower model lags"


def _below_peak_findings(ranks, against, below, peak_ratio) -> tuple[ComputeFinding, ...]:
    return tuple(ComputeFinding(
        Verdict.BELOW_PEAK, "warn", (r.rank,),
        f"{_who(r)}: {r.tflops:.3g} TFLOP/s {r.math} at n={r.n} is {p.fraction:.0%} of the "
        f"{p.peak_device}'s dense peak {p.peak_tflops:g} (flagged below {peak_ratio:.0%})",
        PEAK_FIX) for r, p in zip(ranks, against) if r.rank in below)


def _no_peak_findings(ranks, against) -> tuple[ComputeFinding, ...]:
    """GPU ranks without a peak, one finding per device name: said, not guessed."""
    missing: dict[str, list[RankCompute]] = {}
    for r, p in zip(ranks, against):
        if r.device.startswith("cuda") and p.fraction is None:
            missing.setdefault(r.device_name, []).append(r)
    return tuple(_no_peak(name, rs, against[ranks.index(rs[0])])
                 for name, rs in missing.items())


def _no_peak(name: str, rs: list[RankCompute], p: RankPeak) -> ComputeFinding:
    why = (f"the table gives the {p.peak_device} no {rs[0].math} peak" if p.peak_device
           else "not in ddiag's peak table")
    return ComputeFinding(
        Verdict.PEAK_UNKNOWN, "info", tuple(r.rank for r in rs),
        f"{name!r} ({_ranks_text(rs)}): {why}; no fraction of peak, only the comparison "
        "with the other ranks",
        f"add a row with its datasheet's dense peak to {peaks.PATH.name} (probes/)")


def _ranks_text(rs: list[RankCompute]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r.rank) for r in rs)


def _too_small(ranks, against) -> tuple[ComputeFinding, ...]:
    small = tuple(r.rank for r, p in zip(ranks, against) if p.fraction is not None
                  and r.n < LARGE_N)
    if not small:
        return ()
    return (ComputeFinding(
        Verdict.TOO_SMALL_FOR_PEAK, "info", small,
        f"n={ranks[0].n} is too small to judge a GPU against its peak (a matmul this size "
        "does not fill the device); the fraction of peak is shown, not flagged",
        f"run with --size {DEFAULT_N['cuda']} to judge it"),)


# --- inside the ranks ------------------------------------------------------------------

Matmul = Callable[[], object]


def host_seconds(mm: Matmul, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        mm()
    return time.perf_counter() - start


def cuda_seconds(mm: Matmul, iters: int) -> float:
    """GPU time of ``iters`` matmuls between two events on the current stream. The host
    waits once, at the end: a wait per iteration would time launch gaps, not the GPU,
    and the host clock counts launch latency the device never spends."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        mm()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


def measure(mm: Matmul, target_s: float, on_cuda: bool,
            barrier: Callable[[], object] = lambda: None) -> tuple[int, float]:
    """(iters, seconds): warm up, time one matmul to size the run, then time the run."""
    timed = cuda_seconds if on_cuda else host_seconds
    for _ in range(WARMUP):
        mm()
    one = timed(mm, 1)
    iters = max(1, int(target_s / max(one, 1e-6)))
    barrier()  # start together: contention between ranks is part of the answer
    return iters, timed(mm, iters)


def _operands(n: int, device: str, dtype: str) -> Matmul:
    import torch

    kind = getattr(torch, dtype)
    a, b = (torch.randn(n, n, device=device, dtype=kind) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=kind)
    return lambda: torch.matmul(a, b, out=out)  # out=: no allocation inside the timed loop


def _identity(device: str, dtype: str) -> tuple[str, str]:
    """(device name, math) as the peak table knows them."""
    import torch

    if not device.startswith("cuda"):
        return "cpu", peaks.math_of(dtype)
    return (torch.cuda.get_device_name(device),
            peaks.math_of(dtype, torch.backends.cuda.matmul.allow_tf32))


def run(group, n: int | None = None, target_s: float = 1.0, dtype: str | None = None,
        slow_ratio: float = 0.8, peak_ratio: float = 0.5) -> ComputeReport | None:
    import torch.distributed as dist

    kind = "cuda" if group.device.startswith("cuda") else "cpu"
    n, dtype = n or DEFAULT_N[kind], dtype or DEFAULT_DTYPE[kind]
    start = time.monotonic()
    iters, seconds = measure(_operands(n, group.device, dtype), target_s, kind == "cuda",
                             dist.barrier)
    mine = RankCompute(group.job.rank, group.node, group.device, n, iters, seconds,
                       *_identity(group.device, dtype),
                       "cuda_events" if kind == "cuda" else "host")
    parts: list = [None] * group.job.world_size if group.job.rank == 0 else None
    dist.gather_object(asdict(mine), parts, dst=0)
    if group.job.rank != 0:
        return None
    return analyze([RankCompute(**p) for p in parts], slow_ratio, dtype,
                   time.monotonic() - start, peak_ratio)
