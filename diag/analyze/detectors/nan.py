"""NaN/Inf: the first step, rank and parameter at which values went non-finite.

After one all_reduce a NaN is on every rank, so the rank that matters is the one that
was non-finite first: the earliest step with any non-finite loss or gradient, and at
that step the ranks that fed a NaN/Inf into a reduction (the decorator checks inputs of
all_reduce/reduce_scatter before the call) -- the earliest of them, or the one whose own
loss was non-finite, when a pipeline passed it on -- else those whose own loss was
non-finite (their forward produced it), else those whose gradients were.
"""

from __future__ import annotations

from diag.analyze.detectors.common import SignalIndex, index, make
from diag.analyze.inputs import Inputs
from diag.verdict import Basis, Category, Culprit, Evidence, Finding, Severity, graded

NONFINITE = {"nan", "inf", "-inf"}


def detect(inputs: Inputs) -> list[Finding]:
    hits = [h for rank, log in inputs.events.items() for h in _hits(rank, log)]
    if not hits:
        return []
    first_step = min(h["step"] for h in hits)
    at_first = [h for h in hits if h["step"] == first_step]
    by_loss = sorted({h["rank"] for h in at_first if h["loss"]})
    culprits = _senders(at_first, by_loss) or by_loss or sorted({h["rank"] for h in at_first})
    everyone = len(culprits) == len(inputs.events) > 1
    param = next((h["param"] for h in at_first if h["param"] and h["rank"] in culprits), None)
    return [Finding(
        category=Category.NAN_INF, severity=Severity.CRITICAL,
        # the step's own record names it; on every rank at once, which one began it is open
        **graded(Basis.LINE if everyone else Basis.EMITTER),
        title=(f"non-finite values first at step {first_step} on rank"
               f"{'s' if len(culprits) > 1 else ''} {', '.join(map(str, culprits))}"
               + (f" (first parameter: {param})" if param else "")),
        culprit=Culprit(ranks=tuple(culprits)),
        evidence=tuple(h["evidence"] for h in at_first if h["rank"] in culprits)[:6],
        fix=("find what produced it on that rank at that step: its batch (bad sample, "
             "division by zero, log of 0), the learning rate, or fp16 overflow; enable "
             "torch.autograd.set_detect_anomaly(True) for one run, clip gradients, or use "
             "bf16 / a GradScaler"),
        detector="nan", first_seen=min(h["t"] or 0 for h in at_first) or None,
        details={"step": first_step, "param": param},
    )]


def _senders(at_first: list[dict], by_loss: list[int]) -> list[int]:
    """The ranks that fed a NaN/Inf to others first. Under pipeline parallelism the
    receiving stage sends it on too (into its own data-parallel reduction): the earliest
    send is the origin when sends carry their time, else the sender whose own loss was
    non-finite."""
    sent = [h for h in at_first if h["sent"]]
    timed = [h for h in sent if isinstance(h["sent"].get("t"), (int, float))]
    if timed and len(timed) == len(sent):
        first = min(h["sent"]["t"] for h in timed)
        return sorted({h["rank"] for h in timed if h["sent"]["t"] == first})
    ranks = sorted({h["rank"] for h in sent})
    return [r for r in ranks if r in by_loss] or ranks


def _hits(rank: int, log) -> list[dict]:
    out = []
    for rec, line in zip(log.records, log.lines):
        if rec.get("kind") != "step":
            continue
        loss_bad = rec.get("loss") in NONFINITE
        nonfinite = rec.get("nonfinite") or {}
        sent = rec.get("sent_nonfinite")
        if loss_bad or nonfinite or sent:
            out.append({"rank": rank, "step": rec.get("step", 0), "t": rec.get("t"),
                        "loss": loss_bad, "param": nonfinite.get("param"), "sent": sent,
                        "evidence": Evidence(log.path, line, f"step {rec.get('step')}: "
                                             f"loss={rec.get('loss')} nonfinite={nonfinite or None} "
                                             f"sent_nonfinite={sent}")})
    return out


# =======================================================================================
# From text logs: what training frameworks count for themselves (signals parsed by
# diag/analyze/catalog/frameworks.py). Explicit NaN/Inf wording (nan_loss) is
# detectors/failure.py's; these are the counters and loss-scale series around it.

DETECTOR = "logs_nan"
# fp16's dynamic loss scale halves at every overflow. Overflows while it calibrates, or now
# and then later, are normal training; an overflow at a scale of 1 or less means the
# gradients overflow unscaled: they are inf/NaN themselves.
FLOOR_SCALE = 1.0
STUCK_RUN = 10  # overflows in a row at an unchanging scale: the scaler sits at its minimum
_FIX_SCALE = (
    "The fp16 gradients are not finite even unscaled: find the first bad step (a data "
    "sample, a learning-rate spike), lower the learning rate or warm it up longer, clip "
    "gradients, or train in bf16. Raising the initial loss scale does not help once the scale "
    "has fallen to 1.")
_FIX_ITERS = (
    "Megatron counted iterations with a NaN/Inf loss: rerun with --check-for-nan-in-loss-and-grad "
    "to name the rank and iteration, check that iteration's data, lower the learning rate or "
    "clip gradients (--clip-grad), and prefer bf16 over fp16.")


def detect_text(inputs) -> list[Finding]:
    idx = index(inputs)
    if idx.has("nan_loss"):
        return []  # the explicit NaN lines say more (failure.py reports them)
    return _nan_iterations(idx) or _loss_scale(idx)


def _nan_iterations(idx: SignalIndex) -> list[Finding]:
    """Megatron's interval line counts NaN iterations; it is printed by the last rank for
    the whole job, so it names no culprit."""
    sigs = idx.of("nan_iterations")
    if not sigs:
        return []
    first = sigs[0]
    step = first.fields.get("step")
    title = (f"{sum(s.fields['count'] for s in sigs)} iterations had a NaN/Inf loss"
             + (f", first in the interval ending at iteration {step}" if step else ""))
    return [make(Category.NAN_INF, title, _FIX_ITERS, DETECTOR, Basis.EMITTER, sigs[:4],
                 severity=Severity.CRITICAL, details={"step": step})]


def _loss_scale(idx: SignalIndex) -> list[Finding]:
    sigs = idx.of("loss_scale_overflow")
    verdict = _scale_verdict(sigs)
    if verdict is None:
        return []
    title, bad, basis = verdict
    return [make(Category.NAN_INF, title, _FIX_SCALE, DETECTOR, basis, bad[:3] + sigs[-1:],
                 severity=Severity.CRITICAL, details={"overflows": len(sigs)})]


def _scale_verdict(sigs: list) -> tuple[str, list, float] | None:
    """(title, the overflows that show it, basis) when the overflows are more than
    the scaler calibrating, else None."""
    floor = [s for s in sigs if _at_floor(s)]
    if floor:
        scale = min(_scale_of(s) for s in floor)
        return (f"fp16 gradients overflow even at loss scale {scale:g} ({len(sigs)} overflow "
                "reports)", floor, Basis.EMITTER)
    stuck = _stuck_run(sigs)
    if stuck:
        return (f"fp16 loss scale stuck at {stuck[0].fields['scale']:g}: {len(stuck)} overflows "
                "in a row, every step skipped", stuck, Basis.LINE)
    # bf16 has no loss scale: DeepSpeed says only "Skipping step", and each skip is a
    # gradient that is inf/NaN itself
    unscaled = [s for s in sigs if s.fields.get("scale") is None and s.fields.get("next") is None]
    if len(unscaled) >= STUCK_RUN:
        return (f"{len(unscaled)} steps skipped for inf/NaN gradients (no loss scaling)",
                unscaled, Basis.LINE)
    return None


def _at_floor(sig) -> bool:
    """The overflow happened at a scale of 1 or less (a scaler that prints only the new
    scale went below 1 to get there)."""
    scale, new = sig.fields.get("scale"), sig.fields.get("next")
    if scale is not None:
        return scale <= FLOOR_SCALE
    return new is not None and new < FLOOR_SCALE


def _scale_of(sig) -> float:
    scale = sig.fields.get("scale")
    return scale if scale is not None else sig.fields.get("next") or 0.0


def _stuck_run(sigs: list) -> list:
    """The longest run of overflows at one unchanging scale (DeepSpeed says 'reducing to'
    the same value once the scale is at its min_loss_scale), if long enough."""
    best = (0, 0)  # [start, end) into sigs
    start = 0
    for i, s in enumerate(sigs):
        scale = s.fields.get("scale")
        if scale is None or s.fields.get("next") != scale:
            start = i + 1
            continue
        if i > start and sigs[i - 1].fields.get("scale") != scale:
            start = i
        if i + 1 - start > best[1] - best[0]:
            best = (start, i + 1)
    return sigs[best[0]:best[1]] if best[1] - best[0] >= STUCK_RUN else []
