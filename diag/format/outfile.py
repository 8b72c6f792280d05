"""Files the user names for ddiag's output (``--html``, ``--trace``): each is created
new, in a folder that exists, never over an existing file and never through a symlink
(a link planted at the path, dangling or not, would make ddiag write somewhere else)."""

from __future__ import annotations

import os
from pathlib import Path

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class OutputFileError(ValueError):
    """An output path ddiag will not write; the message names the option, the path and
    the fix."""


def check_new(paths: dict[str, Path | None]) -> None:
    """Refuse, before any work, output paths (option -> path; None: not given) that
    could not be created new, or that two options share."""
    given = {opt: path for opt, path in paths.items() if path is not None}
    seen: dict[Path, str] = {}
    for opt, path in given.items():
        where = Path(os.path.realpath(path))
        if where in seen:
            raise OutputFileError(f"{seen[where]} and {opt} both name {where}; pass a "
                                  "different file to each")
        seen[where] = opt
        _check_one(opt, path)


def _check_one(opt: str, path: Path) -> None:
    if path.is_symlink():
        raise OutputFileError(f"{opt} {path}: is a symlink (to {os.readlink(path)}); "
                              "ddiag never writes through a link: pass a new path")
    if path.exists():
        raise OutputFileError(f"{opt} {path}: already exists; ddiag never overwrites a "
                              "file: pass a new path")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "no such folder"
        raise OutputFileError(f"{opt} {path}: {folder}: {what}; create it first "
                              f"(mkdir -p {folder}) or pass a path in an existing folder")


def write_new(opt: str, path: Path, text: str) -> None:
    """Create ``path`` and write ``text`` to it, or raise OutputFileError. O_EXCL with
    O_NOFOLLOW: a file or link that appeared at the path since check_new is refused, not
    followed or overwritten. A failed write leaves no partial file behind."""
    try:
        fd = os.open(path, _NEW, 0o666)
    except FileExistsError:
        _check_one(opt, path)  # says whether it is a link or a file
        raise OutputFileError(f"{opt} {path}: already exists; pass a new path") from None
    except OSError as exc:
        _check_one(opt, path)
        raise OutputFileError(f"{opt} {path}: cannot create it: {exc.strerror}; pass a "
                              "path in a folder you can write to") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise OutputFileError(f"{opt} {path}: write failed: {exc.strerror}; free space "
                              "or pass a path on another file system") from None
