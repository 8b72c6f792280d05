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
- ``io``: sleeping, reading or writing files, sockets or subprocesses (also a stack that
  ends in the user's code while py-spy says the thread is idle: a C call of its own);
- ``compute``: anything else (the rank is busy in its own code).

The verdict (``verdict``): when some ranks wait in a collective and a minority does not,
that minority is the culprit (``rank_hang``); when every rank waits but in *different*
collectives, the ranks disagree on the sequence (``collective_mismatch``), and the culprit
is the side the others never reach: the minority, or, with no majority, the side further
off the training loop's path (``ROLES``: a control collective before one the user's code
called, before DDP's or FSDP's own). Every rank in one collective is a note, naming no rank.
Pure: no I/O; the loaders build the stacks (py-spy JSON, py-spy text, faulthandler).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from diag.analyze.catalog import collective_frames
from diag.verdict import CONFIDENCE, Basis, Category, Culprit, Evidence, Finding, Severity

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
    # py-spy's "active": False when the thread sleeps in the kernel (a C call py-spy cannot
    # name: time.sleep, a file write, a lock); None when the dump does not say
    idle: bool | None = field(default=None, compare=False)


@dataclass
class Group:
    frames: tuple[Frame, ...]
    state: str
    at: Frame | None  # the frame that shows the state
    stacks: list[Stack] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted(s.rank for s in self.stacks if s.rank is not None)

    @property
    def user(self) -> Frame | None:
        """The innermost frame of the user's own code: where in the training script."""
        return next((f for f in self.frames if f.user), None)

    def to_json(self) -> dict:
        return {"ranks": self.ranks, "size": len(self.stacks), "state": self.state,
                "at": str(self.at) if self.at else None,
                "user_frame": str(self.user) if self.user else None,
                "role": role_of(self.frames)[0] if self.state in WAITING else None,
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
            if state == "compute" and stack.idle:  # in a C call of its own code: blocked
                state = "io"
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


# ---------------------------------------------------------------------------------------
# verdicts

ROLES = ("training", "issued", "control")
"""Who issued the collective a waiting rank is in, from the least to the most likely to be
one the other ranks never reach: the training loop's own (DDP's gradient all_reduce in
backward and buffer broadcast in forward, FSDP's, ZeRO's and Megatron's gathers and
reductions: every rank reaches them every step), one the user's code called itself (an
all_reduce of a metric), and a control collective (a barrier, an object collective, a
group's creation, a store wait, init_process_group): what a rank-conditional branch adds."""
_CONTROL_KINDS = collective_frames.CONTROL_KINDS | {"store", "init"}
# the frameworks that issue the training loop's collectives from forward, backward or step
_TRAINING_PATHS = ("torch/nn/parallel/", "torch/distributed/fsdp/",
                   "torch/distributed/_composable/", "torch/distributed/pipelining/",
                   "torch/distributed/algorithms/", "torch/autograd/", "deepspeed/runtime/",
                   "megatron/core/")
_ROLE_TEXT = {"control": "a control collective (a barrier, an object collective, a store "
                         "wait)",
              "issued": "a collective its own code called",
              "training": "the training loop's own (DDP/FSDP in forward or backward), which "
                          "every rank reaches each step"}


def role_of(frames: tuple[Frame, ...]) -> tuple[str, Frame | None]:
    """Who issued the collective a waiting stack is in (one of ``ROLES``) and the frame that
    says so, looking outwards from the innermost frame up to the user's code."""
    training = None
    for f in frames:
        if f.user:
            break
        path = f.file.replace("\\", "/")
        hit = collective_frames.lookup(path, f.func)
        if hit is not None and hit.kind in _CONTROL_KINDS:
            return "control", f
        if training is None and any(p in path for p in _TRAINING_PATHS):
            training = f
    if training is not None:
        return "training", training
    return "issued", next((f for f in frames if f.user), None)


def verdict(groups: list[Group], missing: tuple[int, ...] = ()) -> Finding | None:
    """What a snapshot of the job's stacks says: the odd ones out (``odd_ones``), else a
    note when every rank waits in one collective (``stall``). ``missing``: ranks of the job
    whose stack is not among them."""
    found = odd_ones(groups)
    if found is None:
        return stall(groups, missing)
    if missing:
        found = replace(found, details={**found.details, "not_captured": list(missing)})
    return found


def odd_ones(groups: list[Group]) -> Finding | None:
    """The ranks somewhere else than the others, as a finding. Some ranks in data, io or
    compute while the others wait: those (``rank_hang``; None when no group waits, when
    three or more stacks are all different, or over a third are elsewhere). Every rank
    waiting, in different collectives: ``collective_mismatch`` (``_disagreement``)."""
    if len(groups) < 2:
        return None
    waiting = [g for g in groups if g.state in WAITING]
    if not waiting:
        return None
    if len(waiting) < len(groups):
        return _stray(groups, waiting)
    return _disagreement(waiting)


def _stray(groups: list[Group], waiting: list[Group]) -> Finding | None:
    total = _size(groups)
    # the first of equals: groups come largest first, then by lowest rank
    main = max(waiting, key=lambda g: len(g.stacks))
    others = [g for g in groups if g is not main]
    if total > 2 and (len(main.stacks) == 1 or _size(others) > max(1, total // 3)):
        return None
    return _hang(main, [g for g in others if g.state not in WAITING], total)


def _disagreement(waiting: list[Group]) -> Finding | None:
    """Every group waits: in one collective (whatever the call sites) nothing says which
    side is wrong, or the ranks are a moment apart; in different ones, the side the others
    never reach is the minority, or, with no majority, the one further off the training
    loop's path (``ROLES``)."""
    sides: dict[tuple, list[Group]] = {}
    for g in waiting:
        sides.setdefault(_collective(g), []).append(g)
    if len(sides) < 2:
        return None
    ranked = sorted(sides.values(), key=lambda side: -_size(side))
    if _size(ranked[0]) > _size(ranked[1]):
        return _mismatch(ranked[0], [g for side in ranked[1:] for g in side], "majority")
    roles = [ROLES.index(role_of(side[0].frames)[0]) for side in ranked]
    top = [side for side, r in zip(ranked, roles) if r == max(roles)]
    if len(top) > 1:
        return _mismatch([g for side in ranked for g in side], [], None)
    rest = [g for side in ranked if side is not top[0] for g in side]
    return _mismatch(rest, top[0], "role")


def _collective(g: Group) -> tuple:
    """Which collective a waiting group is in: its innermost collective frame (in backward:
    the autograd engine), whatever the call site."""
    if g.at is None:
        return (g.state,)
    return g.at.func, g.at.file.replace("\\", "/").rsplit("/", 1)[-1]


def stall(groups: list[Group], missing: tuple[int, ...] = ()) -> Finding | None:
    """Every captured rank waiting in one collective: no rank is elsewhere. One snapshot
    cannot tell a healthy job caught in a collective from a stalled one, so this is a note
    (INFO), naming no rank: if the ranks stay there, the job's communication stalled (the
    network, the collective library, a GPU), or a rank not captured holds them up."""
    if not groups or any(g.state not in WAITING for g in groups) \
            or len({_collective(g) for g in groups}) != 1:
        return None
    first, total = groups[0], _size(groups)
    if missing:
        title = (f"every captured rank ({total}) waits in {_where(first)}; not captured: "
                 f"{_ranks_text(list(missing))}, where the rank they wait for may be")
    else:
        title = (f"every rank ({total}) waits in {_where(first)}: no rank is elsewhere; if "
                 "they stay there, it is a stall of the job's communication, not one rank")
    return Finding(Category.OTHER, Severity.INFO, CONFIDENCE[Basis.HEURISTIC], title, Culprit(),
                   _evidence(first), _STALL_FIX, "stacks", False, None,
                   {"groups": [g.to_json() for g in groups], "not_captured": list(missing)},
                   Basis.HEURISTIC)


def _hang(main: Group, stray: list[Group], total: int) -> Finding:
    culprits = [s for g in stray for s in g.stacks]
    ranks = sorted(s.rank for s in culprits if s.rank is not None)
    first = stray[0]
    title = (f"{_who(first)} is in {_STATE_TEXT[first.state]} at {_where(first)}, while "
             f"{_count(main)} {_verb(main, 'wait')} in {_where(main)}")
    # the odd ones out of more; a 1:1 tie rests on what the states are
    sure = Basis.MINORITY if len(main.stacks) > len(culprits) else Basis.LINE
    return Finding(Category.RANK_HANG, Severity.CRITICAL, CONFIDENCE[sure], title,
                   Culprit(tuple(ranks), _hosts(culprits)), _evidence(first, main),
                   _HANG_FIX[first.state], "stacks", True, None,
                   {"groups": [g.to_json() for g in [main, *stray]], "ranks_seen": total,
                    "user_frame": _frame_json(first.user), "culprit_pids": _pids(culprits)},
                   sure)


def _mismatch(main: list[Group], culprit: list[Group], basis: str | None) -> Finding:
    """``main`` waits in one collective, ``culprit`` in another that ``main`` never reaches
    (decided by ``basis``: "majority" or "role"); no culprit when nothing decides."""
    stacks = [s for g in culprit for s in g.stacks]
    # undecided: ``main`` holds every side, in order; quote the first and the last
    odd, other = (culprit[0], main[0]) if culprit else (main[0], main[-1])
    role, role_other = role_of(odd.frames), role_of(other.frames)
    title = (f"{_who(odd)} {_verb(odd, 'wait')} in {_where(odd)} while {_count(other)} "
             f"{_verb(other, 'wait')} in {_where(other)}: the ranks issued different "
             f"collectives; {_decided(odd, role[0], other, role_other[0], basis)}")
    culprits = Culprit(tuple(sorted(s.rank for s in stacks if s.rank is not None)),
                       _hosts(stacks))
    details = {"groups": [g.to_json() for g in [*culprit, *main]], "decided_by": basis,
               "roles": {_who(odd): [role[0], str(role[1])],
                         _who(other): [role_other[0], str(role_other[1])]},
               "user_frame": _frame_json(odd.user) if culprit else None,
               "culprit_pids": _pids(stacks)}
    sure = _mismatch_basis(basis, role[0], role_other[0])
    return Finding(Category.COLLECTIVE_MISMATCH, Severity.CRITICAL, CONFIDENCE[sure], title,
                   culprits, _evidence(odd, other), _MISMATCH_FIX[role[0] if culprit else None],
                   "stacks", True, None, details, sure)


def _decided(odd: Group, role: str, other: Group, role_other: str, basis: str | None) -> str:
    if basis == "majority":
        return f"{_who(odd)} left the sequence the others follow"
    if basis == "role":
        return (f"{_who(odd)}'s is {_ROLE_TEXT[role]} and {_who(other)}'s "
                f"{_ROLE_TEXT[role_other]}: {_who(odd)} left the sequence")
    return "the frames do not say which side left the sequence"


def _mismatch_basis(basis: str | None, role: str, role_other: str) -> Basis:
    """A majority that agrees is the odd one out; the roles of the two frames alone (a
    barrier against training's collectives) are one reading of them; nothing else, a guess."""
    if basis == "majority":
        return Basis.MINORITY if ROLES.index(role) >= ROLES.index(role_other) else Basis.LINE
    if basis == "role" and (role, role_other) == ("control", "training"):
        return Basis.LINE
    return Basis.HEURISTIC


_STATE_TEXT = {"data": "data loading", "io": "I/O or a sleep (blocked outside the job)",
               "compute": "its own code"}
_TIMEOUT = ("the others' collective fails once the process-group timeout expires "
            "(init_process_group(timeout=...); 30 min by default for gloo, 10 min for NCCL; "
            "ddiag cannot read the job's own value from outside it)")
_HANG_FIX = {
    "data": ("that rank waits on its own DataLoader: a worker is stuck (I/O on a network "
             "filesystem, a deadlocked worker, an exhausted or unevenly sharded dataset). "
             "py-spy dump its DataLoader worker processes; check that every rank gets the "
             "same number of batches (DistributedSampler, drop_last); give the DataLoader a "
             "timeout= so that it raises"),
    "io": ("that rank is blocked on I/O or sleeping (a checkpoint write, a download, a "
           f"lock) while the others wait; {_TIMEOUT}. Do such work on every rank or outside "
           "the training step, or, if it is legitimate, raise the process-group timeout "
           "above its duration"),
    "compute": ("that rank is busy in its own code while the others wait: a rank-only "
                "branch (evaluation, logging, saving on rank 0) or a slow step; "
                f"{_TIMEOUT}. Make every rank reach the collective, move the work outside "
                "the training loop, or raise the timeout above its duration"),
}
_MISMATCH_FIX = {
    None: ("every rank must issue the same collectives in the same order: look for a "
           "collective inside a rank-dependent branch or a data-dependent loop"),
    "control": ("that rank is in a barrier or object collective the others never call: one "
                "inside `if rank == 0:` (after a save, a log, an evaluation) or an early exit "
                "on some ranks. Call it on every rank, outside the branch, or drop it"),
    "issued": ("that rank is in a collective its own code called where the others did not "
               "(an evaluation or metric all_reduce under `if rank == 0:`): every rank must "
               "call it, or none"),
    "training": ("that rank is in the training loop's collective while the others left the "
                 "loop's sequence: look for a collective inside a rank-dependent branch or "
                 "uneven batches per rank (DistributedSampler, drop_last)"),
}
_STALL_FIX = ("take another snapshot in a few seconds: if every rank is still there, no rank "
              "holds the others up from its own code; check the network and the collective "
              "library (NCCL_DEBUG=INFO, `ddiag check-env`), the GPUs, and any rank of the "
              "job that was not captured (other hosts: run `ddiag stacks` there, or "
              "--slurm-job)")


def _where(g: Group) -> str:
    if g.at is None:
        return "?"
    user = g.user
    caller = f", called from {_frame_text(user)}" if user is not None and user != g.at else ""
    return _frame_text(g.at) + caller


def _frame_text(f: Frame) -> str:
    return f"{f.func} ({_short(f.file)}:{f.line})"


def _frame_json(f: Frame | None) -> dict | None:
    return {"func": f.func, "file": f.file, "line": f.line} if f is not None else None


def _short(path: str) -> str:
    return "/".join(path.replace("\\", "/").split("/")[-2:])


def _size(groups: list[Group]) -> int:
    return sum(len(g.stacks) for g in groups)


def _who(g: Group) -> str:
    ranks = g.ranks
    if ranks:
        return _ranks_text(ranks)
    pids = [s.pid for s in g.stacks if s.pid is not None]
    if len(pids) == len(g.stacks):
        return ("process " if len(pids) == 1 else "processes ") + ", ".join(map(str, pids[:8]))
    return f"{len(g.stacks)} process(es)"


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks[:8])) + \
        (" ..." if len(ranks) > 8 else "")


def _count(g: Group) -> str:
    return _who(g) if len(g.stacks) <= 3 else f"{len(g.stacks)} ranks"


def _verb(g: Group, verb: str) -> str:
    return verb + "s" if len(g.stacks) == 1 else verb


def _pids(stacks: list[Stack]) -> list[int]:
    return sorted(s.pid for s in stacks if s.pid is not None)


def _hosts(stacks: list[Stack]) -> tuple[str, ...]:
    return tuple(sorted({s.host for s in stacks if s.host}))


def _evidence(*groups: Group) -> tuple[Evidence, ...]:
    out = []
    for g in groups:
        s = g.stacks[0]
        shown = list(g.frames[:3])
        if g.user is not None and g.user not in shown:
            shown.append(g.user)
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
    active = main.get("active")
    return Stack(rank, frames[:MAX_FRAMES], source, None, host, pid,
                 (not active) if type(active) is bool else None)


# ---------------------------------------------------------------------------------------
# verdicts over time (a watcher's samples)

_BUSY = ("io", "compute")


def past_timeout(finding: Finding | None, busy_s: float, timeout_s: float | None,
                 timeout_from: str = "", slack_s: float = 0.0) -> Finding | None:
    """A ``rank_hang`` whose culprit is busy in its own code or I/O, read with how long it
    has been busy (``busy_s``) and the job's process-group timeout (``timeout_s``, from
    ``timeout_from``): at or past that timeout the others' collective times out, so the
    cause is ``timeout_too_short`` (the work is legitimate, the timeout is not); under it
    the finding is kept, its details saying how long is left. ``slack_s``: how much longer
    than ``busy_s`` it may have been busy (a watcher sees the start only at its next
    sample). Anything else is returned as it is."""
    if finding is None or finding.category is not Category.RANK_HANG \
            or _culprit_state(finding) not in _BUSY:
        return finding
    details = {**finding.details, "busy_s": [round(busy_s, 1), round(busy_s + slack_s, 1)],
               "pg_timeout_s": timeout_s, "pg_timeout_from": timeout_from or None}
    if timeout_s is None or busy_s + slack_s < timeout_s:
        return replace(finding, details=details)
    who = _ranks_text(list(finding.culprit.ranks))
    took = f"{busy_s:.0f}" if slack_s < 1 else f"{busy_s:.0f} to {busy_s + slack_s:.0f}"
    title = (f"{who} has been busy for {took} s, as long as or longer than the process-group "
             f"timeout ({timeout_s:g} s, from {timeout_from or '?'}): the others' collective "
             f"times out while it works; {finding.title}")
    fix = ("raise the process-group timeout above the longest work one rank does alone "
           "(init_process_group(timeout=datetime.timedelta(...)) on every rank), or do that "
           "work on every rank or outside the training loop")
    return replace(finding, category=Category.TIMEOUT_TOO_SHORT, title=title, fix=fix,
                   details=details)


def _culprit_state(finding: Finding) -> str | None:
    groups = finding.details.get("groups") or []
    return groups[1]["state"] if len(groups) > 1 else None


def straggler(odd: list[tuple[int, ...]], window_s: float, share: float = 0.6,
              min_samples: int = 6, min_odd: int = 4) -> Finding | None:
    """The rank(s) that, in most of a moving job's samples (``odd``: per sample, the
    culprit ranks of its ``odd_ones`` verdict, () when none), are busy while the others
    wait: a straggler, not a hang (the job moved). ``share``: the fraction of samples it
    must be the odd one in, and at least ``min_odd`` of them."""
    if len(odd) < min_samples:
        return None
    counts: dict[tuple[int, ...], int] = {}
    for ranks in odd:
        if ranks:
            counts[ranks] = counts.get(ranks, 0) + 1
    if not counts:
        return None
    ranks, n = max(counts.items(), key=lambda kv: kv[1])
    if n < max(min_odd, share * len(odd)) or any(m * 2 > n for r, m in counts.items() if r != ranks):
        return None
    who = _ranks_text(list(ranks))
    title = (f"{who} was busy while the others waited for it in {n} of {len(odd)} stack "
             f"samples over {window_s:.0f} s, and the job kept moving: a straggler, not a "
             "hang")
    fix = ("compare that rank's host and device with the others' (a slower GPU or CPU, "
           "thermal throttling, other jobs on its node, a larger share of the data); "
           "`ddiag check-env` and `ddiag probe compute` time each rank")
    # the odd one out across sample rounds, as the busy-wait tally's straggler
    return Finding(Category.STRAGGLER, Severity.WARN, CONFIDENCE[Basis.MINORITY],
                   title, Culprit(ranks), (), fix, "stacks", True, None,
                   {"samples": len(odd), "odd_in": n, "window_s": round(window_s, 1)},
                   Basis.MINORITY)
