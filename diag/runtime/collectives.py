"""Records every torch.distributed collective a rank issues, by wrapping the public
functions of the ``torch.distributed`` namespace.

Why wrappers: gloo offers no per-work hook (``ProcessGroup._register_on_completion_hook``
exists for NCCL only), while every frontend we care about -- user code, FSDP2,
ZeroRedundancyOptimizer, pipelining -- calls these functions through the namespace.
DDP's gradient buckets bypass Python, so ``instrument`` registers a recording comm hook
on a DDP model instead (see ``ddp_recording_hook``).

Only the outermost call is recorded (``all_gather_object`` runs two ``all_gather``s
inside), so our ``seq`` counts the collectives the caller issued, per process group.
``torch_seq`` is the group's own counter after the call, the ``collective_seq_id`` that
Flight Recorder dumps carry.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from diag.runtime import device

# op -> (input arg, output arg, group arg, peer arg); each is (position, keyword) or None.
_T = (0, "tensor")
SPECS: dict[str, tuple] = {
    "all_reduce": (_T, _T, (2, "group"), None),
    "broadcast": (_T, _T, (2, "group"), (1, "src")),
    "reduce": (_T, _T, (3, "group"), (1, "dst")),
    "all_gather": ((1, "tensor"), (0, "tensor_list"), (2, "group"), None),
    "all_gather_into_tensor": ((1, "input_tensor"), (0, "output_tensor"), (2, "group"), None),
    "all_gather_single": ((1, "input_tensor"), (0, "output_tensor"), (2, "group"), None),
    "reduce_scatter": ((1, "input_list"), (0, "output"), (3, "group"), None),
    "reduce_scatter_tensor": ((1, "input"), (0, "output"), (3, "group"), None),
    "reduce_scatter_single": ((1, "input"), (0, "output"), (3, "group"), None),
    "all_to_all": ((1, "input_tensor_list"), (0, "output_tensor_list"), (2, "group"), None),
    "all_to_all_single": ((1, "input"), (0, "output"), (4, "group"), None),
    "all_reduce_coalesced": ((0, "tensors"), (0, "tensors"), (2, "group"), None),
    "gather": (_T, (1, "gather_list"), (3, "group"), (2, "dst")),
    "scatter": ((1, "scatter_list"), _T, (3, "group"), (2, "src")),
    "barrier": (None, None, (0, "group"), None),
    "monitored_barrier": (None, None, (0, "group"), None),
    "send": (_T, None, (2, "group"), (1, "dst")),
    "recv": (None, _T, (2, "group"), (1, "src")),
    "isend": (_T, None, (2, "group"), (1, "dst")),
    "irecv": (None, _T, (2, "group"), (1, "src")),
    "all_gather_object": (None, None, (2, "group"), None),
    "broadcast_object_list": (None, None, (2, "group"), (1, "src")),
    "gather_object": (None, None, (3, "group"), (2, "dst")),
    "scatter_object_list": (None, None, (3, "group"), (2, "src")),
    "send_object_list": (None, None, (2, "group"), (1, "dst")),
    "recv_object_list": (None, None, (2, "group"), (1, "src")),
}
# What the heartbeat says about the collective a rank is inside (the hang watcher's clue).
PENDING_FIELDS = ("op", "group", "seq", "t", "in_numel", "in_dtype", "in_shape")
P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "send_object_list", "recv_object_list"})
# Reductions mix every rank's values: a NaN sent into one is on all ranks afterwards, so
# the check for who sent it must look at the input before the call.
REDUCTIONS = frozenset({"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor",
                        "reduce_scatter_single", "all_reduce_coalesced"})


def _arg(args: tuple, kwargs: dict, where: tuple | None) -> Any:
    if where is None:
        return None
    pos, name = where
    if name in kwargs:
        return kwargs[name]
    return args[pos] if pos < len(args) else None


def tensors_of(value: Any) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


@dataclass(frozen=True)
class GroupInfo:
    name: str
    desc: str
    size: int
    ranks: tuple[int, ...]


class CollectiveRecorder:
    """Turns wrapped calls into ``collective`` records and keeps per-group counters."""

    def __init__(self, emit: Callable[[dict], None], context: Callable[[], dict]):
        self._emit = emit
        self._context = context
        self._groups: dict[int, GroupInfo] = {}
        self._local = threading.local()
        self.seq: dict[str, int] = {}
        self.p2p_seq: dict[tuple[str, int], int] = {}
        self.last: dict | None = None
        self.pending: dict | None = None
        self.step_comm_s = 0.0
        self.step_count = 0
        self.check_finite = False
        # (op, seq, a sum, or a DDP bucket's verdict list, is a DDP bucket)
        self.finite_checks: list[tuple[str, int, Any, bool]] = []
        self.buckets = StepBuckets(False)  # this step's DDP buckets
        # Inside a step on a CUDA machine: [start, end] events per collective issued on
        # CUDA tensors, read late (device.DeviceStep); None otherwise.
        self.dev_comm: list | None = None
        self._bucket_plans: dict[tuple, BucketPlan] = {}  # by (id(group), numel, dtype)

    def emit_to(self, emit: Callable[[dict], None]) -> None:
        """Send records straight to ``emit`` from now on (the event writer's, once it
        is open): one call less per collective."""
        self._emit = emit

    def group_info(self, group) -> GroupInfo:
        pg = group if group is not None else dist.group.WORLD
        info = self._groups.get(id(pg))
        if info is None:
            info = GroupInfo(
                name=str(getattr(pg, "group_name", "") or ""),
                desc=str(getattr(pg, "group_desc", "") or ""),
                size=pg.size(),
                ranks=tuple(dist.get_process_group_ranks(pg)),
            )
            self._groups[id(pg)] = info
        return info

    def wrap(self, op: str, fn: Callable) -> Callable:
        recorder = self

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if op == "batch_isend_irecv":
                _unwrap_p2p_ops(args[0] if args else kwargs.get("p2p_op_list", []))
            if getattr(recorder._local, "depth", 0):
                return fn(*args, **kwargs)
            recorder._local.depth = 1
            try:
                return recorder._call(op, fn, args, kwargs)
            finally:
                recorder._local.depth = 0

        return _SameAs(wrapper, fn)

    def _call(self, op: str, fn: Callable, args: tuple, kwargs: dict):
        try:
            record, pg = self._begin(op, args, kwargs)
        except Exception:  # noqa: BLE001 - bad arguments: let torch raise its own error
            return fn(*args, **kwargs)
        if self.dev_comm is not None and op in SPECS:
            return self._timed_on_device(op, record, pg, fn, args, kwargs)
        return self._timed(record, pg, fn, args, kwargs)

    def _timed_on_device(self, op: str, record: dict, pg, fn: Callable, args: tuple,
                         kwargs: dict):
        """``_timed``, and for CUDA tensors the device time too: the call returns once
        the collective is queued, so ``dur_s`` is only the launch. An event before the
        call; one after it, which the stream reaches once a synchronous collective is
        done (the call makes it wait), or, for ``async_op``, from the work's completion
        callback."""
        comm = self.dev_comm
        try:
            tensor = _first_tensor(op, args, kwargs)
            pair = [device.mark(), None] if tensor is not None and tensor.is_cuda else None
        except Exception:  # noqa: BLE001 - untimed rather than in the caller's way
            pair = None
        if pair is None:
            return self._timed(record, pg, fn, args, kwargs)
        result = self._timed(record, pg, fn, args, kwargs)
        try:
            if record["async"]:
                result.get_future().then(functools.partial(_end_mark, pair))
            else:
                pair[1] = device.mark()
            comm.append(pair)
        except Exception:  # noqa: BLE001 - no device time for this one; training goes on
            pass
        return result

    def _timed(self, record: dict, pg, fn: Callable, args: tuple, kwargs: dict):
        """Run the collective, noting its duration, and any error, in its record."""
        start = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            self._finish(record, pg, start, kwargs)

    def _begin(self, op: str, args: tuple, kwargs: dict) -> tuple[dict, Any]:
        if op == "batch_isend_irecv":
            return self._begin_batch(args, kwargs)
        in_at, out_at, group_at, peer_at = SPECS[op]
        group = _arg(args, kwargs, group_at)
        info = self.group_info(group)
        record = {"kind": "collective", "op": op, "group": info.name, "group_desc": info.desc,
                  "group_size": info.size, **self._context()}
        if op in P2P_OPS:
            peer = _arg(args, kwargs, peer_at)
            key = (info.name, -1 if peer is None else int(peer))
            self.p2p_seq[key] = self.p2p_seq.get(key, 0) + 1
            record.update(p2p=True, peer=key[1], seq=self.p2p_seq[key])
        else:
            self.seq[info.name] = self.seq.get(info.name, 0) + 1
            record["seq"] = self.seq[info.name]
            if peer_at is not None:
                record["root"] = _arg(args, kwargs, peer_at)
        inputs = tensors_of(_arg(args, kwargs, in_at))
        described = describe(inputs, "in")
        record.update(described)
        if self.check_finite and op in REDUCTIONS:
            self._queue_finite_check(op, record["seq"], inputs)
        if out_at == in_at:  # in place (all_reduce, broadcast, reduce): the same tensors
            record.update({_IN_TO_OUT[k]: v for k, v in described.items()})
        else:
            record.update(describe(tensors_of(_arg(args, kwargs, out_at)), "out"))
        self.pending = record
        return record, group if group is not None else dist.group.WORLD

    def in_flight(self) -> dict | None:
        """The collective this rank is inside now, for the heartbeat. Training keeps only
        a reference to the record; the heartbeat's thread picks the fields."""
        record = as_record(self.pending)
        if record is None:
            return None
        return {k: record[k] for k in PENDING_FIELDS if k in record}

    def last_done(self) -> dict | None:
        """The last collective that returned, and when."""
        record = as_record(self.last)
        if record is None:
            return None
        return {"op": record["op"], "group": record["group"], "seq": record["seq"],
                "t": record["t"] + record["dur_s"]}

    def _queue_finite_check(self, op: str, seq: int, tensors: list) -> None:
        """Queue an on-device all-finite flag; read at the end of the step, where the
        gradient check syncs anyway, so this adds no device sync of its own."""
        for t in tensors:
            if t.is_floating_point():
                # A sum is non-finite iff an element is (barring fp32 overflow, which only
                # huge gradients reach): one pass and no mask allocation, unlike isfinite.
                self.finite_checks.append((op, seq, _sum32(t), False))

    def bucket_all_reduce(self, buffer, group, step: "StepBuckets", verdict: list | None):
        """Average and issue one DDP bucket's async all_reduce, and record it; returns
        (work, numel). ``buffer`` still holds this rank's summed gradients.

        The same record as the namespace wrapper's, but this runs for every bucket of
        every step on the training thread, right after backward's kernels have evicted
        the interpreter's caches, where each extra Python call costs microseconds. So a
        bucket's fixed fields are worked out once (``BucketPlan``), the record stays a
        tuple until the writer thread builds it, and the reduction goes straight to the
        process group, as DDP's own C++ hook does.

        ``verdict``: where whether this rank fed the bucket a NaN/Inf is judged after the
        reduction (``judge_sent``), the one-element list it writes NaN into when it did;
        None: the buffer is summed before launch."""
        plan = self._bucket_plans.get((id(group), buffer.numel(), buffer.dtype))
        if plan is None:
            plan = self._plan_bucket(buffer, group)
        buffer.div_(plan.world)
        seq = self.seq[plan.group] = self.seq.get(plan.group, 0) + 1
        if self.check_finite and plan.floating:
            self.finite_checks.append(
                ("all_reduce", seq, _sum32(buffer) if verdict is None else verdict, True))
        t, start = time.time(), time.monotonic()
        self.pending = Deferred((_bucket_record, plan, step.step, step.in_step, t, start, seq))
        try:
            if plan.options is not None:  # as DDP's C++ hook: dist.all_reduce adds checks
                work = group.allreduce([buffer], plan.options)
            else:
                work = _original(dist.all_reduce)(buffer, group=group, async_op=True)
        except BaseException as exc:
            self.pending = None
            self._emit({**_bucket_record(plan, step.step, step.in_step, t, start, seq,
                                         time.monotonic() - start),
                        "error": f"{type(exc).__name__}: {exc}"[:500]})
            raise
        end = time.monotonic()
        dur = end - start
        torch_seq = group._get_sequence_number_for_group() if plan.torch_seq else None
        self.pending = None
        self.last = call = Deferred(
            (_bucket_record, plan, step.step, step.in_step, t, start, seq, dur, torch_seq))
        self.step_comm_s += dur
        self.step_count += 1
        step.launched = end
        self._emit(call)
        return work, plan.numel

    def _plan_bucket(self, buffer, group) -> "BucketPlan":
        info = self.group_info(group)
        side = describe([buffer], "in")
        where = self._context()
        fixed = {"kind": "collective", "op": "all_reduce", "group": info.name,
                 "group_desc": info.desc, "group_size": info.size, **side,
                 **{_IN_TO_OUT[k]: v for k, v in side.items()},
                 "rank": where.get("rank"), "pid": where.get("pid")}
        plan = BucketPlan(fixed, info.name, info.size, buffer.numel(),
                          buffer.is_floating_point(), _torch_seq_works(group),
                          _direct_allreduce(buffer, group))
        self._bucket_plans[(id(group), plan.numel, buffer.dtype)] = plan
        return plan

    def first_nonfinite_sent(self, buckets_finite: bool = False) -> dict | None:
        """The first reduction this step that this rank fed a NaN/Inf into (see
        ``first_sent``)."""
        return first_sent(self.take_finite_checks(), buckets_finite)

    def take_finite_checks(self) -> list:
        """This step's (op, seq, value, is a DDP bucket) checks, handed over."""
        checks, self.finite_checks = self.finite_checks, []
        return checks

    def device_pair(self) -> list | None:
        """[start event, None] for a collective on CUDA tensors inside a timed step; its
        completion callback sets the end (``_end_mark``)."""
        comm = self.dev_comm
        if comm is None:
            return None
        try:
            pair = [device.mark(), None]
        except Exception:  # noqa: BLE001 - DDP's hook must not fail for a timing
            return None
        comm.append(pair)
        return pair

    def _begin_batch(self, args: tuple, kwargs: dict) -> tuple[dict, Any]:
        ops = args[0] if args else kwargs.get("p2p_op_list", [])
        first = ops[0] if ops else None
        info = self.group_info(getattr(first, "group", None))
        parts = [{"op": getattr(p.op, "__name__", "?"), "peer": int(p.peer),
                  "numel": p.tensor.numel(), "dtype": dtype_name(p.tensor.dtype)} for p in ops]
        key = (info.name, -2)
        self.p2p_seq[key] = self.p2p_seq.get(key, 0) + 1
        record = {"kind": "collective", "op": "batch_isend_irecv", "group": info.name,
                  "group_desc": info.desc, "group_size": info.size, "p2p": True,
                  "seq": self.p2p_seq[key], "parts": parts, **self._context()}
        record["in_numel"] = sum(p["numel"] for p in parts)
        self.pending = record
        return record, getattr(first, "group", None) or dist.group.WORLD

    def _finish(self, record: dict, pg, start: float, kwargs: dict) -> None:
        dur = time.monotonic() - start
        record["dur_s"] = dur
        record["async"] = bool(kwargs.get("async_op", False))
        try:
            record["torch_seq"] = pg._get_sequence_number_for_group()
        except Exception:  # noqa: BLE001 - not every backend keeps the counter
            pass
        self.pending = None
        self.last = record
        self.step_comm_s += dur
        self.step_count += 1
        self._emit(record)


def first_sent(checks: list, buckets_finite: bool = False) -> dict | None:
    """The first reduction in ``checks`` that this rank fed a NaN/Inf into.

    A value is a sum, a DDP bucket's verdict list, a list of values read back from the
    device, or None (not read). ``buckets_finite``: every DDP bucket came back finite
    from its reduction. A sum is finite only if every rank's input was, so those checks
    need not be read."""
    for op, seq, value, bucket in checks:
        if (bucket and buckets_finite) or value is None:
            continue
        if not math.isfinite(value[0] if type(value) is list else float(value)):
            return {"op": op, "seq": seq}
    return None


def _first_tensor(op: str, args: tuple, kwargs: dict):
    """The first tensor a collective takes or fills, which says where it runs."""
    in_at, out_at = SPECS[op][:2]
    found = tensors_of(_arg(args, kwargs, in_at)) or tensors_of(_arg(args, kwargs, out_at))
    return found[0] if found else None


def _end_mark(pair: list, _fut) -> None:
    """Completion callback: on CUDA it runs on a stream that waits for the collective,
    so an event recorded there marks its end."""
    try:
        pair[1] = device.mark()
    except Exception:  # noqa: BLE001 - a zero time, not a record that waits forever
        pair[1] = pair[0]


@dataclass(frozen=True)
class BucketPlan:
    """What one DDP bucket's all_reduce records and how it is issued: fixed per
    (group, numel, dtype), so worked out on its first step."""

    fixed: dict  # the record's fields that never change, this rank's included
    group: str  # the group's name, which keys ``seq``
    world: int  # the group's size, which the bucket is divided by
    numel: int
    floating: bool
    torch_seq: bool  # the group keeps torch's own collective counter
    options: Any  # AllreduceOptions for a direct call, or None: through dist.all_reduce


def _bucket_record(plan: BucketPlan, step: int, in_step: bool, t: float, mono: float,
                   seq: int, dur: float | None = None, torch_seq: int | None = None) -> dict:
    """A DDP bucket's collective record, built on the writer thread."""
    record = {**plan.fixed, "step": step, "in_step": in_step, "t": t, "mono": mono, "seq": seq}
    if dur is not None:
        record["dur_s"] = dur
        record["async"] = True
    if torch_seq is not None:
        record["torch_seq"] = torch_seq
    return record


def _torch_seq_works(group) -> bool:
    try:
        group._get_sequence_number_for_group()
        return True
    except Exception:  # noqa: BLE001 - not every backend keeps the counter
        return False


def _direct_allreduce(buffer, group):
    """AllreduceOptions to call the group's allreduce directly, or None where
    dist.all_reduce does more than that call: a complex or subclassed tensor (torch
    function modes, views as real), a group this rank is not in."""
    if type(buffer) is not torch.Tensor or buffer.is_complex():
        return None
    if group is dist.GroupMember.NON_GROUP_MEMBER or not hasattr(group, "allreduce"):
        return None
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.SUM
    options.asyncOp = True
    return options


class Deferred(tuple):
    """A record kept as ``(build, *values)`` until the writer thread calls ``record()``.

    Building a dict on the training thread, right after the step's own kernels, cost
    more than all the rest of recording it; a tuple is one C call."""

    __slots__ = ()

    def record(self) -> dict:
        return self[0](*self[1:])


def _sum32(tensor):
    """Sum in at least fp32: half precision would overflow where fp32 does not."""
    return tensor.sum() if tensor.dtype is torch.float32 else tensor.sum(dtype=torch.float32)


def as_record(entry) -> dict | None:
    """A record as the event log holds it, from a dict or a ``Deferred`` one."""
    return entry.record() if isinstance(entry, Deferred) else entry


_SIDE_FIELDS = ("numel", "bytes", "dtype", "shape", "count")
_SIDE_KEYS = {side: tuple(f"{side}_{f}" for f in _SIDE_FIELDS) for side in ("in", "out")}
_IN_TO_OUT = dict(zip(_SIDE_KEYS["in"], _SIDE_KEYS["out"]))
_DTYPE_NAMES: dict = {}


def describe(tensors: list, side: str) -> dict:
    """numel, bytes, dtype and shape of one side (in/out) of a collective."""
    if not tensors:
        return {}
    numel, nbytes, dtype, shape, count = _SIDE_KEYS[side]
    first = tensors[0]
    if len(tensors) == 1:
        n = first.numel()
        return {numel: n, nbytes: n * first.element_size(), dtype: dtype_name(first.dtype),
                shape: list(first.shape)}
    return {numel: sum(t.numel() for t in tensors),
            nbytes: sum(t.numel() * t.element_size() for t in tensors),
            dtype: dtype_name(first.dtype), shape: list(first.shape), count: len(tensors)}


def dtype_name(dtype) -> str:
    """"float32" for torch.float32; cached, as every step names a few."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


class _SameAs(functools.partial):
    """A wrapper that compares and hashes equal to the function it wraps.

    ``P2POp`` checks ``op in [isend, irecv]`` against the originals and pipelining
    compares ``{p.op for p in ops} == {dist.isend}``; both must keep working whether a
    caller captured the function before or after we wrapped it. A ``partial`` so that
    the call goes straight to the wrapper, with no Python frame of its own.
    """

    def __new__(cls, wrapper: Callable, original: Callable):
        self = super().__new__(cls, wrapper)
        functools.update_wrapper(self, original)  # sets __wrapped__ = original
        return self

    def __eq__(self, other):
        return other is self or other is self.__wrapped__ or (
            isinstance(other, _SameAs) and other.__wrapped__ is self.__wrapped__
        )

    def __hash__(self):
        return hash(self.__wrapped__)


def _original(fn: Callable) -> Callable:
    """torch's function under our wrapper (not ``__wrapped__`` of any function: torch's
    own decorators set that too)."""
    return fn.__wrapped__ if isinstance(fn, _SameAs) else fn


def _unwrap_p2p_ops(ops) -> None:
    """torch's batch_isend_irecv picks each op's peer keyword with ``op.op is isend``, an
    identity test our wrapper cannot pass; hand it the originals. The batch itself is
    recorded once, as batch_isend_irecv."""
    for p2p_op in ops:
        if isinstance(getattr(p2p_op, "op", None), _SameAs):
            p2p_op.op = p2p_op.op.__wrapped__


_installed: CollectiveRecorder | None = None  # the recorder the wrappers feed


def install(recorder: CollectiveRecorder) -> list[str]:
    """Wrap every collective this torch has; returns the names wrapped."""
    global _installed
    _installed = recorder
    wrapped = []
    for op in (*SPECS, "batch_isend_irecv"):
        fn = getattr(dist, op, None)
        if fn is None or isinstance(fn, _SameAs):
            continue
        setattr(dist, op, recorder.wrap(op, fn))
        wrapped.append(op)
    return wrapped


def uninstall() -> None:
    global _installed
    _installed = None
    for op in (*SPECS, "batch_isend_irecv"):
        fn = getattr(dist, op, None)
        if isinstance(fn, _SameAs):
            setattr(dist, op, fn.__wrapped__)


class DdpHookState:
    """The state ddiag registers its DDP comm hook with."""

    __slots__ = ("process_group", "grads_apart")

    def __init__(self, process_group, grads_apart: bool) -> None:
        self.process_group = process_group
        # DDP without gradient_as_bucket_view: each parameter's .grad keeps this rank's
        # own gradient until DDP copies the reduced bucket back, after the callback.
        self.grads_apart = grads_apart


def hook_state(model) -> DdpHookState:
    """The state to register ``ddp_recording_hook`` with on a DDP model."""
    return DdpHookState(model.process_group, not getattr(model, "gradient_as_bucket_view", False))


def ddp_recording_hook(state, bucket):
    """DDP's default averaging all_reduce, with every gradient bucket recorded. Same
    arithmetic as torch's allreduce_hook. ``state``: a ``DdpHookState``, or a process
    group (or None) as torch's own hooks take.

    As each all_reduce completes, its callback notes the time (for the step's exposed
    communication wait, ``StepBuckets.exposed_wait``) and, on a step that checks
    gradients, the reduced bucket's norm: the bucket then holds exactly the gradients
    the optimizer sees, so one norm per bucket replaces a walk over every parameter at
    the step end (see ``instrument.grad_check``). The bucket is still in cache there.
    Where the parameters keep their own gradients (CPU, no bucket views), whether this
    rank sent a NaN/Inf is judged there too, and only when the reduced bucket is not
    finite: that saves a pass over the bucket before launch on every step.
    """
    if isinstance(state, DdpHookState):
        group, apart = state.process_group, state.grads_apart
    else:
        group, apart = state, False
    group = group if group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    recorder = _installed
    if recorder is None:  # uninstalled: torch's hook, unrecorded
        buffer.div_(group.size())
        return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(
            _first_value)
    step = recorder.buckets
    on_device = buffer.is_cuda
    # On CUDA the reduced norm is known only after a sync: keep the pre-launch sum there.
    verdict = [0.0] if step.check and apart and not on_device else None
    pair = recorder.device_pair() if on_device else None
    work, numel = recorder.bucket_all_reduce(buffer, group, step, verdict)
    return work.get_future().then(functools.partial(
        _on_reduced, step, on_device, numel, None if verdict is None else (bucket, verdict),
        pair))


def _first_value(fut):
    return fut.value()[0]


class StepBuckets:
    """What one step's DDP buckets left for its record, filled in by the completion
    callbacks (``_on_reduced``); DDP waits for them all before backward returns."""

    __slots__ = ("check", "step", "in_step", "norms", "launched", "done")

    def __init__(self, check: bool, step: int = -1) -> None:
        self.check = check  # take each reduced bucket's norm
        self.step = step  # for the bucket records
        self.in_step = step >= 0  # the step end clears it: later buckets are outside
        self.norms: list = []  # (numel, 2-norm) per bucket; not taken on CUDA
        self.launched: float | None = None  # monotonic, after the last bucket's launch
        self.done: list[float] = []  # monotonic, as each bucket's all_reduce completed

    def exposed_wait(self) -> float | None:
        """How long backward waited for the reductions after launching its last bucket.
        DDP overlaps bucket all_reduces with the rest of backward, so their record's
        ``dur_s`` is only the launch; this is the part the overlap did not hide, which
        would otherwise count as compute. None on CUDA (the wait is on the device), or
        when no bucket was reduced."""
        if self.launched is None or not self.done:
            return None
        return max(0.0, max(self.done) - self.launched)


def _on_reduced(step: StepBuckets, on_device: bool, numel: int, judge: tuple | None,
                pair: list | None, fut):
    """Completion callback: the reduced bucket, after noting when and, on a step that
    checks gradients, its (numel, norm): the bucket then holds exactly the gradients the
    optimizer sees. On gloo it runs as the reduction ends, on whichever thread sees it
    end. ``judge``: (GradBucket, verdict) where a bucket that came back non-finite has
    this rank's own part judged (``judge_sent``). On CUDA it runs on a stream that waits
    for the reduction: ``pair`` gets the event that ends its device time there, and the
    gradients are checked from the parameters instead (``instrument.grad_check``)."""
    if not on_device:
        step.done.append(time.monotonic())
    elif pair is not None:
        _end_mark(pair, fut)
    bucket = fut.value()[0]
    if step.check and not on_device:
        try:
            # Not a BLAS dot, though one is a quarter faster: on gloo's thread MKL does
            # not follow torch.set_num_threads, and a dot of 263k values took 8 ms
            # (median) on 2 busy cores. torch's own kernels follow it on every thread.
            norm = torch.linalg.vector_norm(bucket).item()  # here, where it is warm
            if judge is not None and not math.isfinite(norm):
                judge_sent(*judge)
            step.norms.append((numel, norm))
        except Exception:  # noqa: BLE001 - the step end then walks the parameters instead
            pass
    return bucket


def judge_sent(bucket, verdict: list) -> None:
    """Whether this rank fed a NaN/Inf into one DDP bucket's all_reduce, judged after
    the reduction from the parameters' own gradients (``DdpHookState.grads_apart``):
    ``verdict[0]`` becomes NaN when it did, and is read like the pre-launch sum it
    replaces. Run only for a reduced bucket that is not finite."""
    grads = [p.grad for p in bucket.parameters() if p.grad is not None]
    if any(not math.isfinite(float(_sum32(g))) for g in grads if g.is_floating_point()):
        verdict[0] = math.nan
