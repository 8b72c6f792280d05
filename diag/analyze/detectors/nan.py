"""NaN/Inf: the first step, rank and parameter at which values went non-finite.

After one all_reduce a NaN is on every rank, so the rank that matters is the one that
was non-finite first: the earliest step with any non-finite loss or gradient, and at
that step the ranks that fed a NaN/Inf into a reduction (the decorator checks inputs of
all_reduce/reduce_scatter before the call) -- the earliest of them, or the one whose own
loss was non-finite, when a pipeline passed it on -- else those whose own loss was
non-finite (their forward produced it), else those whose gradients were.
"""

from __future__ import annotations

from diag.analyze.inputs import Inputs
from diag.verdict import Category, Culprit, Evidence, Finding, Severity

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
        confidence=0.6 if everyone else 0.9,
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
