"""Finds and loads everything under a path, recognising each file by its content.

Missing, truncated and corrupt files are normal: each becomes a ``Problem`` and the rest
is analysed. Nothing here raises on bad input.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from diag import schema
from diag.analyze.collops import CollOp, fr_ops
from diag.analyze.safe_pickle import UnsafePickleError, loads_plain
from diag.analyze.signals import Signal
from diag.events import Problem, RankLog, read_events

SNIFF_BYTES = 4096
MAX_JSON_BYTES = 512 * 2**20
MAX_TEXT_BYTES = 256 * 2**20
# Per-rank files: rank3.log, rank00003.json, nccl_trace_rank_3.
RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


@dataclass
class TextLog:
    """A text file (or pasted log) split into lines; line ``i`` is ``lines[i - 1]``."""

    path: str
    lines: list[str]


@dataclass
class FRDump:
    """One rank's Flight Recorder dump: torch's document without its entries, which are
    kept only as compact rows (millions of dicts would not fit at 1024 ranks)."""

    path: str
    rank: int | None
    doc: dict
    ops: list[CollOp] = field(default_factory=list)


@dataclass
class JsonDoc:
    """A JSON document we recognised: ``kind`` says what it is."""

    path: str
    kind: str
    doc: object


@dataclass
class Inputs:
    root: str
    events: dict[int, RankLog] = field(default_factory=dict)
    fr: dict[int, FRDump] = field(default_factory=dict)
    texts: list[TextLog] = field(default_factory=list)
    docs: list[JsonDoc] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)
    # Derived views several detectors share (e.g. per-rank collectives), built once.
    cache: dict = field(default_factory=dict, repr=False)

    def docs_of(self, kind: str) -> list[JsonDoc]:
        return [d for d in self.docs if d.kind == kind]

    @property
    def world_size(self) -> int | None:
        """The largest world size any source states."""
        sizes = [log.header.get("world_size") for log in self.events.values() if log.header]
        for dump in self.fr.values():
            sizes += [len(_ranks_of(cfg)) for cfg in dump.doc.get("pg_config", {}).values()]
        sizes = [s for s in sizes if isinstance(s, int) and s > 0]
        return max(sizes) if sizes else None


def _ranks_of(pg_config: dict) -> list:
    ranks = pg_config.get("ranks", []) if isinstance(pg_config, dict) else []
    if isinstance(ranks, str):
        ranks = _parse_ranks(ranks)
    return ranks if isinstance(ranks, list) else []


@functools.lru_cache(maxsize=64)
def _parse_ranks(text: str) -> list | None:
    """Every dump of a job repeats the same "[0, 1, ..., 1023]"; parse it once."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def walk(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files += [Path(dirpath) / f for f in sorted(filenames) if not f.startswith(".")]
    return files


def load(path: str | os.PathLike) -> Inputs:
    root = Path(path)
    inputs = Inputs(str(root))
    if not root.exists():
        inputs.problems.append(Problem(str(root), None, "no such file or directory"))
        return inputs
    # Loading creates millions of objects and frees none; the cyclic GC would rescan
    # all of them again and again (6x the load time on 1024 dumps) for nothing.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for file in walk(root):
            _load_guarded(file, inputs)
    finally:
        if was_enabled:
            gc.enable()
    return inputs


def _load_guarded(file: Path, inputs: Inputs) -> None:
    try:
        _load_one(file, inputs)
    except Exception as exc:  # noqa: BLE001 - one bad file never stops the analysis
        inputs.problems.append(Problem(str(file), None, f"unreadable: {exc}"[:300]))


def _load_one(file: Path, inputs: Inputs) -> None:
    with open(file, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    if not head.strip():
        return
    if head[:1] == b"\x80":
        return _load_pickle(file, inputs)
    if head.lstrip()[:1] in (b"{", b"["):
        if _load_json_lines(file, head, inputs) or _load_json(file, inputs):
            return
    if b"\x00" in head:
        inputs.problems.append(Problem(str(file), None, "binary file of unknown format; skipped"))
        return
    _load_text(file, inputs)


def _load_json_lines(file: Path, head: bytes, inputs: Inputs) -> bool:
    first = head.split(b"\n", 1)[0]
    try:
        doc = json.loads(first)
    except ValueError:
        return False
    if not (isinstance(doc, dict) and doc.get("format") == schema.EVENTS):
        return False
    segments, problems = read_events(file)
    inputs.problems += problems
    if segments and segments[-1].rank is not None:
        inputs.events[segments[-1].rank] = segments[-1]
    return True


def _load_json(file: Path, inputs: Inputs) -> bool:
    if file.stat().st_size > MAX_JSON_BYTES:
        return False
    try:
        doc = json.loads(file.read_bytes())
    except ValueError:
        return False  # JSON-looking text (or a truncated dump): read it as text
    _classify(file, doc, inputs)
    return True


def _load_pickle(file: Path, inputs: Inputs) -> None:
    try:
        doc = loads_plain(file.read_bytes())
    except UnsafePickleError as exc:
        inputs.problems.append(Problem(str(file), None, f"not loaded: {exc}"))
        return
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt pickle
        inputs.problems.append(Problem(str(file), None, f"corrupt pickle: {exc}"[:300]))
        return
    _classify(file, doc, inputs)


def _classify(file: Path, doc: object, inputs: Inputs) -> None:
    if isinstance(doc, dict) and isinstance(doc.get("entries"), list) and "version" in doc:
        rank = fr_rank(file, doc)
        key = rank if rank is not None else -len(inputs.fr) - 1
        doc = _normalise_fr(doc, file, inputs)
        entries = doc.pop("entries")
        ops = fr_ops(entries, rank if rank is not None else -1, str(file))
        inputs.fr[key] = FRDump(str(file), rank, {**doc, "n_entries": len(entries)}, ops)
    elif isinstance(doc, dict) and str(doc.get("format", "")).startswith("ddiag."):
        inputs.docs.append(JsonDoc(str(file), doc["format"], doc))
    elif isinstance(doc, dict) and isinstance(doc.get("message"), (dict, str)) and (
            "extraInfo" in json.dumps(doc)[:10000] or "errorTraits" in doc.get("message", {})):
        inputs.docs.append(JsonDoc(str(file), "torchelastic.error", doc))
    elif _looks_like_pyspy(doc):
        inputs.docs.append(JsonDoc(str(file), "pyspy", doc))
    else:
        inputs.docs.append(JsonDoc(str(file), "json", doc))


def _normalise_fr(doc: dict, file: Path, inputs: Inputs) -> dict:
    """Keep only the parts of a dump with the shapes torch writes; note what was not."""
    entries = [e for e in doc["entries"] if isinstance(e, dict)]
    pg_config = doc.get("pg_config")
    pg_config = {str(k): v for k, v in pg_config.items() if isinstance(v, dict)} \
        if isinstance(pg_config, dict) else {}
    dropped = len(doc["entries"]) - len(entries)
    if dropped:
        inputs.problems.append(Problem(str(file), None, f"{dropped} malformed entries skipped"))
    return {**doc, "entries": entries, "pg_config": pg_config}


def _looks_like_pyspy(doc: object) -> bool:
    items = doc if isinstance(doc, list) else [doc]
    return bool(items) and all(isinstance(t, dict) and "frames" in t and "thread_id" in t
                               for t in items[:4])


def fr_rank(file: Path, doc: dict) -> int | None:
    """Which rank a dump is from: torch names files ``<prefix><rank>``; entries do not
    carry the global rank, so the name (or ``rank`` field if present) is all we have."""
    if isinstance(doc.get("rank"), int):
        return doc["rank"]
    match = RANK_IN_NAME.search(file.name) or re.search(r"(\d+)(?:\.\w+)?$", file.name)
    return int(match.group(1)) if match else None


def extract_signals(log: TextLog) -> list[Signal]:
    from diag.analyze.textlog import extract  # the line parsers: heavy regex tables

    return extract(log)


def _load_text(file: Path, inputs: Inputs) -> None:
    if file.stat().st_size > MAX_TEXT_BYTES:
        inputs.problems.append(Problem(str(file), None,
                                       f"text file over {MAX_TEXT_BYTES >> 20} MB; skipped"))
        return
    text = file.read_bytes().decode("utf-8", errors="replace")
    log = TextLog(str(file), text.splitlines())
    inputs.texts.append(log)
    inputs.signals += extract_signals(log)
