"""A Chrome trace-event JSON of every rank's steps, spans and collectives, for Perfetto.

One process row per rank ("rank 3 @ node2"), with a thread for steps and spans and one
for collectives. Times are microseconds from the earliest record of the run, so ranks
line up on one clock (their wall clocks; skew between hosts shows as skew here).
"""

from __future__ import annotations

from diag.analyze.eventcols import all_records
from diag.analyze.inputs import Inputs

STEPS_TID, COLL_TID = 1, 2


def _num(value) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _start_and_dur(rec: dict) -> tuple[float, float] | None:
    """Step and span records are written at their end; collectives at their start."""
    t, dur = _num(rec.get("t")), _num(rec.get("dur_s")) or 0.0
    if t is None:
        return None
    if rec.get("kind") == "collective":
        return t, dur
    if rec.get("kind") == "span" and _num(rec.get("start")) is not None:
        return rec["start"], dur
    return t - dur, dur


def _event(rec: dict, rank: int, t0: float) -> dict | None:
    kind = rec.get("kind")
    timing = _start_and_dur(rec)
    if timing is None or kind not in ("step", "span", "collective", "exception"):
        return None
    start, dur = timing
    base = {"pid": rank, "ts": round((start - t0) * 1e6, 1)}
    if kind == "exception":
        return {**base, "ph": "i", "s": "p", "tid": STEPS_TID, "name": f"exception: {rec.get('type')}",
                "args": {"message": str(rec.get("message"))[:500]}}
    name = {"step": f"step {rec.get('step')}", "span": str(rec.get("name")),
            "collective": f"{rec.get('op')} #{rec.get('seq')}"}[kind]
    args = {k: rec.get(k) for k in ("phases", "loss", "grad_norm", "group", "in_numel",
                                    "in_dtype", "torch_seq") if rec.get(k) is not None}
    return {**base, "ph": "X", "dur": round(dur * 1e6, 1), "name": name, "cat": kind,
            "tid": COLL_TID if kind == "collective" else STEPS_TID, "args": args}


def _metadata(rank: int, host: str | None) -> list[dict]:
    label = f"rank {rank}" + (f" @ {host}" if host else "")
    return [{"ph": "M", "pid": rank, "name": "process_name", "args": {"name": label}},
            {"ph": "M", "pid": rank, "name": "process_sort_index", "args": {"sort_index": rank}},
            {"ph": "M", "pid": rank, "tid": STEPS_TID, "name": "thread_name",
             "args": {"name": "steps and spans"}},
            {"ph": "M", "pid": rank, "tid": COLL_TID, "name": "thread_name",
             "args": {"name": "collectives"}}]


def build_trace(inputs: Inputs) -> dict:
    records = {rank: all_records(log) for rank, log in inputs.events.items()}
    times = [t for recs in records.values() for r in recs[:1]
             if (t := _num(r.get("t"))) is not None]
    t0 = min(times, default=0.0) - 1.0
    events: list[dict] = []
    for rank, log in sorted(inputs.events.items()):
        events += _metadata(rank, (log.header or {}).get("host"))
        events += [e for rec in records[rank] if (e := _event(rec, rank, t0)) is not None]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "ddiag", "root": inputs.root}}
