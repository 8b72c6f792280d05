"""The ranks of a job that imports nothing of ddiag, found from one pid of it.

A launcher (torchrun's agent, ``python -m torch.distributed.launch``, accelerate,
deepspeed, mpirun, srun's step) gives every rank process ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE`` in its environment; torch.distributed reads them there. So the ranks under
a pid are its descendants (or itself) whose environment holds those three as integers.
A DataLoader worker or any other fork of a rank inherits the same environment: of a chain
of processes with the same ``RANK``, only the topmost is the rank.

This is the verification for jobs without heartbeats: a pid is acted on (traced, signalled)
only when it is such a descendant of the pid the user named, and only while it is the same
process (same start time) as when it was found.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from diag.watch.verify import proc_stat

MAX_PROCESSES = 65_536  # /proc entries read per scan: bounds a scan on a crowded host
MAX_ENVIRON_BYTES = 1 << 20
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class RankProcess:
    """One rank process of the job, as its environment and /proc describe it."""

    pid: int
    rank: int
    local_rank: int
    world_size: int
    started: str  # start time in clock ticks since boot: the same value, the same process
    host: str
    cmdline: str

    def to_json(self) -> dict:
        return {"pid": self.pid, "rank": self.rank, "local_rank": self.local_rank,
                "world_size": self.world_size, "host": self.host, "cmdline": self.cmdline,
                "started": self.started}


class NoSuchProcess(Exception):
    pass


def ranks_under(pid: int) -> list[RankProcess]:
    """The rank processes at or under ``pid``, by rank. Raises NoSuchProcess when ``pid``
    is not a live process here."""
    if type(pid) is not int or pid <= 1:
        raise NoSuchProcess(f"pid {pid!r}: give one process (an integer > 1)")
    if proc_stat(pid) is None:
        raise NoSuchProcess(f"pid {pid}: no such process on {socket.gethostname()}")
    children = _children()
    found, todo = [], [(pid, None)]
    while todo and len(found) < MAX_PROCESSES:
        proc, parent_rank = todo.pop()
        env = rank_env(proc)
        rank = env.get("RANK") if env else None
        if env and rank != parent_rank:  # a fork of a rank carries the rank's RANK
            found.append(_process(proc, env))
        todo += [(child, rank if rank is not None else parent_rank)
                 for child in children.get(proc, ())]
    return sorted(found, key=lambda p: (p.rank, p.pid))


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (children, their children, ...), from one /proc scan."""
    children = _children()
    out, todo = [], list(children.get(pid, ()))
    while todo and len(out) < MAX_PROCESSES:
        proc = todo.pop()
        out.append(proc)
        todo += children.get(proc, ())
    return out


def ranks_in(pids: set[int]) -> list[RankProcess]:
    """The rank processes among ``pids`` (e.g. what Slurm says a job runs on this node):
    those with a rank environment whose parent does not carry the same RANK (a fork)."""
    found = []
    for pid in sorted(pids)[:MAX_PROCESSES]:
        env = rank_env(pid)
        stat = proc_stat(pid)
        if not env or stat is None:
            continue
        parent = rank_env(int(stat[1]))
        if parent and parent["RANK"] == env["RANK"]:
            continue
        found.append(_process(pid, env))
    return sorted(found, key=lambda p: (p.rank, p.pid))


def rank_env(pid: int) -> dict[str, int] | None:
    """RANK, LOCAL_RANK and WORLD_SIZE of ``pid`` when all three are integers, else None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read(MAX_ENVIRON_BYTES)
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key.decode("ascii", "replace") in RANK_VARS:
            try:
                env[key.decode()] = int(value)
            except ValueError:
                return None
    return env if len(env) == len(RANK_VARS) and env["RANK"] >= 0 else None


def still_rank(proc: RankProcess) -> bool:
    """Whether ``proc`` is still the same live process with the same rank: checked again
    right before it is traced or signalled (its pid may have been reused since)."""
    stat = proc_stat(proc.pid)
    if stat is None or stat[0] in "ZXx" or stat[19] != proc.started:
        return False
    env = rank_env(proc.pid)
    return bool(env) and env["RANK"] == proc.rank


def cwd(pid: int) -> str:
    """The working directory of ``pid`` ("" when unreadable): a relative script path in its
    command line is relative to it."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _process(pid: int, env: dict[str, int]) -> RankProcess:
    stat = proc_stat(pid) or ["?"] * 20
    return RankProcess(pid, env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], stat[19],
                       socket.gethostname(), _cmdline(pid))


def _children() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, from one scan of /proc."""
    out: dict[int, list[int]] = {}
    for n, name in enumerate(os.listdir("/proc")):
        if n >= MAX_PROCESSES:
            break
        if not name.isdigit():
            continue
        stat = proc_stat(int(name))
        if stat is not None:
            out.setdefault(int(stat[1]), []).append(int(name))
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""
