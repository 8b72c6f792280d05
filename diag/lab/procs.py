"""Finding and stopping the lab's processes, and nothing else's.

A process belongs to a lab when its command line names a path in the lab's state dir
(munged, slurmctld, slurmd all do), when it lives in one of the lab's network namespaces
(job steps, tasks, tools run on a node), when it descends from one of those, or when it
is a Slurm client (srun, salloc...) whose SLURM_CONF is the lab's.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from diag import launch

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    argv: tuple[str, ...]
    netns_inode: int | None
    zombie: bool


def read_proc(pid: int) -> ProcInfo | None:
    """One process as /proc shows it, or None if it is gone (or exits while we look)."""
    base = PROC / str(pid)
    try:
        stat = (base / "stat").read_text()
        argv = tuple(a for a in (base / "cmdline").read_bytes().decode(errors="replace")
                     .split("\0") if a)
        inode = _inode(base / "ns" / "net")
    except OSError:
        return None
    # The command name in stat may hold spaces or ')': the fields start after the last ')'.
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return ProcInfo(pid=pid, ppid=int(ppid), argv=argv, netns_inode=inode, zombie=state == "Z")


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def all_procs() -> list[ProcInfo]:
    infos = (read_proc(int(p.name)) for p in PROC.iterdir() if p.name.isdigit())
    return [info for info in infos if info is not None]


def names_dir(argv: tuple[str, ...], root: Path) -> bool:
    """Whether any argument is ``root`` or a path (or ``--opt=path``) under it."""
    text = str(root)
    for arg in argv:
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        if value == text or value.startswith(text + "/"):
            return True
    return False


def select(procs: list[ProcInfo], state_dir: Path, netns_inodes: set[int]) -> list[int]:
    """Pids of the lab's live processes among ``procs`` (pure: unit-testable)."""
    mine = {p.pid for p in procs if not p.zombie and (
        names_dir(p.argv, state_dir) or p.netns_inode in netns_inodes)}
    children: dict[int, list[int]] = {}
    for p in procs:
        if not p.zombie:
            children.setdefault(p.ppid, []).append(p.pid)
    todo = list(mine)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in mine:
                mine.add(child)
                todo.append(child)
    return sorted(mine - {os.getpid(), os.getppid()})


SLURM_CLIENTS = frozenset({"srun", "salloc", "sbatch", "sattach", "squeue", "sinfo",
                           "scontrol", "scancel", "sstat"})


def is_lab_client(argv: tuple[str, ...], environ: bytes, slurm_conf: Path) -> bool:
    """A Slurm client (srun...) talking to this lab: once the lab is gone it would hang,
    ignoring SIGTERM. Only client binaries: a shell that ran ``eval "$(ddiag lab env)"``
    has the same SLURM_CONF and must be left alone."""
    if not argv or Path(argv[0]).name not in SLURM_CLIENTS:
        return False
    return f"SLURM_CONF={slurm_conf}".encode() in environ.split(b"\0")


def lab_clients(procs: list[ProcInfo], slurm_conf: Path) -> list[int]:
    pids = []
    for p in procs:
        if p.argv and Path(p.argv[0]).name in SLURM_CLIENTS and not p.zombie:
            try:
                environ = (PROC / str(p.pid) / "environ").read_bytes()
            except OSError:
                continue
            if is_lab_client(p.argv, environ, slurm_conf):
                pids.append(p.pid)
    return pids


def lab_pids(state_dir: Path, netns_inodes: set[int]) -> list[int]:
    procs = all_procs()
    found = select(procs, state_dir, netns_inodes)
    return sorted(set(found) | set(lab_clients(procs, state_dir / "slurm.conf")))


def alive(pid: int) -> bool:
    """Running and not a zombie (an exited daemon lingers as one until init reaps it)."""
    info = read_proc(pid)
    return info is not None and not info.zombie


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def wait_reaped(pids: list[int], timeout: float) -> None:
    """Wait for dead daemons to leave /proc: their parent is init, which reaps them a second
    or two later; until then `pgrep` still lists them (as <defunct>)."""
    deadline = time.monotonic() + timeout
    while any((PROC / str(p)).exists() for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop(pids: list[int], grace_s: float = 5.0) -> list[int]:
    """SIGTERM, then SIGKILL what is still running after ``grace_s``; return survivors."""
    left = list(pids)

    def ended(seconds: float | None) -> bool:
        nonlocal left
        left = wait_gone(left, seconds)
        return not left

    launch.stop(lambda signum: signal_all(left, signum), ended, grace_s, kill_wait_s=2.0)
    wait_reaped([p for p in pids if p not in left], 5.0)
    return left
