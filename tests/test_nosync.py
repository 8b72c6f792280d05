"""On CUDA the decorated step never makes the host wait for the device: no ``item()``,
``float()``, ``bool()``, ``.cpu()``, blocking copy or synchronize in the step path.

There is no GPU here, so the test fakes one: ``FakeCuda`` tensors say ``is_cuda`` and
fail every call that would read a CUDA tensor on the host; ``FakeEvent`` completes only
when the test says so, and a ``non_blocking`` copy into pinned memory lands only when an
event recorded after it completes (until then the buffer holds ``UNLANDED``). A value
read before its event completed would show as that."""

from __future__ import annotations

import math
import threading
import traceback

import pytest
import torch
import torch.distributed as dist

import diag
from diag.format.events import read_events
from diag.format.rundir import RunDir, training_run_dir
from diag.runtime import eventlog, instrument

UNLANDED = -777.0
_T = torch.Tensor
# Each reads a CUDA tensor's value on the host, which waits for the device.
READS = {_T.item, _T.tolist, _T.cpu, _T.numpy, _T.__float__, _T.__int__, _T.__bool__,
         _T.__index__, _T.__repr__, _T.__format__, _T.__array__}


class FakeGpu:
    """One stream: events complete in the order recorded, up to ``complete(n)``."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.events: list[FakeEvent] = []
        self.completed = 0
        self.in_flight: list = []  # copies not yet followed by an event
        self.pinned: list = []
        self.lock = threading.Lock()

    def forbid(self, what: str) -> None:
        where = "".join(traceback.format_stack(limit=8)[:-2])
        self.violations.append(f"{what} on {threading.current_thread().name}\n{where}")
        raise HostWaits(what)

    def complete(self, upto: int | None = None) -> None:
        """Complete the first ``upto`` events recorded (all by default), landing the copies
        queued before them."""
        with self.lock:
            self.completed = len(self.events) if upto is None else upto
            for event in self.events[:self.completed]:
                for land in event.copies:
                    land()
                event.copies = []


gpu: FakeGpu | None = None


class HostWaits(Exception):
    """A call that would make the host wait for the device."""


class FakeCuda(torch.Tensor):
    is_cuda = property(lambda self: True)
    is_cpu = property(lambda self: False)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in READS:
            gpu.forbid(f"Tensor.{func.__name__}")
        if func is _T.to and any(str(a).startswith("cpu") for a in (*args[1:], *kwargs.values())):
            gpu.forbid("Tensor.to('cpu')")
        if func is _T.copy_ and not isinstance(args[0], FakeCuda):
            return _copy_to_host(args[0], args[1], *args[2:], **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def fake(t: torch.Tensor) -> FakeCuda:
    return t.as_subclass(FakeCuda)


def _copy_to_host(dst, src, non_blocking: bool = False):
    """Device to host: must be non_blocking into pinned memory, and lands later."""
    if not non_blocking or not any(dst is p for p in gpu.pinned):
        gpu.forbid("a blocking copy to the host")
    with torch._C.DisableTorchFunctionSubclass():
        value = src.clone()
    gpu.in_flight.append(lambda: dst.copy_(value))
    return dst


class FakeEvent:
    def __init__(self, enable_timing: bool = False, **_) -> None:
        self.index = None
        self.copies: list = []

    def record(self, stream=None) -> None:
        with gpu.lock:
            self.index = len(gpu.events)
            self.copies, gpu.in_flight = gpu.in_flight, []
            gpu.events.append(self)

    def query(self) -> bool:
        return self.index is not None and self.index < gpu.completed

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.query() and end.query(), "elapsed_time of an event not completed"
        return float(end.index - self.index)  # 1 ms per event between them

    def synchronize(self) -> None:
        gpu.forbid("Event.synchronize")

    def wait(self, stream=None) -> None:
        gpu.forbid("Event.wait")


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    global gpu
    gpu = FakeGpu()
    real_empty = torch.empty

    def empty(*args, pin_memory: bool = False, **kwargs):
        t = real_empty(*args, **kwargs)
        if pin_memory:
            t.fill_(UNLANDED)
            gpu.pinned.append(t)
        return t

    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: gpu.forbid("cuda.synchronize"))
    monkeypatch.setattr(eventlog, "DRAIN_WAIT_S", 0.05, raising=False)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    instrument._reset()
    diag.init(tmp_path, flush_interval_s=3600)  # the test says when the log is written
    yield gpu
    instrument._reset()
    dist.destroy_process_group()


def steps_written(run_dir) -> dict[int, dict]:
    diag.writer().flush()
    (segment,), problems = read_events(RunDir(training_run_dir(run_dir)).events(0))
    assert problems == []
    return {r["step"]: r for r in segment.of_kind("step")}


def fake_model() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    for layer in model:
        for name, p in list(layer.named_parameters(recurse=False)):
            setattr(layer, name, torch.nn.Parameter(fake(p.detach().clone())))
    return model


def make_steps(model):
    """A step that returns a loss, and one that also checks ``model``'s gradients
    (read before the optimizer steps: the step zeroes them after)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.0)

    @diag.log_step
    def plain(i: int):
        with diag.span("forward"):
            loss = fake(torch.tensor([float(i)])) * 2
        return loss

    @diag.log_step(model=model)
    def checked(i: int):
        loss = plain.__wrapped__(i)
        for p in model.parameters():
            p.grad = fake(torch.full(p.shape, float(i + 1)))
        if i == 3:
            model[1].weight.grad[0, 1] = float("nan")
        dist.all_reduce(fake(torch.tensor([float("inf") if i == 3 else 1.0])))
        opt.step()
        opt.zero_grad(set_to_none=True)
        return {"loss": loss}

    return plain, checked


def expected_norm(model, i: int) -> float:
    return math.sqrt(sum(p.numel() for p in model.parameters())) * (i + 1)


def test_the_step_never_waits_for_the_device_and_its_values_come_late(fake_gpu, tmp_path):
    model = fake_model()
    plain, checked = make_steps(model)
    ends = []  # events recorded by the end of each step
    for i in range(6):
        (checked if i % 2 else plain)(i)
        ends.append(len(gpu.events))
    assert gpu.violations == [], "".join(gpu.violations)
    assert instrument._state.internal_errors == 0
    assert steps_written(tmp_path) == {}  # no event has completed: nothing read yet

    gpu.complete(ends[3])  # the device has run steps 0-3; 4 and 5 are still in flight
    written = steps_written(tmp_path)
    assert sorted(written) == [0, 1, 2, 3]
    assert [written[i]["loss"] for i in range(4)] == [0.0, 2.0, 4.0, 6.0]
    assert written[1]["grad_norm"] == pytest.approx(expected_norm(model, 1))
    assert written[1]["nonfinite"] is None and written[1]["sent_nonfinite"] is None
    assert written[3]["grad_norm"] == "nan"
    assert written[3]["nonfinite"] == {"param": "1.weight", "kind": "nan"}
    assert written[3]["sent_nonfinite"] == {"op": "all_reduce", "seq": 2}
    assert "grad_norm" not in written[2]
    assert all(r["dev_dur_s"] > 0 and "unread" not in r for r in written.values())
    assert set(written[0]["dev_phases"]) == {"forward"} and written[1]["dev_comm_s"] > 0

    checked(6)  # a later step: 4 and 5 are written when their events complete
    gpu.complete(ends[5])
    written = steps_written(tmp_path)
    assert sorted(written) == [0, 1, 2, 3, 4, 5]
    assert written[5]["loss"] == 10.0
    assert written[5]["grad_norm"] == pytest.approx(expected_norm(model, 5))
    assert gpu.violations == [] and instrument._state.internal_errors == 0

    diag.shutdown()  # step 6 never completes (a hung device): written without its values
    (segment,), _ = read_events(RunDir(training_run_dir(tmp_path)).events(0))
    last = segment.of_kind("step")[-1]
    assert last["step"] == 6 and last["unread"] is True and last["loss"] is None
    assert last["grad_norm"] is None and segment.records[-1]["kind"] == "close"
    assert gpu.violations == []


class FakeBucket:
    """The GradBucket a DDP comm hook gets, over a CUDA buffer."""

    def __init__(self, values: list[float]) -> None:
        self._buffer = fake(torch.tensor(values))

    def buffer(self):
        return self._buffer


def test_ddp_buckets_and_async_collectives_are_timed_and_checked_without_waiting(
        fake_gpu, tmp_path):
    from diag.runtime import collectives

    model = fake_model()

    @diag.log_step(model=model)
    def step(poison: bool):
        for p in model.parameters():
            p.grad = fake(torch.ones(p.shape))
        bucket = FakeBucket([float("nan") if poison else 1.0, 2.0])
        collectives.ddp_recording_hook(None, bucket).wait()  # DDP waits so in backward
        dist.all_reduce(fake(torch.ones(2)), async_op=True).wait()
        return fake(torch.tensor(1.5))

    step(False)
    step(True)
    assert gpu.violations == [], "".join(gpu.violations)
    assert instrument._state.internal_errors == 0
    gpu.complete()
    written = steps_written(tmp_path)
    assert [written[i]["sent_nonfinite"] for i in (0, 1)] == [
        None, {"op": "all_reduce", "seq": 3}]  # the bucket, summed before its launch
    assert all(r["dev_comm_s"] > 0 and r["ncoll"] == 2 for r in written.values())
    assert written[1]["loss"] == 1.5 and written[1]["nonfinite"] is None
