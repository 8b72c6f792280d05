"""Small factories that write run directories the way ddiag's writers do, for detector
tests that start no processes."""

from __future__ import annotations

import json
from pathlib import Path

from diag.format import schema
from diag.runtime.eventlog import encode

T0 = 1_800_000_000.0


class RankWriter:
    def __init__(self, run_dir: Path, rank: int, world: int, host: str | None = None):
        self.run_dir, self.rank = Path(run_dir), rank
        self.records = [{"kind": "header", **schema.stamp(schema.EVENTS), "rank": rank,
                         "world_size": world, "host": host or f"node{rank // 2 + 1}",
                         "pid": 1000 + rank, "t": T0}]
        self.seq: dict[str, int] = {}
        self.step = -1

    def coll(self, op="all_reduce", numel=1024, t=None, group="0", out_numel=None,
             group_size=None, dtype="float32"):
        self.seq[group] = self.seq.get(group, 0) + 1
        self.records.append({"kind": "collective", "rank": self.rank, "step": self.step,
                             "op": op, "group": group, "seq": self.seq[group],
                             "in_numel": numel, "out_numel": out_numel or numel,
                             "in_dtype": dtype, "group_size": group_size, "t": t or T0,
                             "dur_s": 0.001})
        return self

    def step_rec(self, t=None, dur=0.1, phases=None, loss=1.0, nonfinite=None, **extra):
        self.step += 1
        self.records.append({"kind": "step", "rank": self.rank, "step": self.step,
                             "t": t or T0, "dur_s": dur, "iter_s": dur, "loss": loss,
                             "phases": phases or {"data": 0.01, "forward": 0.03},
                             "nonfinite": nonfinite, **extra})
        return self

    def exception(self, type_, message, t):
        self.records.append({"kind": "exception", "rank": self.rank, "step": self.step,
                             "type": type_, "message": message, "t": t, "traceback": ""})
        return self

    def close(self):
        self.records.append({"kind": "close", "rank": self.rank, "step": self.step, "dropped": 0})
        return self

    def heartbeat(self, pending=None, span=None):
        doc = {**schema.stamp(schema.HEARTBEAT), "rank": self.rank, "pid": 1000 + self.rank,
               "step": self.step, "seq": dict(self.seq), "pending": pending,
               "span": {"name": span, "since": T0} if span else None, "t": T0 + 100}
        path = self.run_dir / "heartbeat" / f"rank{self.rank:05d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        return self

    def pending(self, op="all_reduce", group="0", span=None):
        self.seq[group] = self.seq.get(group, 0) + 1
        return self.heartbeat({"op": op, "group": group, "seq": self.seq[group], "t": T0 + 50},
                              span=span)

    def write(self):
        path = self.run_dir / "events" / f"rank{self.rank:05d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(encode(r) for r in self.records))
        return self


def fr_entry(seq: int, op="all_reduce", sizes=((1024,),), done=True, pg="0"):
    return {"record_id": seq - 1, "pg_id": 0, "process_group": [pg, "default_pg"],
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": f"nccl:{op}", "time_created_ns": int((T0 + seq) * 1e9),
            "input_sizes": [list(s) for s in sizes], "input_dtypes": ["Float"],
            "output_sizes": [list(s) for s in sizes], "output_dtypes": ["Float"],
            "state": "completed" if done else "scheduled", "retired": done,
            "timeout_ms": 600000, "is_p2p": False, "frames": []}


def fr_dump(entries: list[dict], world: int) -> dict:
    return {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                                   "ranks": str(list(range(world)))}},
            "pg_status": {}, "entries": entries}


def write_events(path: Path, header: dict, records: list[dict] = ()) -> Path:
    """One event-log file: a header (taken as given, hostile values included) and records."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {"kind": "header", **schema.stamp(schema.EVENTS), **header}
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in [head, *records]))
    return path


def billion_laughs(levels: int) -> list:
    """A list nested ``levels`` deep whose two items are the same list: pickled, a few
    hundred bytes that unfold into 2**levels leaves for whoever walks them."""
    doc: list = []
    for _ in range(levels):
        doc = [doc, doc]
    return doc
