"""A command's working directory at each stage: a per-stage copy of the user's, so that no
stage sees what an earlier one wrote there (a checkpoint it would resume from), and what
each stage wrote, from snapshots of the tree's names, sizes and mtimes before and after.

The copy is a mirror, not a full copy: folders are made anew, small regular files are
copied, and large files (datasets), folders past the budget and anything else are
symlinks to the user's own. A stage that writes a new file writes it in the mirror; one
that rewrites a small file the user had rewrites its copy. A write through a link (a large
file rewritten in place, a new file in a linked folder) would reach the user's directory:
that is why the user's directory is snapshotted around every stage too, and any change
there is reported.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

COPY_MAX_BYTES = 8 << 20
"""A regular file up to this size is copied into the mirror, so that a stage rewriting it
(a checkpoint or config the user already had) rewrites its copy. Larger ones are linked:
copying a dataset for every stage costs more than it protects, and a write through the
link still shows in the user's directory's snapshot."""
COPY_TOTAL_BYTES = 256 << 20
"""Bytes copied into one stage's mirror at most; past them, files are linked."""
MIRROR_ENTRIES = 5000
"""Entries made in one stage's mirror below its top level. A folder with more entries
than are left is linked whole (a dataset of a million images is not walked)."""
MIRROR_S = 10.0
"""Seconds one mirror may take; the folders not reached by then are linked whole."""
SNAPSHOT_ENTRIES = 20000
SNAPSHOT_S = 3.0
"""A snapshot stops after this many entries or seconds (a working directory may be a
home directory); the report then says the changes it lists may be incomplete."""
LISTED = 20
"""Paths listed per kind of change in scale-test.json (the counts are always whole)."""


def mirror_path(out: Path, stage: int) -> Path:
    """Where stage ``stage`` of a command runs: beside its run directory, not in it, so
    that ``ddiag analyze`` on the stage never reads the user's files."""
    return out / f"stage-{stage}-cwd"


@dataclass
class _Budget:
    """What one mirror may still make (read at each mirror, so a test can lower it)."""

    entries: int = field(default_factory=lambda: MIRROR_ENTRIES)
    copy_bytes: int = field(default_factory=lambda: COPY_TOTAL_BYTES)
    deadline: float = field(default_factory=lambda: time.monotonic() + MIRROR_S)


@dataclass
class Mirror:
    """What a mirror holds: copies and links to the user's entries."""

    copied: int = 0
    linked: int = 0


def make_mirror(user: Path, dst: Path, skip: Path | None = None) -> Mirror:
    """``dst`` made a mirror of ``user`` (breadth first: the top level is always whole),
    leaving out ``skip`` (the scale test's run directory, when it lies in ``user``)."""
    dst.mkdir(parents=True)
    made, budget = Mirror(), _Budget()
    queue = deque([(user, dst)])
    while queue:
        src, here = queue.popleft()
        names = _listing(src, None if here == dst or _holds(src, skip) else budget)
        if names is None:  # too many entries or out of time: the folder is linked whole
            here.rmdir()
            here.symlink_to(src)
            made.linked += 1
            continue
        for name in names:
            _place(src / name, here / name, skip, budget, queue, made)
    return made


def _holds(folder: Path, skip: Path | None) -> bool:
    """``skip`` lies inside ``folder``: it must be mirrored entry by entry to leave it out."""
    return skip is not None and folder in skip.parents


def _listing(src: Path, budget: _Budget | None) -> list[str] | None:
    """The folder's names, or None when they do not fit the budget."""
    try:
        names = sorted(os.listdir(src))
    except OSError:
        return None if budget is not None else []
    if budget is None:
        return names
    if len(names) > budget.entries or time.monotonic() > budget.deadline:
        return None
    budget.entries -= len(names)
    return names


def _place(src: Path, dst: Path, skip: Path | None, budget: _Budget, queue: deque,
           made: Mirror) -> None:
    if src == skip:
        return
    try:
        st = src.lstat()
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        dst.mkdir()
        queue.append((src, dst))
        return
    if stat.S_ISREG(st.st_mode) and st.st_size <= min(COPY_MAX_BYTES, budget.copy_bytes):
        try:
            shutil.copy2(src, dst, follow_symlinks=False)
            budget.copy_bytes -= st.st_size
            made.copied += 1
            return
        except OSError:  # unreadable: a link keeps it as the user has it
            dst.unlink(missing_ok=True)
    dst.symlink_to(src)  # a link of the user's is linked to, so it resolves as theirs
    made.linked += 1


@dataclass(frozen=True)
class Tree:
    """A snapshot: relative path -> (mtime in ns, size) of every file and link under a
    folder, links not followed. ``complete`` is False when the walk stopped at its bounds."""

    files: dict[str, tuple[int, int]]
    complete: bool


def snapshot(root: Path, skip: Path | None = None, limit: int = SNAPSHOT_ENTRIES,
             seconds: float = SNAPSHOT_S) -> Tree:
    """Breadth first, so that the top level, where a job's outputs usually land, is
    always seen."""
    files: dict[str, tuple[int, int]] = {}
    queue, seen, deadline = deque([root]), 0, time.monotonic() + seconds
    while queue:
        folder = queue.popleft()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit or time.monotonic() > deadline:
                return Tree(files, False)
            _record(entry, root, skip, files, queue)
    return Tree(files, True)


def _record(entry: os.DirEntry, root: Path, skip: Path | None, files: dict,
            queue: deque) -> None:
    path = Path(entry.path)
    if path == skip:
        return
    try:
        if entry.is_dir(follow_symlinks=False):
            queue.append(path)
            return
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return
    files[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size)


@dataclass(frozen=True)
class Changes:
    """What changed in a folder between two snapshots (paths relative to it)."""

    created: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    complete: bool = True

    @property
    def any(self) -> bool:
        return bool(self.created or self.modified or self.removed)

    def to_json(self) -> dict:
        return {"created": list(self.created[:LISTED]), "modified": list(self.modified[:LISTED]),
                "removed": list(self.removed[:LISTED]),
                "counts": {"created": len(self.created), "modified": len(self.modified),
                           "removed": len(self.removed)},
                "complete": self.complete}


def changes(before: Tree, after: Tree, since_ns: int) -> Changes:
    """A path absent before is new when the first walk saw everything, or when its mtime
    is after ``since_ns`` (the stage's start): a bounded first walk may have missed it.
    A path absent after is removed only when the second walk saw everything."""
    new = [p for p, (mtime, _) in after.files.items() if p not in before.files
           and (before.complete or mtime >= since_ns)]
    gone = [p for p in before.files if p not in after.files] if after.complete else []
    changed = [p for p, v in after.files.items() if p in before.files and before.files[p] != v]
    return Changes(tuple(sorted(new)), tuple(sorted(changed)), tuple(sorted(gone)),
                   before.complete and after.complete)


@dataclass(frozen=True)
class StageFiles:
    """What a stage's command wrote: in the folder it ran in, and (when that was a
    mirror) in the user's own directory, through a link or by an absolute path."""

    cwd: Path
    wrote: Changes
    in_yours: Changes | None = None
    """None when the stage ran in the user's directory (``wrote`` is that)."""

    def to_json(self) -> dict:
        return {"cwd": str(self.cwd), **self.wrote.to_json(),
                "in_your_directory": self.in_yours.to_json() if self.in_yours else None}


@dataclass
class StageCwd:
    """A stage's working directory, prepared, with the snapshots taken before it ran."""

    path: Path
    user: Path
    skip: Path
    before: Tree
    user_before: Tree | None
    started_ns: int
    mirror: Mirror | None

    def finish(self) -> StageFiles:
        """The snapshots after the stage, against those before it."""
        wrote = changes(self.before, snapshot(self.path, self.skip), self.started_ns)
        yours = None
        if self.user_before is not None:
            yours = changes(self.user_before, snapshot(self.user, self.skip), self.started_ns)
        return StageFiles(self.path, wrote, yours)


def prepare(user: Path, out: Path, stage: int, shared: bool) -> StageCwd:
    """The stage's working directory: the user's (``shared``), or a fresh mirror of it
    beside the stage's run directory. The run directory is left out of both."""
    user, skip = user.resolve(), out.resolve()
    path = user if shared else mirror_path(skip, stage)
    made = None if shared else make_mirror(user, path, skip)
    return StageCwd(path, user, skip, snapshot(path, skip),
                    None if shared else snapshot(user, skip), time.time_ns(), made)


def isolation(user: Path, out: Path, shared: bool) -> dict:
    """How a command's stages were kept apart (``isolation`` in scale-test.json)."""
    if shared:
        return {"mode": "shared", "cwd": str(user),
                "how": f"every stage ran in {user} (--shared-cwd): each saw what the earlier "
                       "ones wrote there"}
    where = f"{out}/stage-<n>-cwd"
    return {"mode": "mirror", "cwd": str(user), "stage_cwd": where,
            "how": f"each stage ran in a mirror of {user} of its own ({where}): "
                   f"folders made anew, regular files up to {COPY_MAX_BYTES >> 20} MiB copied, "
                   f"larger files and folders past {MIRROR_ENTRIES} entries linked; what a "
                   "stage writes lands in its mirror, and a change that reached your "
                   "directory through a link is reported (--shared-cwd: all in yours)"}


def names(paths: tuple[str, ...], most: int = 3) -> str:
    """'a, b, c and 4 more'."""
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def notes(stage: int, files: StageFiles) -> tuple[list[str], list[str]]:
    """What a stage wrote, in sentences: where it ran, and any change to the user's
    directory (``warnings``: the second list)."""
    said, warn = [], []
    w = files.wrote
    partial = "" if w.complete else (f" (the snapshot stopped at {SNAPSHOT_ENTRIES} entries or "
                                     f"{SNAPSHOT_S:.0f} s: it may have written more)")
    shared = files.in_yours is None
    if w.created or w.modified:
        where = (f"in your directory {files.cwd} (--shared-cwd: the stages after it saw it, "
                 "and it stays there)" if shared else f"in {files.cwd}")
        (warn if shared else said).append(
            f"stage {stage} wrote {names(w.created + w.modified)} {where}{partial}")
    if not shared and w.modified:  # a copy of the user's file: every stage starts from it
        warn.append(f"stage {stage} rewrote {names(w.modified)}, its copy of a file in your "
                    "directory: a job that resumes from a checkpoint it finds there resumed "
                    "from yours, at every stage")
    if shared and w.removed:
        warn.append(f"stage {stage} removed {names(w.removed)} from your directory {files.cwd}")
    yours = files.in_yours
    if yours is not None and yours.any:
        what = "; ".join(f"{kind} {names(p)}" for kind, p in
                         (("created", yours.created), ("changed", yours.modified),
                          ("removed", yours.removed)) if p)
        warn.append(f"stage {stage} changed your directory while it ran: {what} (through a "
                    "link to a large file or folder, by an absolute path, or another "
                    "process)")
    return said, warn
