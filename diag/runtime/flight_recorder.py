"""Turn on PyTorch's Flight Recorder and dump it per rank: at the end, on a fault, and on
SIGTERM/SIGUSR1.

The dump is torch's own JSON (``_dump_fr_trace_json``), written unchanged and atomically
(aside, then renamed), so readers see the previous dump or the new one, whole. Gloo has
no watchdog and never dumps by itself; NCCL's timeout dump (a pickle, elsewhere) stays
as it is.

Why a helper thread: Python runs signal handlers in the main thread only, and only
between bytecodes, so a rank stuck inside a C++ collective would not dump until the
collective returns -- exactly when the hang watcher's SIGUSR1 matters most. Python's
C-level handler does write the signal number to the wakeup fd at once from whatever
thread the kernel picked, so a thread reading that fd dumps while the main thread is
still stuck. Where the wakeup fd is already someone else's (asyncio), the dump happens
in the main-thread handler instead.

torch is imported inside functions: ``diag`` stays importable without it.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
from pathlib import Path

log = logging.getLogger("ddiag")

BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
LEGACY_BUFFER_ENV = "TORCH_NCCL_TRACE_BUFFER_SIZE"
DEFAULT_BUFFER_SIZE = 2000
DUMP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_tmp_ids = itertools.count()
# How long a SIGTERM handler waits for a dump in progress before it lets the process die.
LOCK_WAIT_S = 10.0


def enable(buffer_size: int = DEFAULT_BUFFER_SIZE) -> int:
    """Turn the Flight Recorder on unless the user already chose a size; returns the size
    in effect. Must run before the process group is created: torch reads it then."""
    for name in (BUFFER_ENV, LEGACY_BUFFER_ENV):
        if os.environ.get(name):
            return _int_or_zero(os.environ[name])
    os.environ[BUFFER_ENV] = str(buffer_size)
    return buffer_size


def _int_or_zero(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


def trace_json() -> bytes | str:
    """This process's Flight Recorder buffer as torch's JSON, collectives included
    (torch 2.13 returns bytes; older versions a str)."""
    from torch._C._distributed_c10d import _dump_fr_trace_json

    return _dump_fr_trace_json(includeCollectives=True)


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write aside and rename, so a reader (or a kill mid-write) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per call: a signal handler may dump while this same thread is mid-dump.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_tmp_ids)}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


class _Target:
    """Where this process dumps, and the lock that keeps two dumps from interleaving."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.dumps = 0


_target: _Target | None = None


def dump(path: str | os.PathLike | None = None) -> Path | None:
    """Dump now to ``path`` (default: the one given to ``install``). Returns the path, or
    None when there is nothing to dump to or torch cannot dump; never raises."""
    target = _target
    where = Path(path) if path is not None else (target.path if target else None)
    if where is None:
        return None
    lock = target.lock if target else threading.RLock()
    if not lock.acquire(timeout=LOCK_WAIT_S):
        return None
    try:
        write_atomic(where, trace_json())
        if target:
            target.dumps += 1
        return where
    except Exception as exc:  # noqa: BLE001 - called from signal handlers and failure paths
        log.warning("ddiag: flight recorder dump to %s failed: %s", where, exc)
        return None
    finally:
        lock.release()


def install(path: str | os.PathLike, signals: tuple[int, ...] = DUMP_SIGNALS) -> bool:
    """Dump to ``path`` on each of ``signals``, then run the handler that was there before.

    SIGTERM with the default action still kills the process (after the dump); SIGUSR1's
    default action (terminate) is not re-run: the signal asks for a dump, not a death.
    Only the main thread may install handlers; elsewhere returns False.
    """
    global _target
    if threading.current_thread() is not threading.main_thread():
        return False
    _target = _Target(path)
    for signum in signals:
        if signal.getsignal(signum) is not _on_signal:
            _chained[signum] = signal.getsignal(signum)
            signal.signal(signum, _on_signal)
    _watcher.start(signals)
    return True


_chained: dict[int, object] = {}


def installed() -> bool:
    """Whether ``install`` set up dumps on signals in this process."""
    return _target is not None and _target.pid == os.getpid()


def _on_signal(signum: int, frame) -> None:
    target = _target
    if target is not None and os.getpid() == target.pid:  # not in a forked loader worker
        if not _watcher.running or signum == signal.SIGTERM:
            # SIGTERM may be the last thing this process does: dump here too, after any
            # dump the watcher has in progress, so the file on disk is the newest.
            dump()
    _chain(signum, frame)


def _chain(signum: int, frame) -> None:
    previous = _chained.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL and signum != signal.SIGUSR1:
        # Re-deliver with the default action so the exit status stays "killed by signal".
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


class _WakeupWatcher:
    """Reads the signal wakeup fd in a daemon thread and dumps on our signals."""

    def __init__(self) -> None:
        self.running = False
        self.signals: frozenset[int] = frozenset()
        self.read_fd: int | None = None

    def start(self, signals: tuple[int, ...]) -> None:
        self.signals = frozenset(signals)
        if self.running:
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:
            previous = None
        if previous != -1:  # someone else's wakeup fd (or none allowed): give it back
            if previous is not None:
                signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return
        self.read_fd, self.running = read_fd, True
        threading.Thread(target=self._run, name="ddiag-fr-dump", daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self.read_fd, 64)
            except OSError:
                return
            if not data:
                return
            if any(byte in self.signals for byte in data):
                dump()

    def forget_after_fork(self) -> None:
        # The child shares the parent's pipe but not its thread: unhook so that a signal
        # to a loader worker does not make the parent dump.
        if self.running:
            try:
                signal.set_wakeup_fd(-1)
            except (ValueError, OSError):
                pass
        self.running = False


_watcher = _WakeupWatcher()
os.register_at_fork(after_in_child=_watcher.forget_after_fork)


def dump_path(run_dir: str | os.PathLike, rank: int) -> Path:
    """``RUN_DIR/fr/rank{R:05d}.json``."""
    from diag.format.rundir import RunDir

    return RunDir(Path(run_dir)).path("fr", rank, ".json")
