"""The Python frames that mean a thread issues, or waits in, a collective, as data.

Loads ``collective_frames.tsv`` (beside this module): one row per function of
torch.distributed, DDP, FSDP, pipelining, DeepSpeed, Megatron-LM or Accelerate that calls
into a process group, a work's or handle's wait, or the c10d store, with its kind, what it
calls and where that was read. Every reader of stacks asks ``lookup`` (stack states,
traceback ``in_collective``, the hang detector's barrier-like collectives), so adding a row
is the whole change. ``frames_census`` derives the torch rows from torch's source.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

PATH = Path(__file__).with_name("collective_frames.tsv")
SCHEMA = "ddiag.collective_frames"
MAJOR = 1
COLUMNS = ("library", "path", "function", "kind", "issues", "source")
KINDS = {
    "data": "a collective on tensors (all_reduce, all_gather, broadcast, reduce_scatter ...)",
    "p2p": "a point-to-point send or recv (pipeline stages)",
    "wait": "waits on a collective already issued (a work's, handle's or tensor's wait)",
    "barrier": "a barrier: no data, every rank must arrive",
    "object": "a collective of pickled Python objects",
    "group": "creates, splits or shrinks a process group (every member must call it)",
    "init": "initialises the default process group (store rendezvous, communicator setup)",
    "store": "waits on the c10d store for other ranks (TCPStore connect, get, wait)",
}
CONTROL_KINDS = frozenset({"barrier", "object", "group"})
"""Sync points that carry no training data: what a rank-conditional path usually adds."""
_ELIDED = ("...", "…")  # a pasted path with its prefix cut: ".../distributed_c10d.py"


@dataclass(frozen=True)
class CollectiveFrame:
    """One row: ``function`` (a ``__qualname__``) of the file ``path`` ends with."""

    library: str
    path: str
    function: str
    kind: str
    issues: str
    source: str


@functools.lru_cache(maxsize=1)
def entries() -> tuple[CollectiveFrame, ...]:
    out, seen = [], {}
    for n, row in _rows(PATH):
        entry = _entry(row, n)
        key = (entry.path, entry.function)
        if key in seen:  # two rows for one frame: which kind holds would be luck
            raise ValueError(f"{PATH.name}:{n}: {entry.path} {entry.function} already has "
                             f"line {seen[key]}; keep one")
        seen[key] = n
        out.append(entry)
    return tuple(out)


def _rows(path: Path) -> list[tuple[int, dict]]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    head = lines[0].lstrip("# ").split() if lines else []
    if len(head) != 2 or head[0] != SCHEMA or not head[1].isdigit() or int(head[1]) != MAJOR:
        raise ValueError(f"{path}: first line must be '# {SCHEMA} {MAJOR}', got "
                         f"{lines[0][:80] if lines else ''!r}")
    body = [(n, line) for n, line in enumerate(lines, 1) if line and not line.startswith("#")]
    reader = csv.DictReader([line for _, line in body], delimiter="\t", quoting=csv.QUOTE_NONE)
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"{path}: columns must be {COLUMNS}, got {reader.fieldnames}")
    return [(n, row) for (n, _), row in zip(body[1:], reader)]


def _entry(row: dict, line: int) -> CollectiveFrame:
    entry = CollectiveFrame(**{c: (row.get(c) or "").strip() for c in COLUMNS})
    if entry.kind not in KINDS:
        raise ValueError(f"{PATH.name}:{line}: kind={entry.kind!r}: use one of {sorted(KINDS)}")
    if not entry.path.endswith(".py") or entry.path.startswith("/") or not entry.function:
        raise ValueError(f"{PATH.name}:{line}: path={entry.path!r} function={entry.function!r}: "
                         "give the file as under site-packages (torch/...py) and a function")
    return entry


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, dict[str, dict[str, list[CollectiveFrame]]]]:
    """file name -> entry path -> function name -> entries; each function is filed under
    its qualname and, for frames shown without their class, under its last part."""
    index: dict[str, dict[str, dict[str, list[CollectiveFrame]]]] = {}
    for e in entries():
        names = index.setdefault(e.path.rsplit("/", 1)[-1], {}).setdefault(e.path, {})
        names.setdefault(e.function, []).append(e)
        bare = e.function.rsplit(".", 1)[-1]
        if bare != e.function:
            names.setdefault(bare, []).append(e)
    return index


def lookup(file: str, func: str) -> CollectiveFrame | None:
    """The row of a frame (its file as any dump prints it, its function bare or
    qualified), or None when the frame issues no collective."""
    path = file.replace("\\", "/")
    for entry_path, names in _index().get(path.rsplit("/", 1)[-1], {}).items():
        hits = names.get(func) if _same_file(path, entry_path) else None
        # a qualified name must be the row's own; a bare one may be any class's method
        for hit in hits or ():
            if hit.function == func or "." not in func:
                return hit
    return None


def _same_file(path: str, entry_path: str) -> bool:
    if path == entry_path or path.endswith("/" + entry_path):
        return True
    shown = path.lstrip("./…").lstrip("/") if path.startswith(_ELIDED) else ""
    return bool(shown) and (shown == entry_path or entry_path.endswith("/" + shown))


def in_stack(stack: list[dict]) -> list[CollectiveFrame]:
    """The rows of a traceback's frames (``{"file", "func"}`` dicts), innermost last."""
    return [hit for f in stack if (hit := lookup(str(f.get("file") or ""), str(f.get("func"))))]
