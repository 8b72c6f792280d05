"""The per-rank logging decorator: ``@diag.log_step``, ``diag.span`` and ``diag.init``.

Everything here runs inside someone else's training job, so every piece of
instrumentation is wrapped: an internal error is counted and warned about once, and the
user's own code and exceptions pass through untouched.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import socket
import sys
import threading
import time
import traceback
import weakref
from typing import Any, Callable

import torch
import torch.distributed as dist

from diag.format import schema
from diag.runtime import device
from diag.runtime.collectives import (CollectiveRecorder, Deferred, StepBuckets, ddp_recording_hook,
                              dtype_name, first_sent, hook_state, install)
from diag.runtime.eventlog import FLUSH_INTERVAL_S, Awaiting, EventWriter, install_signal_flush
from diag.format.names import STEP_PHASES
from diag.format.rundir import RunDir, ensure_run_json, launcher_run_id, training_run_dir

log = logging.getLogger("ddiag")

MAX_ARG_TENSORS = 16
# The kinds ddiag writes itself. Readers act on them: a "header" starts a new segment (a
# user's one would hide the rank), "close" means a clean exit, "exception" a failing rank,
# "step" and "collective" are what the analysis counts; so ``record`` refuses them.
RESERVED_KINDS = frozenset({"header", "close", "step", "collective", "span", "exception",
                            "note"})
_ARG_NAMES = tuple(f"arg{i}" for i in range(MAX_ARG_TENSORS))
_HOLDS_TENSORS = (torch.Tensor, list, tuple, dict)


class _Rank:
    """Where this process sits in the job; from the process group once it exists."""

    def __init__(self) -> None:
        if dist.is_available() and dist.is_initialized():
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self.backend = str(dist.get_backend())
        else:
            self.rank = int(os.environ.get("RANK", 0))
            self.world_size = int(os.environ.get("WORLD_SIZE", 1))
            self.backend = None
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started = time.time()  # the process began before this; see diag/watch/verify.py


class _State:
    def __init__(self, run_dir, grad_every: int, collectives: bool, signals: bool,
                 metrics: bool = False, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.run_dir = RunDir(training_run_dir(run_dir))
        self.flush_interval_s = flush_interval_s
        self.want_metrics = metrics
        self.metrics = None
        self.grad_every = grad_every
        self.want_collectives = collectives
        self.want_signals = signals
        self.writer: EventWriter | None = None
        self.where: _Rank | None = None
        self.step = -1
        self.in_step = False
        self.step_started: float | None = None
        self.last_step_end: float | None = None
        self._t0 = 0.0  # monotonic start of the current step
        self._args: list[tuple] = []  # tensor arguments of the current step
        self.phases: dict[str, float] = {}
        self.pending_phases: dict[str, float] = {}
        self.spans: list[tuple[str, float]] = []
        # On a CUDA machine (device.on_cuda(), asked at each step's start) steps and
        # phase spans are also timed with CUDA events, read late (device.DeviceStep).
        self.timing = False
        self.dev_start = None  # the event at the current step's start
        self.dev_phases: list[tuple] = []  # (name, start event, end event)
        self.pending_dev_phases: list[tuple] = []
        self.internal_errors = 0
        self.recorder = CollectiveRecorder(self.emit, self.context)
        self.hooked_models: set[int] = set()
        self.lock = threading.Lock()
        self.refused_kinds: set = set()
        # A model that is not DDP is checked just before the optimizer steps (a global
        # optimizer pre-hook), since a step that ends with zero_grad() leaves no
        # gradients to check at its end.
        self.grad_model = None  # the model to check this step, while one is due
        self.grad_taken: tuple | None = None  # (norm, nonfinite) read before the optimizer
        self.optimizer_hook = None
        self.optimizer_owns: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.warned_no_grads = False

    def context(self) -> dict:
        """Fields every record carries."""
        where = self.where or self.open_writer()
        return {"rank": where.rank, "pid": where.pid, "step": self.step,
                "in_step": self.in_step, "t": time.time(), "mono": time.monotonic()}

    def open_writer(self) -> _Rank:
        if self.where is not None:  # every step asks; only the first takes the lock
            return self.where
        with self.lock:
            if self.where is None:
                self.where = _Rank()
                self.writer = self._make_writer(self.where)
                self.recorder.emit_to(self.writer.emit)
        return self.where

    def _make_writer(self, where: _Rank) -> EventWriter:
        rd = self.run_dir
        try:
            rd.create()
            run_id = ensure_run_json(rd, launcher_run_id())["run_id"]
        except Exception as exc:  # noqa: BLE001 - an unwritable run dir must not stop training
            run_id = launcher_run_id() or "unknown"
            log.warning("ddiag: cannot prepare run directory %s: %s", rd.root, exc)
        header = {
            "kind": "header", **schema.stamp(schema.EVENTS), "run_id": run_id,
            "rank": where.rank, "local_rank": where.local_rank,
            "world_size": where.world_size, "host": where.host, "pid": where.pid,
            "backend": where.backend, "torch_version": torch.__version__,
            "python": sys.version.split()[0], "argv": sys.argv[:32],
            "t": time.time(), "mono": time.monotonic(), "step": self.step,
        }
        writer = EventWriter(rd.events(where.rank), header,
                             heartbeat_path=rd.heartbeat(where.rank), heartbeat=self.heartbeat,
                             flush_interval=self.flush_interval_s)
        if self.want_signals:
            install_signal_flush()
        if self.want_metrics:
            self._start_metrics(writer, where, run_id)
        return writer

    def _start_metrics(self, writer: EventWriter, where: _Rank, run_id: str) -> None:
        try:
            from diag.runtime import metrics

            self.metrics = metrics.start(writer, where.rank, where.local_rank, where.host, run_id)
        except Exception as exc:  # noqa: BLE001 - e.g. the port is taken: train on
            log.warning("ddiag: metrics exporter not started: %s", exc)

    def emit(self, record: dict) -> None:
        if self.writer is None:
            self.open_writer()
        self.writer.emit(record)

    def heartbeat(self) -> dict:
        where = self.where
        rec = self.recorder
        span = self.spans[-1] if self.spans else None
        return {
            **schema.stamp(schema.HEARTBEAT), "rank": where.rank, "pid": where.pid,
            "host": where.host, "t": time.time(), "mono": time.monotonic(),
            "step": self.step, "in_step": self.in_step, "step_started": self.step_started,
            "seq": dict(rec.seq), "last_collective": rec.last_done(), "pending": rec.in_flight(),
            "span": {"name": span[0], "since": span[1]} if span else None,
            "records": self.writer.written if self.writer else 0,
            "fr_signal": _fr_dump_signal(), "started": where.started,
        }

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.internal_errors += 1
        if self.internal_errors == 1:
            log.warning("ddiag: instrumentation error in %s (%s: %s); training goes on",
                        where, type(exc).__name__, exc)


def _fr_dump_signal() -> str | None:
    """The signal that makes this process dump its Flight Recorder, when a handler is
    installed (the hang watcher sends it; without a handler SIGUSR1 would kill)."""
    fr = sys.modules.get("diag.runtime.flight_recorder")
    return "SIGUSR1" if fr is not None and fr.installed() else None


_state: _State | None = None
_init_lock = threading.Lock()


def init(run_dir: str | os.PathLike | None = None, *, grad_every: int = 1,
         collectives: bool = True, signals: bool = True, metrics: bool | None = None,
         flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
    """Start recording into ``run_dir`` (default: $DDIAG_RUN_DIR or ./ddiag-run).

    Optional: the first ``log_step`` call does it with the defaults. Call it yourself
    to set options, or to record collectives issued before the first step.
    ``metrics`` (default: $DDIAG_METRICS == "1") exports Prometheus metrics
    (see ``diag.runtime.metrics``). ``flush_interval_s``: how long records may wait in memory
    before the writer thread writes them (a SIGKILL loses at most that much).
    """
    global _state
    if grad_every < 1:
        raise ValueError(f"grad_every must be >= 1, got: {grad_every}")
    if not flush_interval_s > 0:
        raise ValueError(f"flush_interval_s must be > 0, got: {flush_interval_s}")
    with _init_lock:
        if _state is not None:
            return
        if metrics is None:
            metrics = os.environ.get("DDIAG_METRICS") == "1"
        _state = _State(run_dir, grad_every, collectives, signals, metrics, flush_interval_s)
        if collectives:
            install(_state.recorder)
        atexit.register(shutdown)


def _get() -> _State:
    if _state is None:
        init()
    return _state


def writer() -> EventWriter | None:
    """This process's event writer (``written``/``dropped`` counters), once opened."""
    return _state.writer if _state else None


def current_step() -> int:
    return _state.step if _state else -1


def record(kind: str, **fields: Any) -> None:
    """Append a record of your own to the log. A ``kind`` of ddiag's own
    (``RESERVED_KINDS``) is dropped, with a warning once per kind."""
    state = _get()
    try:
        if kind in RESERVED_KINDS or not isinstance(kind, str):
            _refuse_kind(state, kind)
            return
        state.emit({"kind": kind, **state.context(), **fields})
    except Exception as exc:  # noqa: BLE001
        state.internal_error("record", exc)


def _refuse_kind(state: _State, kind) -> None:
    key = kind if isinstance(kind, str) else type(kind)
    if key in state.refused_kinds:
        return
    state.refused_kinds.add(key)
    log.warning("ddiag: diag.record(%r, ...) dropped: the kind must be a string and not one "
                "of ddiag's own (%s), which the readers act on; give your records a name "
                "of your own, e.g. %r", kind, ", ".join(sorted(RESERVED_KINDS)),
                f"my_{kind}" if isinstance(kind, str) else "my_event")


def shutdown() -> None:
    """Flush and close the event log. Runs at exit by itself."""
    if _state is None or _state.writer is None:
        return
    state = _state
    final = {"kind": "close", **state.context(), "dropped": state.writer.dropped,
             "internal_errors": state.internal_errors}
    state.writer.close(final)


def _span_mark(state: _State):
    """The event a span starts at on CUDA, or None: a span must never raise."""
    try:
        return device.mark()
    except Exception as exc:  # noqa: BLE001
        state.internal_error("span", exc)
        return None


class span:
    """Time a phase: ``with diag.span("data"): batch = next(it)``.

    Inside a step the time adds to that step's ``phases``; a data/forward/backward/
    optimizer span outside one counts toward the next step; any other name outside a
    step (``eval``, ``checkpoint``) is written as a ``span`` record of its own. The
    innermost open span is in the heartbeat, so the hang watcher can tell a marked
    pause from a hang.
    """

    __slots__ = ("name", "_t0", "_wall", "_dev")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> "span":
        self._t0 = time.monotonic()
        self._wall = time.time()
        state = _get()
        state.spans.append((self.name, self._wall))
        self._dev = _span_mark(state) if state.timing else None
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        dur = time.monotonic() - self._t0
        state = _state
        if exc is not None and not state.in_step:  # a step records its own exceptions
            _record_exception(state, exc, span=self.name)
        try:
            if state.spans and state.spans[-1][0] == self.name:
                state.spans.pop()
            if state.in_step:
                state.phases[self.name] = state.phases.get(self.name, 0.0) + dur
                if self._dev is not None:
                    state.dev_phases.append((self.name, self._dev, device.mark()))
            elif self.name in STEP_PHASES:
                state.pending_phases[self.name] = state.pending_phases.get(self.name, 0.0) + dur
                if self._dev is not None:
                    state.pending_dev_phases.append((self.name, self._dev, device.mark()))
            else:
                state.emit({"kind": "span", **state.context(), "name": self.name,
                            "start": self._wall, "dur_s": dur})
        except Exception as e:  # noqa: BLE001
            state.internal_error("span", e)


def log_step(fn: Callable | None = None, *, model: Any = None, grad_every: int | None = None):
    """Decorate a training step: ``@diag.log_step`` or ``@diag.log_step(model=model)``.

    Per call it writes one ``step`` record: duration, phases, tensor argument shapes, the
    loss when the step returns one, and with ``model=`` the gradient norm and the first
    parameter with a non-finite gradient (every ``grad_every`` steps).
    """
    if fn is None:
        return lambda f: log_step(f, model=model, grad_every=grad_every)
    if os.environ.get("DDIAG_DISABLE") == "1":
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        state = _get()
        try:
            every = grad_every or state.grad_every
            _begin_step(state, model, args, kwargs, every)
        except Exception as exc:  # noqa: BLE001
            state.internal_error("log_step", exc)
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            _record_exception(state, exc)
            raise
        try:
            _end_step(state, model, every, result)
        except Exception as exc:  # noqa: BLE001
            state.internal_error("log_step", exc)
        return result

    return wrapper


def _begin_step(state: _State, model, args: tuple, kwargs: dict, grad_every: int) -> None:
    if state.where is None:
        state.open_writer()
    if model is not None and id(model) not in state.hooked_models:
        _hook_model(state, model)
    state.step += 1
    state.in_step = True
    state.step_started = time.time()
    state._t0 = time.monotonic()
    state.phases = state.pending_phases
    state.pending_phases = {}
    state.recorder.step_comm_s = 0.0
    state.recorder.step_count = 0
    state.timing = device.on_cuda()
    if state.timing:
        _begin_device_step(state)
    check = model is not None and state.step % grad_every == 0
    state.grad_model = model if check else None
    state.grad_taken = None
    state.recorder.check_finite = check
    state.recorder.finite_checks = []  # a step that raised left its own behind
    state.recorder.buckets = StepBuckets(check, state.step)
    state._args = arg_shapes(args, kwargs)


def _begin_device_step(state: _State) -> None:
    state.dev_start = device.mark()
    state.dev_phases, state.pending_dev_phases = state.pending_dev_phases, []
    state.recorder.dev_comm = []


def _end_step(state: _State, model, grad_every: int, result) -> None:
    now = time.monotonic()
    recorder = state.recorder
    buckets = recorder.buckets
    buckets.in_step = False
    grad = None
    if model is not None and state.step % grad_every == 0:
        grad = _grad_fields(state, model, buckets)
    recorder.check_finite = False
    state.in_step = False
    iter_s = now - state.last_step_end if state.last_step_end else None
    state.last_step_end = now
    # The record is built on the writer thread (``_step_record``): here, cold after the
    # step's own work, building the dict cost more than taking its values.
    head = (state.where, state.step, time.time(), now, now - state._t0, iter_s, state.phases,
            state._args, recorder.step_comm_s, recorder.step_count, buckets)
    loss = loss_of(result)
    if state.timing or isinstance(loss, torch.Tensor) or type(grad) is LateGrad:
        state.writer.emit(_awaiting_step(state, head, loss, grad))
    else:
        state.writer.emit(Deferred((_step_record, *head, loss, grad)))


def _awaiting_step(state: _State, head: tuple, loss, grad) -> Awaiting:
    """The step record of a step on a CUDA device: its values are copied to the host
    without waiting, and the record is built once the copy has completed."""
    dev = device.DeviceStep(state.dev_start if state.timing else None, state.dev_phases,
                            state.recorder.dev_comm)
    state.dev_phases, state.recorder.dev_comm = [], None
    if isinstance(loss, torch.Tensor):
        loss = dev.add(loss)
    if type(grad) is LateGrad:
        grad.send(dev)
    dev.send()
    return Awaiting((dev, _late_step_record, loss, grad, *head))


def _late_step_record(dev: device.DeviceStep, loss, grad, *head) -> dict:
    """A step record with the values and timings read back from the device. What the
    copy has not delivered (the log closed first) is null, and ``unread`` says so."""
    values = dev.values()
    if type(loss) is slice:
        loss = None if values is None else float(values[loss][0])  # an int loss too
    if type(grad) is LateGrad:
        grad = grad.read(values)
    record = _step_record(*head, loss, grad)
    record.update(dev.timings())
    if dev.unread:
        record["unread"] = True
    return record


def _grad_fields(state: _State, model, buckets: StepBuckets) -> tuple:
    """(grad_norm, nonfinite, sent_nonfinite) of the step that just ended: from the
    gradients read before the optimizer stepped, else from those left at the end. On
    CUDA a ``LateGrad``, read once the step's values are copied to the host."""
    total = bucket_total(buckets.norms)
    taken = state.grad_taken
    if taken is None:
        taken = grad_check(model, total)
        if not taken[0] and not state.warned_no_grads:  # None, or 0.0: all zeroed
            _warn_no_grads(state)
    recorder = state.recorder
    if type(taken[0]) is LateNorms or any(_on_device(c[2]) for c in recorder.finite_checks):
        return LateGrad(taken, recorder.take_finite_checks())
    sent = recorder.first_nonfinite_sent(
        buckets_finite=total is not None and math.isfinite(total[1]))
    return taken[0], taken[1], sent


def _on_device(value) -> bool:
    """Whether a value (a loss, a reduction's finite check) is still on a CUDA device."""
    return isinstance(value, torch.Tensor) and value.is_cuda


def _warn_no_grads(state: _State) -> None:
    state.warned_no_grads = True
    log.warning("ddiag: log_step(model=...): step %d ended with every gradient of the model "
                "None or zero, and none were read before an optimizer step, so its grad_norm "
                "and NaN/Inf check are empty. Call opt.zero_grad() at the start of the step "
                "(before backward) instead of after the update, or update through a "
                "torch.optim optimizer, whose step ddiag reads the gradients before",
                state.step)


def _before_optimizer_step(state: _State, optimizer, _args, _kwargs) -> None:
    """A global optimizer pre-hook: read the gradients of the step's model before the
    update, which a ``zero_grad()`` later in the step would leave nothing of."""
    model = state.grad_model
    if model is None or state.grad_taken is not None or not state.in_step:
        return
    try:
        if _steps_the_model(state, optimizer, model):
            state.grad_taken = grad_check(model)
    except Exception as exc:  # noqa: BLE001
        state.internal_error("optimizer pre-hook", exc)


def _steps_the_model(state: _State, optimizer, model) -> bool:
    """Whether ``optimizer`` updates some of ``model``'s parameters (cached per optimizer:
    another model's optimizer may step before this model's gradients are final)."""
    known = state.optimizer_owns.get(optimizer)
    if known is None or known[0] is not model:
        params = {id(p) for _, p in _named_parameters(model)[0]}
        owns = any(id(p) in params for group in optimizer.param_groups for p in group["params"])
        known = (model, owns)
        state.optimizer_owns[optimizer] = known
    return known[1]


def _step_record(where: _Rank, step: int, t: float, mono: float, dur_s: float,
                 iter_s: float | None, phases: dict, shapes: list, comm_s: float, ncoll: int,
                 buckets: StepBuckets, loss: float | None, grad: tuple | None) -> dict:
    """A step record, from the values ``_end_step`` took. Durations go out unrounded."""
    record = {"kind": "step", "rank": where.rank, "pid": where.pid, "step": step,
              "in_step": True, "t": t, "mono": mono, "dur_s": dur_s, "iter_s": iter_s,
              "phases": phases, "args": shape_fields(shapes), "loss": loss,
              "comm_s": comm_s, "ncoll": ncoll}
    wait = buckets.exposed_wait()
    if wait is not None:
        record["comm_wait_s"] = wait
    if grad is not None:
        record["grad_norm"], record["nonfinite"], record["sent_nonfinite"] = grad
    return record


def _record_exception(state: _State, exc: BaseException, span: str | None = None) -> None:
    try:
        state.in_step = False
        state.recorder.dev_comm, state.dev_phases = None, []
        state.recorder.check_finite = False
        state.recorder.buckets.in_step = False
        where = {"span": span} if span else {}
        state.emit({"kind": "exception", **state.context(), **where, "type": type(exc).__name__,
                    "message": str(exc)[:2000],
                    "traceback": "".join(traceback.format_exception(exc))[-8000:]})
        state.writer.flush()  # the process is likely about to die: do not wait for the tick
    except Exception as e:  # noqa: BLE001
        state.internal_error("exception record", e)


def _hook_model(state: _State, model) -> None:
    state.hooked_models.add(id(model))
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        _hook_optimizers(state)
        return
    params = _named_parameters(model)[0]
    if params and params[0][1].is_cuda:  # its buckets' norms would need a sync to read
        _hook_optimizers(state)
    if not state.want_collectives or getattr(model, "_comm_hooks", None):
        return  # the user's own hook stays; a Python hook goes through our wrappers anyway
    try:
        model.register_comm_hook(hook_state(model), ddp_recording_hook)
    except RuntimeError as exc:  # a builtin C++ hook is already registered
        state.emit({"kind": "note", **state.context(),
                    "message": f"DDP buckets not recorded: {exc}"[:500]})


def _hook_optimizers(state: _State) -> None:
    """DDP's gradients are read from its reduced buckets as they come back (on CPU);
    any other model's, and on CUDA DDP's too, just before the optimizer steps
    (``_before_optimizer_step``)."""
    if state.optimizer_hook is None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        state.optimizer_hook = register_optimizer_step_pre_hook(
            functools.partial(_before_optimizer_step, state))


def arg_shapes(args: tuple, kwargs: dict) -> list[tuple]:
    """(name, torch.Size, dtype) of tensor arguments, one container level deep; the
    writer thread turns them into the record's fields (``shape_fields``)."""
    out: list[tuple] = []
    # Most steps take a few bare tensors: that case stays in this loop, with no calls.
    for i, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            out.append((_ARG_NAMES[i] if i < MAX_ARG_TENSORS else f"arg{i}", value.shape,
                        value.dtype))
        elif isinstance(value, _HOLDS_TENSORS):
            _container_shapes(out, f"arg{i}", value)
        if len(out) >= MAX_ARG_TENSORS:
            return out[:MAX_ARG_TENSORS]
    for name, value in kwargs.items():
        if isinstance(value, _HOLDS_TENSORS):
            _container_shapes(out, name, value)
        if len(out) >= MAX_ARG_TENSORS:
            break
    return out[:MAX_ARG_TENSORS]


def _container_shapes(out: list, name: str, value) -> None:
    if isinstance(value, torch.Tensor):
        out.append((name, value.shape, value.dtype))
    elif isinstance(value, (list, tuple)):
        out += [(f"{name}[{i}]", item.shape, item.dtype)
                for i, item in enumerate(value[:MAX_ARG_TENSORS])
                if isinstance(item, torch.Tensor)]
    elif isinstance(value, dict):
        out += [(f"{name}.{key}", item.shape, item.dtype)
                for key, item in list(value.items())[:MAX_ARG_TENSORS]
                if isinstance(item, torch.Tensor)]


def shape_fields(shapes: list[tuple]) -> list[dict]:
    """The step record's ``args``, from ``arg_shapes``."""
    return [{"name": name, "shape": list(shape), "dtype": dtype_name(dtype)}
            for name, shape, dtype in shapes]


def loss_of(result):
    """The loss when the step returns one: a scalar, a 1-element tensor, a dict's "loss",
    or the first element of a tuple. A float, or None; a CUDA tensor is returned as
    it is, to be read once copied to the host (reading it here would wait for the
    device)."""
    if isinstance(result, dict):
        result = result.get("loss")
    elif isinstance(result, (tuple, list)) and result:
        result = result[0]
    if isinstance(result, torch.Tensor):
        if result.is_cuda:
            return result.detach() if result.numel() == 1 and not result.is_complex() else None
        try:  # one call: item() takes any 1-element tensor and refuses the rest
            return float(result.item())
        except (RuntimeError, ValueError, TypeError):
            return None
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        try:
            return float(result)
        except OverflowError:  # an int past a double's range: as far off as "inf" goes
            return math.inf if result > 0 else -math.inf
    return None


_param_cache: dict[int, tuple[Any, list, int]] = {}


def _named_parameters(model) -> tuple[list, int]:
    """named_parameters() walks every submodule; the set of parameters of a model in
    training does not change, so walk once per model. Also their trainable numel."""
    cached = _param_cache.get(id(model))
    if cached is None or cached[0] is not model:
        named = list(model.named_parameters())
        cached = (model, named, sum(p.numel() for _, p in named if p.requires_grad))
        _param_cache[id(model)] = cached
    return cached[1], cached[2]


def bucket_total(norms: list) -> tuple[int, float] | None:
    """(numel, norm) over the DDP buckets reduced this step, from each bucket's
    (numel, norm), or None if none was. One plain loop: on CPU the norms are floats
    already, and this runs cold, right after the optimizer."""
    if not norms:
        return None
    numel, squares, tensors = 0, 0.0, []
    for n, norm in norms:
        numel += n
        if type(norm) is float:
            squares += norm * norm
        else:
            tensors.append(norm)
    if tensors:
        squares += total_norm(tensors) ** 2
    return numel, math.sqrt(squares)


def grad_check(model, buckets: tuple[int, float] | None = None
               ) -> tuple[float | None, dict | None]:
    """Total gradient norm and the first parameter whose gradient is NaN or Inf.

    ``buckets``: (numel, norm) of the DDP buckets reduced this step. When they cover
    every trainable parameter, they are the gradient the optimizer sees, and the total
    comes from them without walking the parameters. A finite total means every gradient
    is finite, so the per-parameter search runs only on a bad step. Sharded (DTensor)
    gradients are checked on the local shard, so the check issues no collective of its
    own; the norm is then this rank's shard norm. On CUDA, (``LateNorms``, None): the
    per-parameter norms, taken now and read once copied to the host.
    """
    params, trainable = _named_parameters(model)
    if buckets is not None and buckets[0] == trainable and math.isfinite(buckets[1]):
        return buckets[1], None
    named = [(n, p.grad) for n, p in params if p.grad is not None]
    if not named:
        return None, None
    grads = [g.to_local() if hasattr(g, "to_local") else g for _, g in named]
    if grads[0].is_cuda:  # read once copied to the host (LateGrad): no sync here
        norms = torch._foreach_norm(grads, dtype=torch.float32)
        return LateNorms([name for name, _ in named], norms), None
    norms = torch._foreach_norm(grads)
    total = total_norm(norms)
    if math.isfinite(total):
        return total, None
    for (name, _), grad, norm in zip(named, grads, norms):
        if not math.isfinite(float(norm)):
            kind = "nan" if bool(torch.isnan(grad).any()) else "inf"
            return total, {"param": name.removeprefix("module."), "kind": kind}
    return total, None


class LateNorms:
    """Per-parameter gradient norms still on the device, taken at the moment of the
    check (before the optimizer steps, or at the step end), with the parameters' names."""

    __slots__ = ("names", "norms")

    def __init__(self, names: list[str], norms: list) -> None:
        self.names, self.norms = names, norms


def grad_from_norms(names: list[str], norms: list[float]) -> tuple[float, dict | None]:
    """(grad_norm, nonfinite) from per-parameter norms read back from the device. A norm
    is NaN when its gradient holds a NaN, else Inf when it holds an Inf, which names the
    kind as ``grad_check``'s element search does."""
    total = math.sqrt(sum(n * n for n in norms))
    if math.isfinite(total):
        return total, None
    for name, norm in zip(names, norms):
        if not math.isfinite(norm):
            return total, {"param": name.removeprefix("module."),
                           "kind": "nan" if math.isnan(norm) else "inf"}
    return total, None


class LateGrad:
    """A step's gradient fields while some are on the device: ``taken``, the check's
    (norm, nonfinite) or (LateNorms, None); ``checks``, the reductions' finite checks
    (``collectives.first_sent``). ``send`` queues the device ones for the step's copy,
    ``read`` makes (grad_norm, nonfinite, sent_nonfinite) from what came back."""

    __slots__ = ("taken", "checks")

    def __init__(self, taken: tuple, checks: list) -> None:
        self.taken, self.checks = taken, checks

    def send(self, dev: device.DeviceStep) -> None:
        late = self.taken[0]
        if type(late) is LateNorms:
            self.taken = (dev.add(device.stack(late.norms)), late.names)
        self.checks = [(op, seq, dev.add(value) if _on_device(value) else value, bucket)
                       for op, seq, value, bucket in self.checks]

    def read(self, values: list | None) -> tuple:
        at = self.taken[0]
        if type(at) is not slice:
            norm, nonfinite = self.taken
        elif values is None:
            norm = nonfinite = None
        else:
            norm, nonfinite = grad_from_norms(self.taken[1], values[at])
        checks = [(op, seq, _value(values, v), bucket) for op, seq, v, bucket in self.checks]
        return norm, nonfinite, first_sent(checks)


def _value(values: list | None, value):
    """``value``, or where it is a slice of the step's copy, what the copy holds there
    (None when it was not read)."""
    if type(value) is not slice:
        return value
    return None if values is None else values[value]


def total_norm(norms: list) -> float:
    """The 2-norm of per-tensor norms, read with one device sync at most.

    On CPU, reading each value costs no sync, and summing in Python (in double) skips the
    stack/norm tensor ops, which cost more than the norm kernel on a small model.
    """
    if all(n.is_cpu for n in norms):
        return math.sqrt(sum(n.item() ** 2 for n in norms))
    try:
        return float(torch.linalg.vector_norm(torch.stack(norms).float()))
    except RuntimeError:  # gradients spread over several devices
        return float(torch.linalg.vector_norm(torch.stack([n.float().cpu() for n in norms])))


def _reset() -> None:
    """Close the log and unwrap the collectives, so that a test can ``init`` afresh."""
    global _state
    from diag.runtime.collectives import uninstall

    shutdown()
    uninstall()
    if _state is not None and _state.optimizer_hook is not None:
        _state.optimizer_hook.remove()
    _state = None
