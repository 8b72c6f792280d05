"""One rank's snapshot: its facts, its local check results and how the process group went.

Written to ``RUN_DIR/env/rank{R:05d}.json`` (format ``ddiag.env_snapshot``) by every rank
before anything that can hang, so a rank that cannot join the group is still reported.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from diag.format import schema
from diag.checkenv.facts import RankFacts, facts_from_json
from diag.checkenv.types import CheckResult


@dataclass(frozen=True)
class GroupOutcome:
    """How this rank fared forming the gloo group and gathering to rank 0.

    ``t_sync`` is the wall clock right after a barrier, so its differences across ranks
    are the clock skew (to within the barrier's exit spread, milliseconds on a LAN).
    """

    ok: bool
    error: str | None = None
    seconds: float = 0.0
    t_sync: float | None = None


@dataclass(frozen=True)
class Snapshot:
    rank: int
    world_size: int | None
    facts: RankFacts
    results: tuple[CheckResult, ...] = ()
    group: GroupOutcome | None = None
    launch: str | None = None
    """Which launch wrote it: tells this run's files from an earlier run's in one dir."""
    pid: int = field(default_factory=os.getpid)

    @property
    def node(self) -> str:
        return self.facts.node

    def to_json(self) -> dict:
        return {**schema.stamp(schema.ENV_SNAPSHOT), "rank": self.rank,
                "world_size": self.world_size, "node": self.node, "pid": self.pid,
                "launch": self.launch,
                "facts": self.facts.to_json(), "results": [r.to_json() for r in self.results],
                "group": None if self.group is None else self.group.__dict__}


def snapshot_from_json(doc: dict, source: str = "snapshot") -> Snapshot:
    schema.check(doc, schema.ENV_SNAPSHOT, source)
    group = doc.get("group")
    return Snapshot(rank=int(doc["rank"]), world_size=doc.get("world_size"),
                    facts=facts_from_json(doc["facts"]),
                    results=tuple(CheckResult.from_json(r) for r in doc.get("results", ())),
                    group=GroupOutcome(**group) if group else None, launch=doc.get("launch"),
                    pid=doc.get("pid", 0))


def write_snapshot(path: Path, snap: Snapshot) -> None:
    """Write aside and rename: a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(snap.to_json(), indent=1) + "\n")
    os.replace(tmp, path)


def read_snapshots(env_dir: Path, launch: str | None = None
                   ) -> tuple[list[Snapshot], list[str]]:
    """Every readable snapshot in ``env_dir`` (of ``launch`` only, when given), and what
    was wrong with the others."""
    snaps, problems, stale = [], [], 0
    for path in sorted(env_dir.glob("rank*.json")):
        try:
            snap = snapshot_from_json(json.loads(path.read_text()), str(path))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        if launch is None or snap.launch == launch:
            snaps.append(snap)
        else:
            stale += 1
    if stale:
        problems.append(f"{env_dir}: ignored {stale} snapshot(s) of an earlier launch")
    return snaps, problems
