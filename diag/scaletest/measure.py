"""Stage metrics from a stage's run directory, and the scaling verdict (pure)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from diag.format.events import RankLog

WARMUP_STEPS = 5


@dataclass(frozen=True)
class StageMetrics:
    """Steady-state numbers of one stage (after the warm-up steps). Shares are fractions
    of the median step; ``samples_per_s`` counts the global batch."""

    world_size: int
    steps_measured: int
    step_p50_s: float | None
    step_p95_s: float | None
    slowest_rank_p50_s: float | None
    samples_per_s: float | None
    compute_share: float | None
    comm_share: float | None
    data_share: float | None
    per_rank_p50_s: dict
    """rank (as a string, as in JSON) -> median seconds of that rank's decorated step."""
    per_rank_p95_s: dict = field(default_factory=dict)
    """rank -> 95th percentile of the same: a rank with a high p95 and a normal p50 stalls
    now and then rather than being slow throughout."""
    source: str = "events"
    """Where ``samples_per_s`` comes from (diag.scaletest.throughput): ``events`` (the
    decorator's event logs), ``metric`` (a regex over the job's output) or ``wall`` (the
    stage's wall time for a fixed number of steps)."""
    unit: str = "samples/s"
    """What ``samples_per_s`` counts: samples/s (the reference trainer's global batch per
    second), rank-steps/s (steps per second x ranks), or the unit the job printed."""


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def stage_metrics(logs: dict[int, RankLog], world_size: int, global_batch: int) -> StageMetrics:
    steps = {r: [s for s in log.of_kind("step") if s.get("step", 0) >= WARMUP_STEPS]
             for r, log in logs.items()}
    iters = [s.get("iter_s") or s.get("dur_s") for ss in steps.values() for s in ss]
    iters = [t for t in iters if isinstance(t, (int, float)) and t > 0]
    durs = {r: [s["dur_s"] for s in ss] for r, ss in steps.items() if ss}
    per_rank = {r: statistics.median(ds) for r, ds in durs.items()}
    p50 = _pct(iters, 0.5)
    data = [s.get("phases", {}).get("data", 0.0) for ss in steps.values() for s in ss]
    comm = [_comm_s(s) for ss in steps.values() for s in ss]
    share = lambda xs: round(statistics.median(xs) / p50, 4) if xs and p50 else None  # noqa: E731
    data_share, comm_share = share(data), share(comm)
    return StageMetrics(
        world_size=world_size, steps_measured=min((len(v) for v in steps.values()), default=0),
        step_p50_s=p50, step_p95_s=_pct(iters, 0.95),
        slowest_rank_p50_s=max(per_rank.values()) if per_rank else None,
        samples_per_s=round(global_batch / p50, 3) if p50 else None,
        compute_share=(round(max(0.0, 1 - (data_share or 0) - (comm_share or 0)), 4)
                       if p50 else None),
        comm_share=comm_share, data_share=data_share,
        per_rank_p50_s={str(r): round(v, 6) for r, v in sorted(per_rank.items())},
        per_rank_p95_s={str(r): round(_pct(ds, 0.95), 6) for r, ds in sorted(durs.items())},
    )


def _comm_s(step: dict) -> float:
    """A step's communication time: inside collective calls, plus what backward waited
    for DDP's bucket all_reduces after its last gradient (their calls only launch them;
    the wait would otherwise pass for compute)."""
    return sum(v for v in (step.get("comm_s"), step.get("comm_wait_s"))
               if isinstance(v, (int, float)))


def efficiencies(metrics: list[StageMetrics | None]) -> list[float | None]:
    """Throughput against the first stage's, divided by the rank ratio (1.0 = perfect).
    With a fixed per-rank batch (weak scaling) that is per-rank throughput kept; with a
    fixed global batch (strong scaling) it is speed-up per added rank."""
    base = metrics[0]
    if base is None or not base.samples_per_s:
        return [None] * len(metrics)
    out = []
    for m in metrics:
        if m is None or not m.samples_per_s:
            out.append(None)
            continue
        ratio = m.world_size / base.world_size
        out.append(round(m.samples_per_s / base.samples_per_s / ratio, 4))
    return out


RAW, PROBE_NORMALISED = "raw", "probe-normalised"
"""Whether a stage's fall in efficiency could be checked against the host's probes
(``efficiency_basis`` in scale-test.json)."""


@dataclass(frozen=True)
class HostReading:
    """What a stage's probes say about its host, before the trainer runs."""

    tflops: float | None
    """Compute probe: the median rank's matmul rate."""
    latency_us: float | None
    """Collective probe: the time of a small all_reduce, which moves almost no bytes and
    so measures how long the ranks take to meet: network latency, and the wait for a
    peer process to get a core."""


def expected_slowdown(first: StageMetrics | None, base: HostReading, here: HostReading
                      ) -> float | None:
    """How much longer than the first stage's a step should take on this stage's host if
    the job itself lost nothing: the first stage's compute share slowed by the fall of the
    per-rank matmul rate, its communication share by the rise of the small all_reduce's
    time, its data share as it was. Weak scaling: each rank's work is the same at every
    stage. None without both stages' readings."""
    if first is None or first.compute_share is None or not (base.tflops and here.tflops):
        return None
    comm = first.comm_share or 0.0
    if comm and not (base.latency_us and here.latency_us):
        return None
    meet = here.latency_us / base.latency_us if comm else 1.0
    return ((first.data_share or 0.0) + first.compute_share * base.tflops / here.tflops
            + comm * meet)


def normalised_efficiencies(effs: list[float | None], first: StageMetrics | None,
                            readings: list[HostReading]) -> list[float | None]:
    """Efficiency against what the host allows: the first stage's step time times the
    expected slowdown, over the stage's measured step time (weak scaling: efficiency x
    expected slowdown). 1.0 = the job lost nothing beyond what the host's probes
    predict; above 1.0 is kept as measured. None where a reading is missing."""
    base = readings[0] if readings else None
    out = []
    for eff, here in zip(effs, readings):
        slow = expected_slowdown(first, base, here) if eff is not None else None
        out.append(round(eff * slow, 4) if slow else None)
    return out


def efficiency_basis(raw: list[float | None], normalised: list[float | None]) -> str:
    """Probe-normalised when every measured stage has a normalised efficiency, else raw:
    a stage's fall is checked against the host only when all stages can be."""
    measured = [n for e, n in zip(raw, normalised) if e is not None]
    return PROBE_NORMALISED if measured and None not in measured else RAW


def falls(effs: list[float | None], drop: float) -> list[tuple[int, int]]:
    """(previous measured stage, stage) index pairs where efficiency fell by more than
    the fraction ``drop`` of the previous stage's: the candidates for the cliff. Relative,
    because a job already at 0.3 that falls to 0.13 has lost more than half of what was
    left, though only 0.17 in absolute terms."""
    measured = [i for i, e in enumerate(effs) if e is not None]
    return [(j, i) for j, i in zip(measured, measured[1:]) if effs[i] < effs[j] * (1 - drop)]


def work_efficiency(eff: float | None, m: StageMetrics | None) -> float | None:
    """Efficiency with the stage's communication taken out of its step: what the ranks'
    own work (compute, data) kept of the first stage's rate, up to the first stage's own
    share of communication. None without a communication share."""
    if eff is None or m is None or m.comm_share is None or m.comm_share >= 1:
        return None
    return eff / (1 - m.comm_share)


def as_json(m: StageMetrics | None) -> dict | None:
    return asdict(m) if m else None
