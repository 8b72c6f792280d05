"""The job's own log, kept beside what watch captured when it ends the job.

A job started as ``torchrun ... > train.log 2>&1`` has that file as its ranks' and its
launcher's stdout and stderr. watch notes those files (regular files only, with their
device and inode) while the processes live, and after ``--kill`` copies the tail of each
into ``RUN_DIR/logs/`` so that ``ddiag analyze RUN_DIR`` reads the stacks, ``killed.json``
and the log as one incident. The copy opens the path without following a symlink and only
if it is still the file the job wrote (same device and inode): watch often runs as root.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from diag.watch.capture import write_replacing

MAX_BYTES = 8 << 20  # the tail kept of each log: the end is where the failure is


@dataclass(frozen=True)
class JobLog:
    path: str
    dev: int
    ino: int


def of_processes(pids: list[int]) -> list[JobLog]:
    """The regular files that ``pids`` write their stdout and stderr to, once each."""
    found: dict[tuple[int, int], JobLog] = {}
    for pid in pids:
        for fd in (1, 2):
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                path = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and path.startswith("/") and not path.endswith(
                    " (deleted)"):
                found.setdefault((st.st_dev, st.st_ino), JobLog(path, st.st_dev, st.st_ino))
    return list(found.values())


def keep(logs: list[JobLog], run_dir: Path) -> list[Path]:
    """Copy the tail of each log into RUN_DIR/logs/; the paths written."""
    out = []
    for n, log in enumerate(logs):
        tail = _tail(log)
        if tail is None:
            continue
        path = Path(run_dir) / "logs" / f"job{n}-{Path(log.path).name}"
        write_replacing(path, tail[0])
        os.chmod(path, tail[1] & 0o644)  # a private log stays private
        out.append(path)
    return out


def _tail(log: JobLog) -> tuple[str, int] | None:
    try:
        fd = os.open(log.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (log.dev, log.ino):
            return None
        fh.seek(max(0, st.st_size - MAX_BYTES))
        return fh.read(MAX_BYTES).decode("utf-8", "replace"), st.st_mode
