"""Fault injection: ``--inject KIND:rank=R[:step=S][:arg=V]`` parsed strictly, then applied
on rank R so that the run directory shows what the real failure would leave.

Steps count from 0, as ddiag's step records do. One-shot faults fire at step S;
``slow_compute``, ``slow_data`` and ``nan`` hold from step S on. Nothing here writes a
record that names the fault: the evidence must be the failure's own.

torch is imported inside the actions that need it: parsing and the data-path faults
(which also run in loader workers and in bare test subprocesses) need none of it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# kind -> (what arg means, its default, whether it must be a whole number)
KINDS: dict[str, tuple[str | None, float | None, bool]] = {
    "slow_compute": ("seconds of extra matmuls per step", 0.3, False),
    "slow_data": ("seconds of extra loading per batch", 0.3, False),
    "hang": (None, None, False),
    "extra_collective": (None, None, False),
    "shape_mismatch": ("extra elements in the metrics all_reduce", 1, True),
    "nan": (None, None, False),
    "crash": (None, None, False),
    "oom": ("bytes to allocate (default: 4x this host's RAM or GPU memory)", None, True),
}
PERSISTENT = frozenset({"slow_compute", "slow_data", "nan"})


@dataclass(frozen=True, kw_only=True)
class FaultSpec:
    """One ``--inject`` value, parsed."""

    kind: str
    """One of ``KINDS``."""
    rank: int
    """The global rank that misbehaves."""
    step: int = 0
    """First (or only) step at which it misbehaves, counted from 0."""
    arg: float | None = None
    """Kind-specific amount (see ``KINDS``); None means the kind's default."""
    text: str = ""
    """The flag value as given, quoted in errors."""

    @property
    def amount(self) -> float | None:
        return self.arg if self.arg is not None else KINDS[self.kind][1]

    def active(self, step: int) -> bool:
        return step >= self.step if self.kind in PERSISTENT else step == self.step

    def check_world(self, world_size: int) -> None:
        if self.rank >= world_size:
            raise ValueError(f"--inject {self.text}: rank {self.rank} is outside world size "
                             f"{world_size} (ranks 0..{world_size - 1})")

    def check_steps(self, steps: int) -> None:
        if self.step >= steps:
            raise ValueError(f"--inject {self.text}: step {self.step} is past the last step "
                             f"{steps - 1} (--steps {steps}; steps count from 0)")


def parse_faults(values: list[str]) -> tuple[FaultSpec, ...]:
    return tuple(parse_fault(v) for v in values)


def parse_fault(text: str) -> FaultSpec:
    """``KIND:rank=R[:step=S][:arg=V]`` -> FaultSpec, or ValueError quoting ``text``."""
    kind, *pairs = text.strip().split(":")
    if kind not in KINDS:
        raise ValueError(f"--inject {text}: unknown kind {kind!r} "
                         f"(kinds: {', '.join(sorted(KINDS))})")
    fields = _key_values(text, pairs)
    if "rank" not in fields:
        raise ValueError(f"--inject {text}: rank=R is required, e.g. {kind}:rank=1")
    if "arg" in fields and KINDS[kind][0] is None:
        raise ValueError(f"--inject {text}: {kind} takes no arg; drop ':arg={fields['arg']}'")
    return FaultSpec(kind=kind, rank=_whole(text, "rank", fields["rank"]),
                     step=_whole(text, "step", fields.get("step", "0")),
                     arg=_arg(text, kind, fields.get("arg")), text=text)


def _key_values(text: str, pairs: list[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in ("rank", "step", "arg"):
            raise ValueError(f"--inject {text}: {pair!r} is not rank=R, step=S or arg=V")
        if key in fields:
            raise ValueError(f"--inject {text}: {key} is given twice")
        fields[key] = value
    return fields


def _whole(text: str, key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"--inject {text}: {key} must be a whole number, got: {value!r}") from None
    if number < 0:
        raise ValueError(f"--inject {text}: {key} must be >= 0, got: {number}")
    return number


def _arg(text: str, kind: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"--inject {text}: arg must be a number, got: {value!r}") from None
    if not number > 0:
        raise ValueError(f"--inject {text}: arg must be > 0, got: {value}")
    if KINDS[kind][2] and number != int(number):
        raise ValueError(f"--inject {text}: arg for {kind} must be a whole number, got: {value}")
    return number


@dataclass(frozen=True)
class DataFaults:
    """Faults that live in the data path, keyed by the step a sample is loaded for."""

    hang_step: int | None = None
    """The step whose batch never arrives."""
    delay_s: float = 0.0
    """Extra seconds per batch from ``delay_from`` on."""
    delay_from: int = 0

    def before_item(self, step: int, first_of_batch: bool, batch: int) -> None:
        if step == self.hang_step and first_of_batch:
            block_forever()
        if self.delay_s and step >= self.delay_from:
            # Sleep is the honest model here: slow storage or a slow network filesystem
            # leaves the CPU idle while the loader waits.
            time.sleep(self.delay_s / batch)


class Faults:
    """The faults aimed at this rank, applied at the points the training loop offers."""

    def __init__(self, specs: tuple[FaultSpec, ...], rank: int, device: "torch.device") -> None:
        self.mine = [s for s in specs if s.rank == rank]
        self.rank = rank
        self.device = device
        self.nan_now = False

    def _first(self, kind: str) -> FaultSpec | None:
        return next((s for s in self.mine if s.kind == kind), None)

    def data_faults(self) -> "DataFaults":
        """What this rank's Dataset must do; it travels into loader workers by pickling."""
        hang = self._first("hang")
        slow = [s for s in self.mine if s.kind == "slow_data"]
        return DataFaults(hang_step=hang.step if hang else None,
                          delay_s=sum(s.amount for s in slow),
                          delay_from=min((s.step for s in slow), default=0))

    def in_forward(self, step: int) -> None:
        """Called at the start of the forward phase of every step."""
        self.nan_now = any(s.kind == "nan" and s.active(step) for s in self.mine)
        for spec in self.mine:
            if spec.active(step) and spec.kind in _FORWARD_ACTIONS:
                _FORWARD_ACTIONS[spec.kind](self, spec, step)

    def metrics_extra(self, step: int) -> int:
        """Extra elements this rank puts into the metrics all_reduce of ``step``."""
        return sum(int(s.amount) for s in self.mine
                   if s.kind == "shape_mismatch" and s.active(step))

    def extra_collective(self, step: int) -> bool:
        return any(s.kind == "extra_collective" and s.active(step) for s in self.mine)

    def poison_output(self, module: "torch.nn.Module", inputs: tuple,
                      output: "torch.Tensor") -> "torch.Tensor":
        """Forward hook: from the ``nan`` step on, this rank's activations turn NaN, as an
        overflow or a corrupt sample would make them; backward then carries NaN into the
        gradients and the gradient all_reduce spreads it."""
        return output + float("nan") if self.nan_now else output


def burn_compute(seconds: float, device: "torch.device") -> None:
    """Real extra work: square matmuls until ``seconds`` have passed. (Sleeping would
    leave the core idle, which is not what a slow GPU or a hot loop looks like.)"""
    import torch

    a = torch.randn(256, 256, device=device)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        a = torch.tanh(a @ a)
        if a.is_cuda:
            torch.cuda.synchronize(a.device)


def _slow_compute(faults: Faults, spec: FaultSpec, step: int) -> None:
    burn_compute(spec.amount, faults.device)


def _crash(faults: Faults, spec: FaultSpec, step: int) -> None:
    # A real bug, not a raise of our own: a label index past the end of a tensor. torch
    # raises the same IndexError a bad sample would.
    import torch

    labels = torch.zeros(4)
    labels[torch.tensor([faults.rank + 4])]


def _oom(faults: Faults, spec: FaultSpec, step: int) -> None:
    # One allocation the allocator must refuse; the error is the allocator's own
    # (DefaultCPUAllocator's RuntimeError on CPU, torch.OutOfMemoryError on CUDA). No
    # memory is actually exhausted, so nothing else on the host suffers.
    import torch

    nbytes = int(spec.amount or 4 * device_memory_bytes(faults.device))
    held = torch.empty(nbytes, dtype=torch.uint8, device=faults.device)
    # Granted: the host overcommits (vm.overcommit_memory=1) and never touched the pages.
    # Ask for more than any address space holds, which no allocator can grant.
    del held
    torch.empty(1 << 60, dtype=torch.uint8, device=faults.device)


def device_memory_bytes(device: "torch.device") -> int:
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


_FORWARD_ACTIONS = {"slow_compute": _slow_compute, "crash": _crash, "oom": _oom}


def block_forever() -> None:
    """What a deadlocked loader does: never return. The loop wakes only to notice that
    its parent (torchrun, or the rank for a loader worker) is gone, so that a killed job
    leaves no orphan behind."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.05)
    os._exit(1)
