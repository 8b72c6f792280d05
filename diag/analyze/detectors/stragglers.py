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
MIN_STEPS = 5
MIN_SCORE = 0.15      # lateness as a fraction of the step time
MIN_LATENESS_S = 0.005
JITTER_FACTOR = 2.0   # excess lateness over the typical rank's own lateness


def detect(inputs: Inputs) -> list[Finding]:
    late = _lateness(inputs)
    step_s = _median_step_s(inputs)
    if not late or not step_s:
        return []
    # The lower median: with two ranks the plain median is halfway to the straggler.
    baseline = statistics.median_low(late.values())
    # The typical rank's lateness is the arrival jitter of this job (scheduling noise,
    # shared CPUs, uneven batches); a straggler must stand out from it, not only from
    # the step time, or a busy but healthy job has a "straggler" every run.
    bar = max(MIN_SCORE * step_s, MIN_LATENESS_S, JITTER_FACTOR * baseline)
    slow = {r: v - baseline for r, v in late.items() if v - baseline >= bar}
    return [_finding(inputs, r, extra, step_s) for r, extra in sorted(slow.items())]


def _lateness(inputs: Inputs) -> dict[int, float]:
    """rank -> median over steps of how far behind the first arrival it reached the
    world group's collectives. Per step the worst of its collectives counts: a step's
    later collectives follow a sync and show nobody late."""
    groups = groups_of(inputs, "events")
    if not groups:
        return {}
    ranks = groups[max(groups, key=lambda g: len(groups[g]))]
    if len(ranks) < 2:
        return {}
    per_step: dict[int, dict[int, float]] = {}
    for seq in sorted(set.intersection(*(set(s) for s in ranks.values())))[WARMUP_SEQS:]:
        rows = {r: ranks[r][seq] for r in ranks}
        if any(row.state != DONE or row.t is None for row in rows.values()):
            continue
        first = min(row.t for row in rows.values())
        step = per_step.setdefault(next(iter(rows.values())).step, {})
        for r, row in rows.items():
            step[r] = max(step.get(r, 0.0), row.t - first)
    delays = [d for d in per_step.values() if len(d) == len(ranks)]
    if len(delays) < MIN_STEPS:
        return {}
    return {r: statistics.median(d[r] for d in delays) for r in ranks}


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
