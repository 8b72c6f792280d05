"""Slowness that training frameworks print themselves: Megatron's straggler detector and
DeepSpeed's comms logger name the rank that is consistently slowest."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median

from diag.analyze.detectors.logs_common import SignalIndex, index, make
from diag.verdict import Category, Finding, Severity

DETECTOR = "logs_perf"
MIN_REPORTS = 3
SLOWEST_SHARE = 0.6  # the same rank is the slowest in at least this share of the reports
SLOW_FACTOR = 1.5  # a rank's median comm time this many times the other ranks' median
_FIX = ("Look at that rank's node: GPU clocks and temperature (nvidia-smi -q -d PERFORMANCE), "
        "other processes on it, its data loading and its network link; ddiag's link probes "
        "compare its bandwidth with its peers'.")


def detect(inputs) -> list[Finding]:
    idx = index(inputs)
    return _megatron(idx) + _deepspeed(idx)


def _megatron(idx: SignalIndex) -> list[Finding]:
    reports = idx.of("straggler_report")
    if len(reports) < MIN_REPORTS:
        return []
    rank, count = Counter(s.fields["max_rank"] for s in reports).most_common(1)[0]
    if count < SLOWEST_SHARE * len(reports):
        return []
    mine = [s for s in reports if s.fields["max_rank"] == rank]
    spread = median(s.fields["max_ms"] / max(s.fields["min_ms"], 1e-9) for s in mine)
    title = (f"rank {rank} is the slowest in {count} of {len(reports)} straggler reports "
             f"(median {spread:.2f}x the fastest)")
    return [make(Category.STRAGGLER, title, _FIX, DETECTOR, 0.65 if spread >= 1.05 else 0.4, mine,
                 ranks=[rank], severity=Severity.WARN, details={"slowdown": round(spread, 3)})]


def _deepspeed(idx: SignalIndex) -> list[Finding]:
    by_rank: dict[int, list[float]] = defaultdict(list)
    for s in idx.of("comm_timing"):
        by_rank[s.rank].append(s.fields["ms"])
    if len(by_rank) < 3 or min(len(v) for v in by_rank.values()) < MIN_REPORTS:
        return []
    medians = {r: median(v) for r, v in by_rank.items()}
    slowest = max(medians, key=medians.get)
    rest = median(m for r, m in medians.items() if r != slowest)
    if rest <= 0 or medians[slowest] < SLOW_FACTOR * rest:
        return []
    sigs = [s for s in idx.of("comm_timing") if s.rank == slowest]
    title = f"rank {slowest}'s collectives take {medians[slowest] / rest:.1f}x the others'"
    return [make(Category.STRAGGLER, title, _FIX, DETECTOR, 0.55, sigs, ranks=[slowest],
                 severity=Severity.WARN)]
