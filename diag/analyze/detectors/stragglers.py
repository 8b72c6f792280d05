"""Stragglers: a rank that consistently arrives last at collectives.

In synchronous training every rank leaves a collective together, so the time each rank
*arrives* at the next one measures its own work: the fast ranks arrive early and wait,
the straggler arrives last. Arrival lateness is measured against the first rank to
arrive at each collective and summarised by its median, so the ranks that merely wait
are never blamed. The straggler's data-phase time against its peers' then says whether
it is slow loading data or slow computing.
"""

from __future__ import annotations

import statistics

from diag.analyze.inputs import Inputs
from diag.analyze.progress import DONE, groups_of
from diag.analyze.types import Category, Culprit, Evidence, Finding, Severity

WARMUP_SEQS = 3
MIN_SEQS = 5
MIN_SCORE = 0.15      # lateness as a fraction of the step time
MIN_LATENESS_S = 0.005


def detect(inputs: Inputs) -> list[Finding]:
    late = _lateness(inputs)
    step_s = _median_step_s(inputs)
    if not late or not step_s:
        return []
    baseline = statistics.median(late.values())
    slow = {r: v - baseline for r, v in late.items()
            if v - baseline >= max(MIN_SCORE * step_s, MIN_LATENESS_S)}
    return [_finding(inputs, r, extra, step_s) for r, extra in sorted(slow.items())]


def _lateness(inputs: Inputs) -> dict[int, float]:
    """rank -> median seconds behind the first arrival, over the world group's
    collectives that every rank finished."""
    groups = groups_of(inputs, "events")
    if not groups:
        return {}
    group = max(groups, key=lambda g: len(groups[g]))
    ranks = groups[group]
    if len(ranks) < 2:
        return {}
    seqs = sorted(set.intersection(*(set(s) for s in ranks.values())))[WARMUP_SEQS:]
    delays: dict[int, list[float]] = {r: [] for r in ranks}
    for seq in seqs:
        rows = {r: ranks[r][seq] for r in ranks}
        if any(row.state != DONE or row.t is None for row in rows.values()):
            continue
        first = min(row.t for row in rows.values())
        for r, row in rows.items():
            delays[r].append(row.t - first)
    return {r: statistics.median(d) for r, d in delays.items() if len(d) >= MIN_SEQS}


def _median_step_s(inputs: Inputs) -> float | None:
    times = [s.get("iter_s") or s.get("dur_s") for log in inputs.events.values()
             for s in log.of_kind("step")]
    times = [t for t in times if isinstance(t, (int, float)) and t > 0]
    return statistics.median(times) if times else None


def _phase_median(inputs: Inputs, rank: int, phase: str) -> float:
    vals = [s.get("phases", {}).get(phase, 0.0) for s in inputs.events[rank].of_kind("step")]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else 0.0


def _finding(inputs: Inputs, rank: int, extra: float, step_s: float) -> Finding:
    peers = [r for r in inputs.events if r != rank]
    peer_data = statistics.median([_phase_median(inputs, r, "data") for r in peers] or [0.0])
    data_extra = _phase_median(inputs, rank, "data") - peer_data
    data = data_extra >= 0.5 * extra
    log = inputs.events[rank]
    header = log.header or {}
    kind = "data loading" if data else "compute"
    return Finding(
        category=Category.STRAGGLER, severity=Severity.WARN,
        confidence=min(0.95, 0.5 + extra / step_s),
        title=(f"rank {rank} is a {kind} straggler: it reaches each collective "
               f"{extra * 1000:.1f} ms after the first rank (step {step_s * 1000:.1f} ms, "
               f"{extra / step_s:.0%} of it)"
               + (f"; its data phase is {data_extra * 1000:.1f} ms longer than its peers'"
                  if data else "")),
        culprit=Culprit(ranks=(rank,), hosts=(header["host"],) if header.get("host") else ()),
        evidence=(Evidence(log.path, None, f"median arrival lateness {extra * 1000:.1f} ms; "
                           f"median data phase {(peer_data + data_extra) * 1000:.1f} ms vs "
                           f"peers {peer_data * 1000:.1f} ms"),),
        fix=("speed up rank's input pipeline: more DataLoader workers (num_workers), "
             "pin_memory, faster or local storage for its shard" if data else
             "check that node for contention or throttling: other processes "
             "on its CPUs/GPU, GPU clocks and temperature (nvidia-smi -q -d CLOCK), "
             "OMP_NUM_THREADS oversubscription"),
        detector="stragglers", details={"lateness_s": round(extra, 6), "kind": kind},
    )
