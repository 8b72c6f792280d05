"""Many ranks' stacks at one moment, grouped: who is somewhere else.

The manual step every hang investigation starts with is "py-spy every rank and see which
one is not where the others are". Here the main thread's stack of each rank is reduced to
its frames (innermost first), ranks with the same frames form a group, and each group gets
the *state* its innermost frames show:

- ``collective``: in a frame that issues or waits on a collective (a collective, a
  barrier, a p2p send/recv, a store wait, a work's wait; DDP's buffer broadcast, FSDP's
  gathers, a pipeline stage's p2p, DeepSpeed's, Megatron's and Accelerate's wrappers), as
  ``catalog/collective_frames.tsv`` lists them: waiting on other ranks;
- ``backward``: in the autograd engine, where DDP's and FSDP's gradient all_reduces are
  issued and waited on: a rank blocked there with the others in a collective waits too;
- ``data``: in a DataLoader's queue get or a worker's result: waiting on its own input;
- ``io``: sleeping, reading or writing files, sockets or subprocesses;
- ``compute``: anything else (the rank is busy in its own code).

The odd ones out are the ranks not in the largest waiting group: when most ranks wait in
a collective and some do not, those are the culprits (``rank_hang``); when they wait in a
*different* collective, the ranks disagree on the sequence (``collective_mismatch``).
Pure: no I/O; the loaders build the stacks (py-spy JSON, py-spy text, faulthandler).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diag.analyze.catalog import collective_frames
from diag.verdict import Category, Culprit, Evidence, Finding, Severity

MAX_FRAMES = 64  # frames per stack kept for grouping (innermost first)
WAITING = ("collective", "backward")
_LIBRARY_PATHS = ("/lib/python", "site-packages", "dist-packages", "<frozen", "/torch/",
                  "<built-in>")
# packages whose frames py-spy's text dump shows by a relative path ("torch/distributed/...")
_LIBRARY_PREFIXES = ("torch/", "deepspeed/", "transformers/", "accelerate/", "megatron/",
                     "lightning/", "pytorch_lightning/", "numpy/", "multiprocessing/",
                     "concurrent/", "asyncio/")
# Python's own modules a blocked thread sits in, as py-spy's text dump names them (no folder)
_STDLIB_FILES = frozenset({"threading.py", "queue.py", "selectors.py", "socket.py",
                           "subprocess.py", "connection.py", "queues.py", "synchronize.py",
                           "_base.py", "thread.py", "base_events.py", "locks.py", "tasks.py",
                           "time.py", "ssl.py", "popen_fork.py", "pool.py", "process.py"})


@dataclass(frozen=True)
class Frame:
    func: str
    file: str
    line: int | None = None
    at: int | None = field(default=None, compare=False)  # its line in a text log, if any

    @property
    def user(self) -> bool:
        """The user's own code: not the standard library, not an installed package."""
        path = self.file.replace("\\", "/")
        return bool(path) and not (any(p in path for p in _LIBRARY_PATHS)
                                   or path.startswith(_LIBRARY_PREFIXES)
                                   or path in _STDLIB_FILES or path.startswith("<"))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{self.func} ({where})" + (" <- user code" if self.user else "")


@dataclass(frozen=True)
class Stack:
    """One rank's main-thread stack; ``source`` is the dump's file (and line, for text)."""

    rank: int | None
    frames: tuple[Frame, ...]
    source: str = ""
    line: int | None = None
    host: str | None = None
    pid: int | None = None


@dataclass
class Group:
    frames: tuple[Frame, ...]
    state: str
    at: Frame | None  # the frame that shows the state
    stacks: list[Stack] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted(s.rank for s in self.stacks if s.rank is not None)

    def to_json(self) -> dict:
        return {"ranks": self.ranks, "size": len(self.stacks), "state": self.state,
                "at": str(self.at) if self.at else None,
                "frames": [str(f) for f in self.frames[:12]]}


# ---------------------------------------------------------------------------------------
# states

_BACKWARD_FUNCS = ("_engine_run_backward", "run_backward", "backward")
_DATA = ("torch/utils/data/", "_try_get_data", "_get_data", "_next_data")
_QUEUE_FILES = ("multiprocessing/queues.py", "multiprocessing/connection.py", "/queue.py")
_IO_FUNCS = frozenset({"sleep", "read", "readinto", "recv_into", "write", "select", "poll",
                       "accept", "communicate", "wait", "_wait_for_tstate_lock", "flush",
                       "fsync", "save", "load"})


def state_of(frames: tuple[Frame, ...]) -> tuple[str, Frame | None]:
    """What a stack is doing, and the frame that shows it (see the module docstring)."""
    for f in frames:
        path = f.file.replace("\\", "/")
        if any(d in path or d == f.func for d in _DATA):
            return "data", f
        if collective_frames.lookup(path, f.func):
            return "collective", f
        if f.func in _BACKWARD_FUNCS and "autograd" in path or f.func == "_engine_run_backward":
            return "backward", f
        if any(q in path for q in _QUEUE_FILES):
            continue  # a queue get: the frame that called it says whose queue
        if f.user:
            break
    head = frames[0] if frames else None
    if head is not None and (head.func in _IO_FUNCS or head.func.endswith((".sleep", ".read"))):
        return "io", head
    return "compute", next((f for f in frames if f.user), head)


# ---------------------------------------------------------------------------------------
# groups


def group(stacks: list[Stack]) -> list[Group]:
    """Ranks in the same place together, largest group first (then lowest rank). The same
    place: the same functions of the same files from the innermost frame down to the first
    frame of the user's code (line numbers aside: one wait, however reached inside a
    library; the user's frame tells call sites apart)."""
    by_key: dict[tuple, Group] = {}
    for stack in stacks:
        key = place(stack.frames)
        if key not in by_key:
            state, at = state_of(stack.frames)
            by_key[key] = Group(stack.frames, state, at)
        by_key[key].stacks.append(stack)
    return sorted(by_key.values(), key=lambda g: (-len(g.stacks), g.ranks[:1] or [1 << 30]))


def place(frames: tuple[Frame, ...]) -> tuple:
    key = []
    for f in frames[:MAX_FRAMES]:
        key.append((f.func, f.file.replace("\\", "/").rsplit("/", 1)[-1]))
        if f.user:
            break
    return tuple(key)


def odd_ones(groups: list[Group]) -> Finding | None:
    """The ranks somewhere else than the waiting majority, as a finding; None when every
    rank is in one place, no group waits on the others, there is no majority (three or
    more stacks, all different), or too many are elsewhere to name (over a third)."""
    if len(groups) < 2:
        return None
    waiting = [g for g in groups if g.state in WAITING]
    if not waiting:
        return None
    total = sum(len(g.stacks) for g in groups)
    main = max(waiting, key=lambda g: len(g.stacks))
    if total > 2 and len(main.stacks) == 1:
        return None
    others = [g for g in groups if g is not main]
    if total > 2 and sum(len(g.stacks) for g in others) > max(1, total // 3):
        return None
    stray = [g for g in others if g.state not in WAITING]
    if stray:
        return _hang(main, stray, total)
    elsewhere = [g for g in others if g.state == "collective" and g.at and main.at
                 and g.at.func != main.at.func]
    if main.state == "collective" and elsewhere:
        return _mismatch(main, elsewhere)
    return None  # the same wait reached from elsewhere: nothing says which side is wrong


def _hang(main: Group, stray: list[Group], total: int) -> Finding:
    culprits = [s for g in stray for s in g.stacks]
    ranks = sorted(s.rank for s in culprits if s.rank is not None)
    first = stray[0]
    who = _who(first)
    title = (f"{who} is in {_where(first)} ({first.state}) while {_count(main)} "
             f"wait in {_where(main)}")
    sure = 0.85 if len(main.stacks) > len(culprits) else 0.65  # a 1:1 tie rests on the states
    return Finding(Category.RANK_HANG, Severity.CRITICAL, sure, title,
                   Culprit(tuple(ranks), _hosts(culprits)), _evidence(first, main),
                   _HANG_FIX[first.state], "stacks", True, None,
                   {"groups": [g.to_json() for g in [main, *stray]], "ranks_seen": total})


def _mismatch(main: Group, others: list[Group]) -> Finding:
    culprits = [s for g in others for s in g.stacks]
    ranks = sorted(s.rank for s in culprits if s.rank is not None)
    title = (f"{_who(others[0])} waits in {_where(others[0])} while {_count(main)} wait in "
             f"{_where(main)}: the ranks issued different collectives")
    sure = 0.75 if len(main.stacks) > len(culprits) else 0.55
    return Finding(Category.COLLECTIVE_MISMATCH, Severity.CRITICAL, sure, title,
                   Culprit(tuple(ranks), _hosts(culprits)), _evidence(others[0], main),
                   _MISMATCH_FIX, "stacks", True, None,
                   {"groups": [g.to_json() for g in [main, *others]]})


_HANG_FIX = {
    "data": ("that rank waits on its own DataLoader: a worker is stuck (I/O on a network "
             "filesystem, a deadlocked worker, an exhausted or unevenly sharded dataset). "
             "py-spy dump its DataLoader worker processes; check that every rank gets the "
             "same number of batches (DistributedSampler, drop_last)"),
    "io": ("that rank is blocked on I/O or sleeping (a checkpoint write, a download, a "
           "lock): do such work on every rank or before the collectives, or raise the "
           "process-group timeout if it is legitimate"),
    "compute": ("that rank is busy in its own code while the others wait: a rank-only "
                "branch (evaluation, logging, saving on rank 0) or a slow step; make every "
                "rank reach the collective, or move the work outside the training loop"),
}
_MISMATCH_FIX = ("every rank must issue the same collectives in the same order: look for a "
                 "collective inside a rank-dependent branch or a data-dependent loop")


def _where(g: Group) -> str:
    return f"{g.at.func} ({_short(g.at.file)}:{g.at.line})" if g.at else "?"


def _short(path: str) -> str:
    return "/".join(path.replace("\\", "/").split("/")[-2:])


def _who(g: Group) -> str:
    ranks = g.ranks
    if not ranks:
        return f"{len(g.stacks)} process(es)"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks[:8])) + \
        (" ..." if len(ranks) > 8 else "")


def _count(g: Group) -> str:
    return _who(g) if len(g.stacks) <= 3 else f"{len(g.stacks)} ranks"


def _hosts(stacks: list[Stack]) -> tuple[str, ...]:
    return tuple(sorted({s.host for s in stacks if s.host}))


def _evidence(odd: Group, main: Group) -> tuple[Evidence, ...]:
    out = []
    for g in (odd, main):
        s = g.stacks[0]
        shown = list(g.frames[:3])
        user = next((f for f in g.frames if f.user), None)
        if user is not None and user not in shown:
            shown.append(user)
        who = f"rank {s.rank}" if s.rank is not None else f"pid {s.pid}" if s.pid else "process"
        out += [Evidence(s.source, f.at if f.at is not None else s.line, f"{who}: {f}")
                for f in shown]
    return tuple(out)


# ---------------------------------------------------------------------------------------
# loaders' shapes


def from_pyspy(doc, rank: int | None, source: str, host: str | None = None) -> Stack | None:
    """The main thread of a ``py-spy dump --json`` document (a list of threads)."""
    threads = [t for t in (doc if isinstance(doc, list) else [doc]) if isinstance(t, dict)]
    if not threads:
        return None
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0])
    frames = tuple(Frame(str(f.get("name", "?")), str(f.get("filename", "")),
                         f.get("line") if type(f.get("line")) is int else None)
                   for f in main.get("frames", []) if isinstance(f, dict))
    pid = main.get("pid") if type(main.get("pid")) is int else None
    return Stack(rank, frames[:MAX_FRAMES], source, None, host, pid)
