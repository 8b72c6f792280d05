"""A rank's GPU utilisation and memory, read without making the host wait for the device.

The metrics exporter reads these on the event-log writer thread about once a second while
the rank trains, so nothing here may synchronise: utilisation and device memory come from
NVML (nvidia-ml-py, imported lazily), else ``torch.cuda.utilization``; the rank's own
memory from the counters torch's caching allocator keeps on the host.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

_UNSET = object()


@dataclass(frozen=True)
class GpuSample:
    """One reading; None where the source is missing (no nvidia-ml-py, say)."""

    utilization: float | None = None
    """0..1: the share of NVML's last sample period (1/6 to 1 s) a kernel ran on the GPU."""
    memory_used: int | None = None
    """Bytes in use on the whole device (NVML), every process's."""
    memory_allocated: int | None = None
    """Bytes this rank's live tensors hold (``torch.cuda.memory_allocated``)."""
    max_memory_reserved: int | None = None
    """Peak bytes this rank's caching allocator reserved (``torch.cuda.max_memory_reserved``):
    what the rank needs to fit, fragmentation included."""


class GpuReader:
    """The GPU of one rank: ``local_rank``'s device when each rank sees every GPU of its
    node (torchrun), else device 0 (a launcher that shows each rank only its own)."""

    def __init__(self, local_rank: int) -> None:
        self.local_rank = local_rank
        self._nvml = _UNSET

    def sample(self) -> GpuSample | None:
        """None while this process has not started CUDA: a CPU rank, or one that has not
        touched its GPU yet. Starting CUDA from this thread would be the reader's doing."""
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return None
        index = self.local_rank if self.local_rank < torch.cuda.device_count() else 0
        util, used = self._from_nvml(index)
        if util is None:
            util = _torch_utilization(torch, index)
        return GpuSample(util, used, torch.cuda.memory_allocated(index),
                         torch.cuda.max_memory_reserved(index))

    def _from_nvml(self, index: int) -> tuple[float | None, int | None]:
        if self._nvml is _UNSET:
            self._nvml = _nvml_handle(index)
        if self._nvml is None:
            return None, None
        import pynvml

        try:
            util = pynvml.nvmlDeviceGetUtilizationRates(self._nvml).gpu / 100
            return util, int(pynvml.nvmlDeviceGetMemoryInfo(self._nvml).used)
        except Exception:  # noqa: BLE001 - a lost GPU or driver: no reading, training goes on
            return None, None


def _nvml_handle(index: int):
    try:
        import pynvml

        pynvml.nvmlInit()
        return nvml_device(pynvml, index)
    except Exception:  # noqa: BLE001 - no nvidia-ml-py, no driver, or no such GPU
        return None


def nvml_device(pynvml, cuda_index: int):
    """NVML numbers every GPU of the host; CUDA only those CUDA_VISIBLE_DEVICES shows, in
    its order, by index or by UUID."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return pynvml.nvmlDeviceGetHandleByIndex(cuda_index)
    entry = [x.strip() for x in visible.split(",") if x.strip()][cuda_index]
    if entry.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    return pynvml.nvmlDeviceGetHandleByUUID(entry)


def _torch_utilization(torch, index: int) -> float | None:
    """torch's own reading (NVML again, or amdsmi on ROCm); None where it has none."""
    read = getattr(torch.cuda, "utilization", None)
    try:
        return read(index) / 100 if read else None
    except Exception:  # noqa: BLE001 - torch raises when neither library is there
        return None
