"""The per-rank event log writer: JSONL, one ``write`` per line, never raising into training.

Training threads only append records to an in-memory queue. A daemon thread serialises
and writes them every ``flush_interval`` seconds, so a slow or full disk costs training
nothing. Every line goes to an ``O_APPEND`` descriptor in a single ``os.write``, so a
writer killed mid-record leaves at most one torn last line and concurrent writers never
interleave half lines. What is written is in the page cache, so it survives SIGKILL.

A record can also wait for its values (``Awaiting``: a copy from the GPU still in
flight): it waits beside the queue, without holding back the records behind it, and is
written by the first flush that finds it ready; closing waits for it a bounded time.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import signal
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

log = logging.getLogger("ddiag")

FLUSH_INTERVAL_S = 0.2
HEARTBEAT_INTERVAL_S = 1.0
# Beyond this many unwritten records (a stalled disk) new ones are dropped, not queued,
# so the writer's memory stays bounded.
MAX_QUEUE = 200_000
# How long closing (exit, SIGTERM, SIGINT) waits for records whose values are still on
# their way. A rank stuck in a collective never finishes its copies, and must still exit:
# past this, such records are written without those values.
DRAIN_WAIT_S = 2.0

_live_writers: "weakref.WeakSet[EventWriter]" = weakref.WeakSet()


# orjson writes the integers in [-2**63, 2**64) and refuses the rest; json writes them, but
# orjson reads one back as a float, or, beyond a double's range, drops its whole line.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_JSON_KEY = (str, int, float, bool, type(None))


def _jsonable(value):
    """``value`` with what a JSON reader refuses made into strings: NaN and Infinity
    become "nan", "inf", "-inf"; an integer beyond 64 bits, its decimal digits."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int) and not isinstance(value, bool):
        return value if _INT_MIN <= value <= _INT_MAX else _int_text(value)
    if isinstance(value, dict):
        return {k if isinstance(k, _JSON_KEY) else str(k): _jsonable(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _int_text(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # past Python's limit of 4300 digits for str(int)
        return f"{'-' if value < 0 else ''}int of {value.bit_length()} bits"


def _json_encode(record: dict) -> bytes:
    return json.dumps(_jsonable(record), separators=(",", ":"), allow_nan=False,
                      default=str).encode()


def _has_nonfinite(record: dict) -> bool:
    for value in record.values():
        if type(value) is float and not math.isfinite(value):
            return True
    return False


try:  # serialising is most of the writer thread's work; orjson does it ~10x faster
    import orjson

    _ORJSON_LINE = orjson.OPT_APPEND_NEWLINE

    def encode(record: dict) -> bytes:
        """One JSON line."""
        try:
            line = orjson.dumps(record, default=str, option=_ORJSON_LINE)
            # orjson writes NaN/Infinity as null; keep them, as strings, where they occur
            # (a loss or gradient norm: top-level floats of a record). Only a line with
            # a null can hold one, so most records skip the scan.
            if b"null" in line and _has_nonfinite(record):
                line = orjson.dumps(_jsonable(record), default=str, option=_ORJSON_LINE)
            return line
        except (TypeError, ValueError):  # non-str keys, or an integer beyond 64 bits
            return _json_encode(record) + b"\n"
except ImportError:  # pragma: no cover - orjson is a dependency

    def encode(record: dict) -> bytes:
        """One JSON line."""
        return _json_encode(record) + b"\n"


class Awaiting(tuple):
    """A record whose values are still being produced, as ``(source, build, *values)``:
    ``source.ready()`` says when they can be read without waiting (a CUDA event's
    ``query()``), and ``build(source, *values)`` makes the record, reading what is ready
    and marking what is not (closing writes it anyway after ``DRAIN_WAIT_S``)."""

    __slots__ = ()

    def ready(self) -> bool:
        try:
            return self[0].ready()
        except Exception:  # noqa: BLE001 - a source that cannot tell: build with what it has
            return True

    def record(self) -> dict:
        return self[1](self[0], *self[2:])


class EventWriter:
    """Appends records to one rank's JSONL file from a background thread."""

    def __init__(
        self,
        path: Path,
        header: dict,
        *,
        heartbeat_path: Path | None = None,
        heartbeat: Callable[[], dict] | None = None,
        flush_interval: float = FLUSH_INTERVAL_S,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
    ) -> None:
        self.path = Path(path)
        self.written = 0
        self.dropped = 0
        self._queue: collections.deque[dict] = collections.deque()
        self._waiting: list[Awaiting] = []  # taken from the queue before they were ready
        self._force = False  # closing: write waiting records with what they have
        self._observers: list[Callable[[dict], None]] = []
        self._ticks: list[Callable[[dict], None]] = []
        self._lock = threading.RLock()
        self._warned = False
        self._closed = False
        self._heartbeat_path = heartbeat_path
        self._heartbeat = heartbeat
        self._flush_interval = flush_interval
        self._heartbeat_interval = heartbeat_interval
        self._fd = self._open()
        self.emit(header)
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddiag-writer", daemon=True)
        self._thread.start()
        _live_writers.add(self)

    def _open(self) -> int | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            self._warn(f"cannot open event log {self.path}: {exc}")
            return None

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("ddiag: %s; records are dropped and counted, training goes on", message)

    def emit(self, record: dict) -> None:
        """Queue one record: a dict, or its parts with a ``record()`` method that builds
        it (on the writer thread). Called from training code: O(1), never raises, never
        blocks."""
        if self._closed or len(self._queue) >= MAX_QUEUE:
            self.dropped += 1
            return
        self._queue.append(record)

    def add_tick(self, tick: Callable[[dict], None]) -> None:
        """Call ``tick({})`` on the writer thread about once a second (heartbeat time)."""
        self._ticks.append(tick)

    def add_observer(self, observe: Callable[[dict], None]) -> None:
        """Also hand every record to ``observe``, on the writer thread (so metrics
        exporters cost training nothing). An observer that raises is dropped."""
        self._observers.append(observe)

    def flush(self) -> None:
        """Write every queued record, one ``os.write`` per line. One loop with no calls
        of its own per record: flushing follows a training step, with cold caches."""
        with self._lock:
            if self._waiting:
                self._queue.extendleft(reversed(self._take_ready()))
            queue, fd = self._queue, self._fd
            while queue:
                record = queue.popleft()
                if fd is None:
                    self.dropped += 1
                    continue
                try:
                    if type(record) is not dict:  # built by its producer's record() here
                        if type(record) is Awaiting and not (self._force or record.ready()):
                            self._waiting.append(record)
                            continue
                        record = record.record()
                    line = encode(record)
                    # A regular file takes the whole line at once; the loop only guards
                    # the rare short write so the line is never left torn mid-file.
                    while line:
                        line = line[os.write(fd, line):]
                    self.written += 1
                except Exception as exc:  # noqa: BLE001 - one bad record or a full disk
                    self.dropped += 1  # must not stop the log, nor training
                    self._warn(f"cannot write {self.path}: {exc}")
                    continue
                if self._observers:
                    for observe in list(self._observers):
                        self._notify(observe, record, self._observers)

    def _take_ready(self) -> list:
        """The waiting records that are ready now, oldest first; the rest keep waiting."""
        ready, waiting = [], []
        for record in self._waiting:
            (ready if record.ready() else waiting).append(record)
        self._waiting = waiting
        return ready

    def drain(self, wait_s: float | None = None) -> None:
        """Write every record, waiting up to ``wait_s`` (default ``DRAIN_WAIT_S``) for
        those whose values are still on their way; past that they are written with what
        they have. For exit only: the training thread must never wait here."""
        deadline = time.monotonic() + (DRAIN_WAIT_S if wait_s is None else wait_s)
        with self._lock:
            self.flush()
            while self._waiting and time.monotonic() < deadline:
                time.sleep(0.001)
                self.flush()
            self._queue.extendleft(reversed(self._waiting))
            self._waiting = []
            self._force = True
            try:
                self.flush()
            finally:
                self._force = False

    def _notify(self, observe: Callable[[dict], None], record: dict, owners: list) -> None:
        try:
            observe(record)
        except Exception as exc:  # noqa: BLE001 - a broken exporter must not stop the log
            owners.remove(observe)
            log.warning("ddiag: observer %r failed (%s); dropped", observe, exc)

    def write_heartbeat(self) -> None:
        for tick in list(self._ticks):
            self._notify(tick, {}, self._ticks)
        if self._heartbeat_path is None or self._heartbeat is None:
            return
        try:
            doc = self._heartbeat()
            doc["dropped"] = self.dropped
            tmp = self._heartbeat_path.with_name(self._heartbeat_path.name + ".tmp")
            tmp.write_bytes(encode(doc))
            os.replace(tmp, self._heartbeat_path)  # readers see the old or the new, whole
        except Exception as exc:  # noqa: BLE001 - a heartbeat must never take training down
            self._warn(f"cannot write heartbeat {self._heartbeat_path}: {exc}")

    def _run(self) -> None:
        next_flush = next_beat = 0.0
        while not self._closed:
            now = time.monotonic()
            if now >= next_flush:
                self.flush()
                next_flush = now + self._flush_interval
            if now >= next_beat:
                self.write_heartbeat()
                next_beat = now + self._heartbeat_interval
            # Each on its own clock: a long flush interval must not starve the heartbeat
            # that the hang watcher reads.
            self._wake.wait(max(0.0, min(next_flush, next_beat) - time.monotonic()))
            self._wake.clear()

    def close(self, final: dict | None = None) -> None:
        """Flush everything, append ``final`` and release the file. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self.drain()  # before ``final``, which stays the last line
            if final is not None:
                self._queue.append(final)
            self.flush()
            self.write_heartbeat()
            self._closed = True
            self._wake.set()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def flush_all() -> None:
    """Write what every writer holds (the process is about to die)."""
    for writer in list(_live_writers):
        try:
            writer.drain()
            writer.write_heartbeat()
        except Exception:  # noqa: BLE001 - called from signal handlers and atexit
            pass


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker) inherits the writers' queues but not their
    files' ownership: flushing its copy would write the parent's records twice."""
    for writer in list(_live_writers):
        writer._closed = True
        writer._queue.clear()
        writer._waiting = []
    _live_writers.clear()


os.register_at_fork(after_in_child=_forget_in_child)

_chained: dict[int, object] = {}


def _flush_then_chain(signum, frame) -> None:
    flush_all()
    previous = _chained.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        # Re-deliver with the default action so the exit status stays "killed by signal".
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install_signal_flush(signals=(signal.SIGTERM, signal.SIGINT)) -> bool:
    """Flush all writers on SIGTERM/SIGINT, then run whatever handler was there before.

    Only the main thread may install handlers; elsewhere this is a no-op (returns False)
    and the writer still flushes every ``FLUSH_INTERVAL_S``.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    for signum in signals:
        current = signal.getsignal(signum)
        if current is _flush_then_chain:
            continue
        _chained[signum] = current
        signal.signal(signum, _flush_then_chain)
    return True
