"""The run directory: one layout that every producer writes and every reader finds.

    RUN_DIR/
      run.json                     run metadata (ddiag.run)
      events/rank00000.jsonl       per-rank event log (ddiag.events)
      heartbeat/rank00000.json     per-rank liveness and progress (ddiag.heartbeat)
      env/  fr/  stacks/  probes/  logs/

See docs/run-dir.md for the contract.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from diag import schema

SUBDIRS = ("events", "heartbeat", "env", "fr", "stacks", "probes", "logs")
DEFAULT_RUN_DIR = "ddiag-run"


def rank_file(rank: int, suffix: str) -> str:
    """Per-rank file name; zero-padded so that a plain sort is rank order."""
    return f"rank{rank:05d}{suffix}"


def resolve_run_dir(run_dir: str | os.PathLike | None = None) -> Path:
    """The explicit argument, else $DDIAG_RUN_DIR, else ./ddiag-run."""
    return Path(run_dir or os.environ.get("DDIAG_RUN_DIR") or DEFAULT_RUN_DIR)


def launcher_run_id() -> str | None:
    """A run id every rank of one launch agrees on without talking to each other."""
    if os.environ.get("DDIAG_RUN_ID"):
        return os.environ["DDIAG_RUN_ID"]
    if os.environ.get("SLURM_JOB_ID"):
        step = os.environ.get("SLURM_STEP_ID")
        return f"slurm-{os.environ['SLURM_JOB_ID']}" + (f".{step}" if step else "")
    elastic = os.environ.get("TORCHELASTIC_RUN_ID")
    # torchrun's static rendezvous leaves the id at the literal "none".
    if elastic and elastic != "none":
        return f"elastic-{elastic}"
    return None


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory. Creating it never removes or truncates anything."""

    root: Path

    def path(self, sub: str, rank: int | None = None, suffix: str = "") -> Path:
        base = self.root / sub
        return base if rank is None else base / rank_file(rank, suffix)

    def events(self, rank: int) -> Path:
        return self.path("events", rank, ".jsonl")

    def heartbeat(self, rank: int) -> Path:
        return self.path("heartbeat", rank, ".json")

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    def create(self) -> "RunDir":
        for sub in SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self


def ensure_run_json(rd: RunDir, run_id: str | None, extra: dict | None = None) -> dict:
    """Create run.json once; later callers (other ranks, restarts) read the winner's.

    The file is written aside and hard-linked into place, so it appears whole or not at
    all, and a run.json that already exists is never overwritten.
    """
    if rd.run_json.exists():
        return read_run_json(rd.run_json)
    meta = {
        **schema.stamp(schema.RUN),
        "run_id": run_id or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
        "created": time.time(),
        "created_by": {"host": socket.gethostname(), "pid": os.getpid(), "argv": sys.argv},
        **(extra or {}),
    }
    tmp = rd.root / f".run.json.{os.getpid()}.{uuid.uuid4().hex[:6]}"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    try:
        os.link(tmp, rd.run_json)
    except FileExistsError:
        meta = read_run_json(rd.run_json)
    finally:
        tmp.unlink(missing_ok=True)
    return meta


def read_run_json(path: Path) -> dict:
    doc = json.loads(path.read_text())
    schema.check(doc, schema.RUN, str(path))
    return doc
