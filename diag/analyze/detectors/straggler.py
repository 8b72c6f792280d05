"""Stragglers: a rank that consistently arrives last at collectives.

In synchronous training every rank leaves a collective together, so the time each rank
*arrives* at the next one measures its own work: the fast ranks arrive early and wait,
the straggler arrives last. ``detect`` reads ddiag's event logs: arrival lateness is
measured against the first rank to arrive at each collective and summarised by its lower
quartile over steps (late at three steps in four), so the ranks that merely wait are
never blamed and scheduling noise that makes a rank late now and then is not a straggler.
The straggler's data-phase time against its peers' then says whether it is slow loading
data or slow computing. ``detect_text`` reads the slowness that training frameworks print
themselves: Megatron's straggler detector and DeepSpeed's comms logger name the rank that
is consistently slowest.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from statistics import median

import numpy as np

from diag.analyze.detectors.common import SignalIndex, index, make
from diag.analyze.eventcols import steps_of
from diag.analyze.inputs import Inputs
from diag.analyze.progress import RankSeqs, common_seqs, groups_of
from diag.verdict import Basis, Category, Culprit, Evidence, Finding, Severity, graded

# =======================================================================================
# From event logs

WARMUP_SEQS = 3
MIN_STEPS = 8         # synchronized steps before anyone is called a straggler
MIN_SCORE = 0.25      # lateness as a fraction of the step time
MIN_LATENESS_S = 0.005
JITTER_FACTOR = 2.0   # excess lateness over the typical rank's own lateness


def detect(inputs: Inputs) -> list[Finding]:
    step_s = _median_step_s(inputs)
    if not step_s:
        return []
    flagged = _late_ranks(inputs, step_s)
    # A pipeline stage waiting on a slow neighbour arrives late too, but it did not
    # compute longer than its own replicas: when some late rank did, that one is the
    # straggler and the others are waiting on it.
    work = {r: _work_excess(inputs, r, peers) for r, (extra, peers) in flagged.items()}
    causes = {r for r, (extra, _) in flagged.items() if work[r] >= 0.5 * extra}
    return [_finding(inputs, r, extra, step_s, peers, victim=bool(causes) and r not in causes)
            for r, (extra, peers) in sorted(flagged.items())]


def _late_ranks(inputs: Inputs, step_s: float) -> dict[int, tuple[float, list[int]]]:
    """rank -> (its lateness beyond its group's typical rank, that group's other ranks),
    over every group that syncs often enough: the world group under DDP and ZeRO, the
    data-parallel groups of a pipeline (whose world group only meets after the flush)."""
    flagged: dict[int, tuple[float, list[int]]] = {}
    for ranks in groups_of(inputs, "events").values():
        late = _lateness(ranks)
        if not late:
            continue
        # The lower median: with two ranks the plain median is halfway to the straggler.
        baseline = statistics.median_low(late.values())
        # The typical rank's lateness is the arrival jitter of this job (scheduling noise,
        # shared CPUs, uneven batches); a straggler must stand out from it, not only from
        # the step time, or a busy but healthy job has a "straggler" every run.
        bar = max(MIN_SCORE * step_s, MIN_LATENESS_S, JITTER_FACTOR * baseline)
        for r, v in late.items():
            if v - baseline >= bar and v - baseline > flagged.get(r, (0.0, []))[0]:
                flagged[r] = (v - baseline, [p for p in late if p != r])
    return flagged


def _lateness(ranks: dict[int, RankSeqs]) -> dict[int, float]:
    """rank -> how far behind the first arrival it reached the group's collectives, at
    three steps in four (the lower quartile over steps). Per step the worst of its
    collectives counts: a step's later collectives follow a sync and show nobody late.
    Computed as a ranks x collectives matrix of arrival times."""
    if len(ranks) < 2:
        return {}
    seqs = common_seqs(ranks)[WARMUP_SEQS:]
    if not len(seqs):
        return {}
    at = [s.at(seqs) for s in ranks.values()]
    times = np.stack([s.col("t")[i] for s, i in zip(ranks.values(), at)])
    done = np.stack([s.col("done")[i] for s, i in zip(ranks.values(), at)])
    usable = done.all(axis=0) & ~np.isnan(times).any(axis=0)
    if not usable.any():
        return {}
    first = next(iter(ranks.values()))
    steps = first.col("step")[at[0]][usable]
    late = times[:, usable] - times[:, usable].min(axis=0)
    order = np.argsort(steps, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(steps[order]) != 0])
    if len(starts) < MIN_STEPS:
        return {}
    per_step = np.maximum(np.maximum.reduceat(late[:, order], starts, axis=1), 0.0)
    quartile = np.sort(per_step, axis=1)[:, per_step.shape[1] // 4]
    return {r: float(q) for r, q in zip(ranks, quartile)}


def _lower_quartile(values: list[float]) -> float:
    """A straggler is late at three steps in four or more; scheduling noise makes a rank
    late now and then, which moves the median but not the lower quartile."""
    return sorted(values)[len(values) // 4]


def _work_excess(inputs: Inputs, rank: int, peers: list[int]) -> float:
    """How much longer the rank's own work takes than its peers', per step (medians):
    its phases (data, forward, backward, optimizer) less the time it spent inside
    collectives, which is waiting on others, not work."""
    mine = _work_median(inputs, rank)
    theirs = [_work_median(inputs, p) for p in peers if p in inputs.events]
    return mine - statistics.median(theirs) if theirs else 0.0


def _work_median(inputs: Inputs, rank: int) -> float:
    steps = steps_of(inputs.events[rank])
    if not len(steps):
        return 0.0
    work = np.maximum(0.0, steps.work() - np.nan_to_num(steps.col("comm_s")))
    return float(np.median(work))


def _median_step_s(inputs: Inputs) -> float | None:
    """The median step time over every rank's steps: the iteration time where recorded
    (a zero or missing one falls back to the step's own duration)."""
    times = []
    for log in inputs.events.values():
        steps = steps_of(log)
        it, dur = steps.col("iter_s"), steps.col("dur_s")
        times.append(np.where(np.nan_to_num(it) != 0, it, dur))
    times = np.concatenate(times) if times else np.zeros(0)
    times = times[times > 0]
    return float(np.median(times)) if len(times) else None


def _phase_median(inputs: Inputs, rank: int, phase: str) -> float:
    steps = steps_of(inputs.events[rank])
    if not len(steps):
        return 0.0
    values = steps.phases.get(phase)
    return float(np.median(np.nan_to_num(values))) if values is not None else 0.0


def _phase_time(phases, phase: str | None) -> float:
    """One phase's time in a step record, or all phases' together (None)."""
    if not isinstance(phases, dict):
        return 0.0
    if phase is not None:
        return phases.get(phase, 0.0)
    return sum(v for v in phases.values() if isinstance(v, (int, float)))


def _finding(inputs: Inputs, rank: int, extra: float, step_s: float, peers: list[int],
             victim: bool = False) -> Finding:
    if victim:
        return _waiting(inputs, rank, extra, step_s)
    peers = [r for r in peers if r in inputs.events] or [r for r in inputs.events if r != rank]
    peer_data = statistics.median([_phase_median(inputs, r, "data") for r in peers] or [0.0])
    data_extra = _phase_median(inputs, rank, "data") - peer_data
    data = data_extra >= 0.5 * extra
    log = inputs.events[rank]
    header = log.header or {}
    kind = "data loading" if data else "compute"
    return Finding(
        category=Category.STRAGGLER, severity=Severity.WARN,
        **graded(Basis.MINORITY),
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


def _waiting(inputs: Inputs, rank: int, extra: float, step_s: float) -> Finding:
    log = inputs.events[rank]
    return Finding(
        category=Category.STRAGGLER, severity=Severity.INFO, **graded(Basis.HEURISTIC),
        title=(f"rank {rank} reaches its collectives {extra * 1000:.1f} ms late but computes "
               "no longer than its peers: it waits on the straggler"),
        culprit=Culprit(ranks=(rank,)),
        evidence=(Evidence(log.path, None, f"median arrival lateness {extra * 1000:.1f} ms; "
                           f"step {step_s * 1000:.1f} ms"),),
        fix="see the straggler it waits on", detector="stragglers", root_cause=False,
        details={"lateness_s": round(extra, 6), "kind": "waiting"})


# =======================================================================================
# From text logs (signals parsed by diag/analyze/textlog.py)

DETECTOR = "logs_perf"  # the `detector` of the text-log findings
MIN_REPORTS = 3
SLOWEST_SHARE = 0.6  # the same rank is the slowest in at least this share of the reports
SLOW_FACTOR = 1.5  # a rank's median comm time this many times the other ranks' median
_FIX = ("Look at that rank's node: GPU clocks and temperature (nvidia-smi -q -d PERFORMANCE), "
        "other processes on it, its data loading and its network link; ddiag's link probes "
        "compare its bandwidth with its peers'.")


def detect_text(inputs) -> list[Finding]:
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
    return [make(Category.STRAGGLER, title, _FIX,
                 DETECTOR, Basis.MINORITY if spread >= 1.05 else Basis.HEURISTIC, mine,
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
    return [make(Category.STRAGGLER, title, _FIX, DETECTOR, Basis.LINE, sigs, ranks=[slowest],
                 severity=Severity.WARN)]
