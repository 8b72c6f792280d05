"""Whether a pid that a heartbeat names is verifiably a rank of this run, on this host.

``ddiag watch`` runs as root and signals and traces the pids that heartbeats name, and a
heartbeat is just a file in the run directory. So before any signal or ptrace the pid is
checked where it lives: here, or on the rank's node, where this file's source runs as
``python -c SOURCE RUN_DIR RANK PID STARTED CMD...`` (hence the standard library only).
"""

from __future__ import annotations

import os
import socket
import sys

REFUSED_EXIT = 86  # the on-node check refused; apart from any exit status of CMD
START_SLACK_S = 5.0  # /proc's boot time is whole seconds, and the wall clock may step


def why_not_rank(run_dir: str, rank: int, pid, started: float | None) -> str | None:
    """None when ``pid`` is rank ``rank`` of the run in ``run_dir``; else why not.

    A rank is one live process (not a group, not init, not this process) that began no
    later than its heartbeat says it did (``started``; later means a reused pid), that
    writes the rank's event log or was started with DDIAG_RUN_DIR naming the run and
    RANK=rank, and whose parent does not write that log (a forked DataLoader worker
    inherits the descriptor).
    """
    if type(pid) is not int or pid <= 1:
        return f"pid {pid!r} is not one process (a rank's pid is an integer > 1)"
    if pid == os.getpid():
        return f"pid {pid} is ddiag watch itself"
    stat = proc_stat(pid)
    if stat is None or stat[0] in "ZXx":
        return f"pid {pid}: no live process of that pid on {socket.gethostname()}"
    begun = _start_time(stat)
    if started is not None and begun > started + START_SLACK_S:
        return (f"pid {pid} started at {begun:.0f}, after rank {rank}'s heartbeat says it "
                f"started ({started:.0f}): the pid was reused")
    try:
        if not _tied(pid, run_dir, rank):
            return (f"pid {pid} ({_comm(pid)}) neither writes {_events(run_dir, rank)} nor "
                    f"was started with DDIAG_RUN_DIR={run_dir} and RANK={rank}: not a "
                    "rank of this run")
    except PermissionError:
        return (f"pid {pid}: no right to read /proc/{pid} to check it is rank {rank}; run "
                "ddiag watch as root or as the job's user")
    if _parent_writes(int(stat[1]), run_dir, rank):
        return f"pid {pid} is a fork of rank {rank} (pid {stat[1]}), not the rank"
    return None


def start_ticks(pid: int) -> str | None:
    """When ``pid`` began, in clock ticks since boot: the same value means the same
    process (a reused pid began later)."""
    stat = proc_stat(pid)
    return stat[19] if stat else None


def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat from the state on (the name before it may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(stat: list[str]) -> float:
    with open("/proc/stat") as fh:
        btime = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
    return btime + int(stat[19]) / os.sysconf("SC_CLK_TCK")


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return "?"


def _events(run_dir: str, rank: int) -> str:
    # diag.format.rundir's layout, spelled out: this file runs on nodes without ddiag's imports.
    return os.path.join(run_dir, "events", f"rank{rank:05d}.jsonl")


def _tied(pid: int, run_dir: str, rank: int) -> bool:
    return _writes(pid, _events(run_dir, rank)) or _started_for(pid, run_dir, rank)


def _parent_writes(ppid: int, run_dir: str, rank: int) -> bool:
    """Whether the parent writes the rank's log: then ``pid`` is a fork of the rank that
    inherited the descriptor (a DataLoader worker). Only the log counts here: a wrapper
    shell may well have been started with the rank's DDIAG_RUN_DIR and RANK."""
    if ppid <= 1:
        return False
    try:
        return _writes(ppid, _events(run_dir, rank))
    except PermissionError:  # a parent we may not read is not one of the job's ranks
        return False


def _writes(pid: int, events: str) -> bool:
    """Whether ``pid`` holds ``events`` open for writing, as the rank's log writer does
    (a reader such as ``tail -f`` does not count)."""
    try:
        want = os.stat(events)
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
            if (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino) and _for_writing(pid, fd):
                return True
        except PermissionError:
            raise
        except OSError:  # closed since the listing
            continue
    return False


def _for_writing(pid: int, fd: str) -> bool:
    with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
        flags = next(int(line.split()[1], 8) for line in fh if line.startswith("flags:"))
    return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)


def _started_for(pid: int, run_dir: str, rank: int) -> bool:
    """Whether ``pid`` was started with DDIAG_RUN_DIR naming ``run_dir`` (relative to
    its own working directory) and RANK=rank."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except FileNotFoundError:
        return False
    named = env.get(b"DDIAG_RUN_DIR")
    if not named or env.get(b"RANK") != str(rank).encode():
        return False
    try:
        return os.path.samefile(os.path.join(cwd, os.fsdecode(named)), run_dir)
    except OSError:
        return False


def main(argv: list[str]) -> int:
    """``RUN_DIR RANK PID STARTED CMD...``: check the pid, then become CMD."""
    run_dir, rank, pid, started, *cmd = argv
    try:
        number = int(pid)
    except ValueError:
        number = None
    reason = why_not_rank(run_dir, int(rank), number, None if started == "-" else float(started))
    if reason:
        print(f"refused: {reason}", file=sys.stderr)
        return REFUSED_EXIT
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
