"""Finds and loads everything under a path, recognising each file by its content.

Missing, truncated and corrupt files are normal: each becomes a ``Problem`` and the rest
is analysed. Nothing here raises on bad input, and nothing here costs more than
``Limits`` allows: regular files only, a byte budget per file and per analysis, and a
node budget per document.
"""

from __future__ import annotations

import functools
import gc
import json
import multiprocessing
import os
import re
import signal
import stat
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diag.format import schema
from diag.analyze import paste
from diag.analyze.collops import OpTable, fr_ops
from diag.analyze.docsize import DocumentTooLarge, expanded_size
from diag.analyze.eventcols import Window, read_compact
from diag.analyze.safe_pickle import UnsafePickleError, loads_plain
from diag.analyze.signals import Signal
from diag.format.events import Problem, RankLog
from diag.format.infile import NotRegularFile, file_kind, open_regular, reason

SNIFF_BYTES = 4096
MB = 2**20
# Per-rank files: rank3.log, rank00003.json, nccl_trace_rank_3.
RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
# Bytes that do not occur in text: replacement characters (invalid UTF-8) and C0 controls
# other than tab, newlines, form feed, backspace and ESC (colour codes).
_NOT_TEXT = re.compile("[\ufffd\x00-\x07\x0e-\x1a\x1c-\x1f]")
# Kinds of documents that are no evidence by themselves (run.json is metadata).
_NOT_EVIDENCE = frozenset({"json", schema.RUN})


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one analysis may read and hold; past a limit, what was left out is a problem."""

    text_file_bytes: int = 256 * MB
    """A longer text log is read as its head and its last ``text_tail_bytes``: an OOM is
    on its last lines."""
    text_tail_bytes: int = 64 * MB
    pickle_seconds: float = 120.0
    """A pickle is unpickled in a worker process that is ended past this (1024 dumps of
    2000 entries, 257 MB, take 8 s of CPU in all)."""
    text_seconds: float = 120.0
    """Parsing one text log stops past this, and the line it stopped at is a problem (a
    20,000-line log takes about half a second; lines built to be slow take up to 0.15 s
    each)."""
    doc_bytes: int = 512 * MB
    """A JSON document or pickle; a longer JSON file is read as text, a pickle skipped."""
    total_bytes: int = 1024 * MB
    """Read across all files but event logs; files that no longer fit are not read."""
    event_bytes: int = 8192 * MB
    """Event logs read across all files: they are kept as columns, about a third of
    their size (a 4096-rank x 1000-step run is 4 GB of them)."""
    workers: int | None = None
    """Processes that read event logs, pickles and text logs side by side (None: one
    per core)."""
    window: Window | None = None
    """Analyse only these steps / this time on (event logs' collectives and steps, Flight
    Recorder entries by their time); text logs are read whole."""
    parallel_bytes: int = 16 * MB
    """Less than this much to read (a text log counting ten times its bytes) is read in
    this process: starting workers would cost more than it saves."""
    doc_nodes: int = 100_000
    doc_nodes_per_byte: int = 4
    """A document may unfold into ``doc_nodes + doc_nodes_per_byte * its bytes`` nodes:
    a plain one has fewer nodes than bytes; a pickle that shares its own lists, 2**26
    from 200 bytes."""
    doc_depth: int = 64


@dataclass
class TextLog:
    """A text file (or pasted log) split into lines; line ``i`` is ``lines[i - 1]``.

    ``analyze`` keeps no log's lines once read: what it needs of them is its signals and
    ``errors``, the first error lines (``errorlines.error_lines``); ``lines`` is then
    empty and ``n_lines`` says how many there were."""

    path: str
    lines: list[str]
    n_lines: int = 0
    errors: list | None = None  # None: not computed (first_errors reads ``lines``)
    stopped_at: int | None = None  # the first line not parsed, when parsing ran out of time


@dataclass
class FRDump:
    """One rank's Flight Recorder dump: torch's document without its entries, which are
    kept only as columns (millions of dicts would not fit at 1024 ranks)."""

    path: str
    rank: int | None
    doc: dict
    ops: OpTable | None = None


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
    # Every event log's last segment, two of one rank included (``events`` keeps one).
    event_logs: list[RankLog] = field(default_factory=list)
    files: int = 0  # regular files found
    # Derived views several detectors share (e.g. per-rank collectives), built once.
    cache: dict = field(default_factory=dict, repr=False)

    def docs_of(self, kind: str) -> list[JsonDoc]:
        return [d for d in self.docs if d.kind == kind]

    @property
    def analysable(self) -> bool:
        """Whether anything was read that the detectors look at."""
        return bool(self.events or self.fr or self.texts
                    or any(d.kind not in _NOT_EVIDENCE for d in self.docs))

    @property
    def world_size(self) -> int | None:
        """The largest world size any source states (headers are checked on read)."""
        sizes = [log.header.get("world_size") for log in self.events.values() if log.header]
        for dump in self.fr.values():
            sizes += [len(_ranks_of(cfg)) for cfg in dump.doc.get("pg_config", {}).values()]
        sizes = [s for s in sizes if isinstance(s, int) and 0 < s <= schema.MAX_WORLD_SIZE]
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
    except (ValueError, RecursionError):
        return None


def load(path: str | os.PathLike, limits: Limits = Limits(),
         progress: Callable[[int, int, int], None] | None = None) -> Inputs:
    """Everything under ``path``. ``progress(files read, files in all, bytes read)`` is
    called as the event logs, pickles and text logs come back from their readers."""
    root = Path(path)
    inputs = Inputs(str(root))
    if not os.path.lexists(root):
        inputs.problems.append(Problem(str(root), None, "no such file or directory"))
        return inputs
    # Loading creates millions of objects and frees none; the cyclic GC would rescan
    # all of them again and again (6x the load time on 1024 dumps) for nothing.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        _Loader(inputs, limits, progress).load_all(walk(root, inputs.problems))
    finally:
        if was_enabled:
            gc.enable()
    return inputs


def walk(path: Path, problems: list[Problem]) -> list[Path]:
    """The files under ``path`` in name order, hidden ones left out. Folders that cannot
    be listed, and symlinks to folders (never followed), are problems."""
    if not path.is_dir():
        return [path]
    files = []

    def unlisted(exc: OSError) -> None:
        problems.append(Problem(exc.filename or str(path), None,
                                f"folder not read: {exc.strerror or exc}; its files are "
                                "not analysed"))

    for dirpath, dirnames, filenames in os.walk(path, onerror=unlisted):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and not _linked_folder(Path(dirpath) / d, problems))
        files += [Path(dirpath) / f for f in sorted(filenames) if not f.startswith(".")]
    return files


def _linked_folder(path: Path, problems: list[Problem]) -> bool:
    if not path.is_symlink():
        return False
    problems.append(Problem(str(path), None, "symlink to a folder; not followed"))
    return True


class _Loader:
    """Loads files into ``inputs`` while the byte budget lasts. Event logs, pickles and
    text logs, the bulk of a large run, are read by worker processes side by side
    (``jobs``) and what they return is taken in file order."""

    def __init__(self, inputs: Inputs, limits: Limits, progress=None) -> None:
        self.inputs, self.limits, self.progress = inputs, limits, progress
        self.left = limits.total_bytes
        self.events_left = limits.event_bytes
        self.over_budget: list[str] = []
        self.jobs: list[tuple[str, str, int]] = []  # (kind, path, size)

    def load_all(self, files: list[Path]) -> None:
        tree = _tree_of(Path(self.inputs.root))
        for file in files:
            self.load_guarded(file, tree)
        done = 0
        for n, ((kind, path, size), result) in enumerate(
                zip(self.jobs, run_jobs(self.jobs, self.limits)), 1):
            self.absorb(kind, path, result)
            done += size
            if self.progress is not None:
                self.progress(n, len(self.jobs), done)
        if self.over_budget:
            self.problem(self.over_budget[0], f"the {_mb(self.limits.total_bytes)} cap "
                         f"on bytes read in one analysis (event logs: "
                         f"{_mb(self.limits.event_bytes)}) was reached: this file and "
                         f"{len(self.over_budget) - 1} more were not read; analyse one run "
                         "directory (or fewer files) at a time")

    def problem(self, file, message: str, line: int | None = None) -> None:
        self.inputs.problems.append(Problem(str(file), line, message))

    def load_guarded(self, file: Path, tree: Path) -> None:
        try:
            size = _regular_size(file, tree)
            self.inputs.files += 1
            self.load_one(file, size)
        except (NotRegularFile, _OutsideTree) as exc:
            self.problem(file, str(exc))
        except OSError as exc:
            self.problem(file, reason(exc))
        except Exception as exc:  # noqa: BLE001 - one bad file never stops the analysis
            self.problem(file, f"unreadable: {type(exc).__name__}: {exc}"[:300])

    def take(self, file: Path, size: int, events: bool = False) -> bool:
        """Count ``size`` bytes against the analysis' budget, if they fit."""
        left = self.events_left if events else self.left
        if size > left:
            self.over_budget.append(str(file))
            return False
        if events:
            self.events_left -= size
        else:
            self.left -= size
        return True

    def load_one(self, file: Path, size: int) -> None:
        with open_regular(file) as fh:
            head = fh.read(SNIFF_BYTES)
        if not head.strip():
            return
        if head[:1] == b"\x80":
            return self.load_pickle(file, size)
        if head.lstrip()[:1] in (b"{", b"["):
            if self.load_json_lines(file, head, size) or self.load_json(file, size):
                return
        if _looks_binary(head):
            self.problem(file, "binary file of unknown format; skipped")
            return
        self.load_text(file, size)

    def load_json_lines(self, file: Path, head: bytes, size: int) -> bool:
        first = head.split(b"\n", 1)[0]
        try:
            doc = json.loads(first)
        except (ValueError, RecursionError):
            return False
        if not (isinstance(doc, dict) and doc.get("format") == schema.EVENTS):
            return False
        if self.take(file, size, events=True):
            self.jobs.append(("events", str(file), size))
        return True

    def load_json(self, file: Path, size: int) -> bool:
        if size > self.limits.doc_bytes:
            return False
        if not self.take(file, size):
            return True
        with open_regular(file) as fh:
            data = fh.read(self.limits.doc_bytes)
        try:
            doc = json.loads(data)
        except ValueError:
            self.left += size  # read again, as text
            return False  # JSON-looking text (or a truncated dump): read it as text
        except RecursionError:
            self.problem(file, "not loaded: JSON nested too deep to parse")
            return True
        self.absorb("doc", str(file), bounded_document(str(file), doc, size, self.limits))
        return True

    def load_pickle(self, file: Path, size: int) -> None:
        if size > self.limits.doc_bytes:
            self.problem(file, f"pickle over {_mb(self.limits.doc_bytes)}; skipped")
            return
        if self.take(file, size):
            self.jobs.append(("pickle", str(file), size))

    def absorb(self, kind: str, path: str, result: tuple) -> None:
        """Take what reading one file gave (in this process or a worker's)."""
        value, problems = result
        self.inputs.problems += problems
        if kind == "events":
            if value and value[-1].rank is not None:
                self.inputs.events[value[-1].rank] = value[-1]
                self.inputs.event_logs.append(value[-1])
        elif kind == "text":
            if value is not None:
                self.inputs.texts.append(value[0])
                self.inputs.signals += value[1]
        elif isinstance(value, FRDump):
            key = value.rank if value.rank is not None else -len(self.inputs.fr) - 1
            self.inputs.fr[key] = value
        elif value is not None:
            self.inputs.docs.append(value)

    def load_text(self, file: Path, size: int) -> None:
        if self.take(file, min(size, self.limits.text_file_bytes)):
            self.jobs.append(("text", str(file), size))


def _mb(n: int) -> str:
    return f"{n / MB:.3g} MB"


class _OutsideTree(OSError):
    """A symlink that leads out of the analysed folder."""


def _tree_of(root: Path) -> Path:
    resolved = root.resolve()
    return resolved if resolved.is_dir() else resolved.parent


def _regular_size(file: Path, tree: Path) -> int:
    """The size of a regular file inside the tree; raises for anything else."""
    mode = os.lstat(file).st_mode
    if stat.S_ISLNK(mode):
        target = file.resolve()
        if not target.is_relative_to(tree):
            raise _OutsideTree(f"symlink out of the analysed folder (to {target}); skipped")
        mode = os.stat(file).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(f"not a regular file ({file_kind(mode)}); skipped")
    return os.stat(file).st_size


def _looks_binary(head: bytes) -> bool:
    """NUL bytes, or more than one character in ten that no text log holds."""
    if b"\x00" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    return len(_NOT_TEXT.findall(text)) * 10 > len(text)


def _is_fr(doc: object) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("entries"), list) and "version" in doc


def _classify(file: Path, doc: object, window: Window | None = None
              ) -> tuple[FRDump | JsonDoc, list[Problem]]:
    if _is_fr(doc):
        rank = fr_rank(file, doc)
        doc, problems = _normalise_fr(doc, file)
        entries = doc.pop("entries")
        ops = fr_ops(entries, rank if rank is not None else -1, str(file))
        if window is not None and window.since is not None:
            ops = ops.where(np.isnan(ops.t) | (ops.t >= window.since))
        return FRDump(str(file), rank, {**doc, "n_entries": len(entries)}, ops), problems
    if isinstance(doc, dict) and isinstance(doc.get("format"), str) \
            and doc["format"].startswith("ddiag."):
        return JsonDoc(str(file), doc["format"], doc), []
    if _looks_like_torchelastic(doc):
        return JsonDoc(str(file), "torchelastic.error", doc), []
    if _looks_like_pyspy(doc):
        return JsonDoc(str(file), "pyspy", doc), []
    return JsonDoc(str(file), "json", doc), []


def _looks_like_torchelastic(doc: object) -> bool:
    if not isinstance(doc, dict):
        return False
    message = doc.get("message")
    if isinstance(message, dict):
        return "extraInfo" in message or "errorTraits" in message
    return isinstance(message, str) and "extraInfo" in json.dumps(doc)[:10000]


def _normalise_fr(doc: dict, file: Path) -> tuple[dict, list[Problem]]:
    """Keep only the parts of a dump with the shapes torch writes; note what was not."""
    entries = [e for e in doc["entries"] if isinstance(e, dict)]
    pg_config = doc.get("pg_config")
    pg_config = {str(k): v for k, v in pg_config.items() if isinstance(v, dict)} \
        if isinstance(pg_config, dict) else {}
    dropped = len(doc["entries"]) - len(entries)
    problems = [Problem(str(file), None, f"{dropped} malformed entries skipped")] if dropped \
        else []
    return {**doc, "entries": entries, "pg_config": pg_config}, problems


def _looks_like_pyspy(doc: object) -> bool:
    items = doc if isinstance(doc, list) else [doc]
    return bool(items) and all(isinstance(t, dict) and "frames" in t and "thread_id" in t
                               for t in items[:4])


def bounded_document(path: str, doc: object, size: int, limits: Limits
                     ) -> tuple[FRDump | JsonDoc | None, list[Problem]]:
    """``doc`` classified, unless walking it would cost more than its size warrants. A
    Flight Recorder dump's entries are exempt: fr_ops reads only their scalars."""
    walked = {k: v for k, v in doc.items() if k != "entries"} if _is_fr(doc) else doc
    nodes = limits.doc_nodes + limits.doc_nodes_per_byte * size
    try:
        expanded_size(walked, nodes, limits.doc_depth)
    except DocumentTooLarge as exc:
        return None, [Problem(path, None, f"not loaded: the document {exc}")]
    return _classify(Path(path), doc, limits.window)


def read_pickle(path: str, size: int, limits: Limits) -> tuple[FRDump | JsonDoc | None,
                                                                list[Problem]]:
    with open_regular(path) as fh:
        data = fh.read(limits.doc_bytes)
    try:
        doc = loads_plain(data)
    except UnsafePickleError as exc:
        return None, [Problem(path, None, f"not loaded: {exc}")]
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt pickle
        return None, [Problem(path, None, f"corrupt pickle: {exc}"[:300])]
    del data
    return bounded_document(path, doc, size, limits)


def read_text(path: str, size: int, limits: Limits) -> tuple[tuple[TextLog, list[Signal]],
                                                              list[Problem]]:
    """A text log's signals and first error lines; its lines are not kept. Past
    ``text_file_bytes``, its head and its last ``text_tail_bytes`` are read."""
    problems = []
    with open_regular(path) as fh:
        if size <= limits.text_file_bytes:
            data = fh.read(limits.text_file_bytes)
        else:
            data = _head_and_tail(fh, size, limits)
            problems.append(Problem(path, None, _cut_text(size, limits)))
    text = paste.clean(data.decode("utf-8", errors="replace"))
    del data
    log = TextLog(path, paste.unwrap(text.splitlines()))
    del text
    signals = extract_signals(log, limits.text_seconds)
    if log.stopped_at is not None:
        problems.append(Problem(path, log.stopped_at, (
            f"parsing stopped at line {log.stopped_at} of {len(log.lines)}: it ran past "
            f"{limits.text_seconds:g} s (lines built to be slow to parse?); the lines after "
            "it were not read")))
    log.n_lines, log.errors, log.lines = len(log.lines), error_lines(log), []
    return (log, signals), problems


def _head_and_tail(fh, size: int, limits: Limits) -> bytes:
    tail = min(limits.text_tail_bytes, limits.text_file_bytes // 2)
    data = fh.read(limits.text_file_bytes - tail)
    fh.seek(size - tail)
    # The gap's line count is unknown: keep the tail's line numbers apart by a marker.
    return data + b"\n[ddiag: middle of the file not read]\n" + fh.read(tail)


def _cut_text(size: int, limits: Limits) -> str:
    tail = min(limits.text_tail_bytes, limits.text_file_bytes // 2)
    return (f"text log of {_mb(size)}: read its first {_mb(limits.text_file_bytes - tail)} "
            f"and last {_mb(tail)} only (line numbers past the first part leave out the "
            "lines not read)")


def _run_job(job: tuple[str, str, int], limits: Limits) -> tuple:
    """One event log, pickle or text log read: (what it gave, its problems); never
    raises."""
    kind, path, size = job
    try:
        if kind == "events":
            return read_compact(path, limits.window)
        if kind == "text":
            return read_text(path, size, limits)
        return read_pickle(path, size, limits)
    except OSError as exc:
        return None, [Problem(path, None, reason(exc))]
    except Exception as exc:  # noqa: BLE001 - one bad file never stops the analysis
        return None, [Problem(path, None, f"unreadable: {type(exc).__name__}: {exc}"[:300])]


def run_jobs(jobs: list[tuple[str, str, int]], limits: Limits) -> Iterator[tuple]:
    """Every job's result, in order, as each comes: in worker processes when there is
    enough to read (text logs count ten times their size: they cost far more a byte to
    parse) and more than one core, else here. Pickles are always read in a worker, under
    a time limit (``_timed_job``): unpickling can cost time no check of ours can stop.

    Workers are forked (they start at once, with what this process imported), and only
    from a process with no other thread, where a fork cannot inherit a lock that some
    thread holds; from one with threads they are spawned."""
    workers = _workers(limits)
    work = sum(size * (10 if kind == "text" else 1) for kind, _, size in jobs)
    pickles = any(kind == "pickle" for kind, _, _ in jobs)
    if not pickles and (workers < 2 or len(jobs) < 2 or work < limits.parallel_bytes):
        yield from (_run_job(job, limits) for job in jobs)
        return
    yield from _in_workers(jobs, limits, max(1, min(workers, len(jobs))))


def _in_workers(jobs: list, limits: Limits, workers: int) -> Iterator[tuple]:
    """The jobs' results from a pool of ``workers``. When a worker dies (a pickle past
    its time limit, the OOM killer, a parser's crash), the first job not yet read is
    read again alone: if its worker dies too, it is the one, and is named; the pool
    starts again on the rest. What was read stands."""
    start = 0
    while start < len(jobs):
        done = 0
        try:
            for result in _pool_map(jobs[start:], limits, workers):
                done += 1
                yield result
            return
        except BrokenProcessPool:
            start += done
        job = jobs[start]
        try:
            yield next(_pool_map([job], limits, 1))
        except BrokenProcessPool:
            yield None, [Problem(job[1], None, _died(job, limits))]
        start += 1


def _pool_map(jobs: list, limits: Limits, workers: int) -> Iterator[tuple]:
    method = "fork" if threading.active_count() == 1 else "spawn"
    chunk = max(1, min(64, len(jobs) // (workers * 4)))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
        yield from pool.map(functools.partial(_timed_job, limits=limits), jobs, chunksize=chunk)


def _timed_job(job: tuple[str, str, int], limits: Limits) -> tuple:
    """``_run_job`` in a worker; a pickle gets ``pickle_seconds``, after which SIGALRM's
    default action ends the worker (no Python handler would run inside the unpickler's
    C loop)."""
    if job[0] != "pickle":
        return _run_job(job, limits)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, limits.pickle_seconds)
    try:
        return _run_job(job, limits)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _died(job: tuple[str, str, int], limits: Limits) -> str:
    if job[0] == "pickle":
        return (f"not read: unpickling it ran past {limits.pickle_seconds:g} s (a pickle "
                "built to cost time, e.g. a key that is a tuple sharing itself) or its "
                "worker process was killed (for memory)")
    return "not read: the worker process reading it died (killed for memory?)"


def read_event_files(paths: list[Path], limits: Limits = Limits()
                     ) -> list[tuple[list[RankLog], list[Problem]]]:
    """Event logs read as columns, (segments, problems) per path, side by side when
    there is enough to read (``run_jobs``)."""
    jobs = []
    for path in paths:
        try:
            jobs.append(("events", str(path), os.stat(path).st_size))
        except OSError:
            jobs.append(("events", str(path), 0))  # the job reports why it is unreadable
    return [(segments or [], problems) for segments, problems in run_jobs(jobs, limits)]


def _workers(limits: Limits) -> int:
    if limits.workers is not None:
        return limits.workers
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def fr_rank(file: Path, doc: dict) -> int | None:
    """Which rank a dump is from: torch names files ``<prefix><rank>``; entries do not
    carry the global rank, so the name (or ``rank`` field if present) is all we have."""
    rank = doc.get("rank")
    if type(rank) is not int:
        match = RANK_IN_NAME.search(file.name) or re.search(r"(\d+)(?:\.\w+)?$", file.name)
        rank = int(match.group(1)) if match else None
    return rank if rank is not None and 0 <= rank < schema.MAX_WORLD_SIZE else None


def extract_signals(log: TextLog, seconds: float | None = None) -> list[Signal]:
    from diag.analyze.textlog import extract  # the line parsers: heavy regex tables

    return extract(log, seconds)


def error_lines(log: TextLog) -> list[Signal]:
    from diag.analyze import errorlines  # imports the line parsers too

    return errorlines.error_lines(log)
