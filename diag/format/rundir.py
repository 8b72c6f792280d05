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
import re
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from diag.format import schema
from diag.format.infile import open_regular

SUBDIRS = ("events", "heartbeat", "env", "fr", "stacks", "probes", "logs")
# run.json is a few hundred bytes; a reader takes no more than this of one.
MAX_RUN_JSON_BYTES = 1 << 20


def rank_file(rank: int, suffix: str) -> str:
    """Per-rank file name; zero-padded so that a plain sort is rank order."""
    return f"rank{rank:05d}{suffix}"


# --- where a run goes when nobody says ---------------------------------------------------

TRAINING_RUN_DIR = Path("ddiag-run")
"""The user's own training (``ddiag.instrument``, the reference trainer) given neither a
run directory nor $DDIAG_RUN_DIR: one fixed folder, which every rank of a job finds
without a launcher's help (docs/decorator.md)."""

RUNS = Path("runs")
"""Where a ddiag command given no --out puts its run: one folder per run, all under one,
relative to the working directory (shared by every node of a cluster whose home or
project directory is)."""


def training_run_dir(run_dir: str | os.PathLike | None = None) -> Path:
    """The explicit argument, else $DDIAG_RUN_DIR, else ``TRAINING_RUN_DIR``."""
    return Path(run_dir or os.environ.get("DDIAG_RUN_DIR") or TRAINING_RUN_DIR)


def default_run_dir(verb: str, job: str | None = None, *, own_run: bool = False) -> Path:
    """The run directory of a ddiag command given no --out; the one place that chooses it.

    $DDIAG_RUN_DIR when set, so that what check-env or a probe writes lands beside the
    training run's logs and analyze sees it; a command that starts runs of its own
    (``own_run``: scale-test) never joins that one. Otherwise a new ``runs/<verb>-<tag>``:
    for a rank of a job (``job``: a name every rank shares, e.g. the rendezvous address)
    the launcher's run id or else ``job``, so every rank derives the same folder without
    talking to the others; else the local time and a random suffix, so two runs started
    in the same second do not share a folder.
    """
    if not own_run and os.environ.get("DDIAG_RUN_DIR"):
        return Path(os.environ["DDIAG_RUN_DIR"])
    if job is not None:
        return RUNS / f"{verb}-{launcher_run_id() or job}"
    return RUNS / f"{verb}-{_time_and_suffix()}"


def _time_and_suffix() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


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


def generated_run_id() -> str:
    """The id of a run no launcher named: one per run directory, so the ranks of one job
    on hosts that do not share the directory each have their own."""
    return f"run-{_time_and_suffix()}"


# What generated_run_id makes, and what a rank writes when it cannot make run.json.
_GENERATED = re.compile(r"run-\d{8}-\d{6}-[0-9a-f]{6}|unknown")


def is_generated_run_id(run_id: str | None) -> bool:
    """Whether an id was made up by one host rather than named by the launcher."""
    return isinstance(run_id, str) and _GENERATED.fullmatch(run_id) is not None


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
        "run_id": run_id or generated_run_id(),
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
    with open_regular(path) as fh:
        doc = json.loads(fh.read(MAX_RUN_JSON_BYTES))
    if not isinstance(doc, dict):
        raise schema.SchemaError(str(path), f"expected a JSON object, got {type(doc).__name__}")
    schema.check(doc, schema.RUN, str(path))
    return doc
