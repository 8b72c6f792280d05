"""Opening input files copied off other people's clusters: regular files only, and never
blocking (a named pipe opened plainly waits for a writer forever)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


class NotRegularFile(OSError):
    """A named pipe, a device or a socket: reading one may block forever or never end."""


def open_regular(path: str | Path) -> BinaryIO:
    """Open ``path`` for reading in binary; raises NotRegularFile unless it is (or links
    to) a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFile(f"not a regular file ({file_kind(mode)}); skipped")
    return os.fdopen(fd, "rb")


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def reason(exc: OSError) -> str:
    """Why a file was not read, without its path (the problem names it already)."""
    if isinstance(exc, NotRegularFile):
        return str(exc)
    return f"unreadable: {exc.strerror or exc}; skipped"
