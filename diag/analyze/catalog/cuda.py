"""The GPU seen from PyTorch: CUDA out of memory, CUDA runtime errors (cudaGetErrorString's
texts, printed by torch's CUDA checks), device checks.

The CUDA runtime's error strings come from the closed-source libcudart; the line is printed
by torch, so the source given is torch's check that formats it.
"""

from __future__ import annotations

import re

from diag import fixes
from diag.analyze.catalog.spec import (Example, Implies, Signature, Source, body, compute,
                                       const, group)
from diag.verdict import Category

TORCH = "pytorch/pytorch"
CUDA_CHECK = Source(TORCH, "c10/cuda/CUDAException.cpp", "c10_cuda_check_implementation",
                    "'CUDA error: <cudaGetErrorString>'")
MISSING_GPU = Implies(Category.ENV_MISCONFIG, 0.75,
                      f"A rank asked for a GPU that does not exist: {fixes.too_few_gpus()}.")


def _oom(id_: str, needle: str, source: Source, example: str, expect: dict | None = None,
         pattern: str | None = None, near_miss: str = "gpu memory ok") -> Signature:
    return Signature(
        id=id_, signal="oom", oneof="oom", prefilter=(needle,),
        pattern=pattern or re.escape(needle),
        fields={"device": const("gpu"), "weak": const(False), "tried": const(None),
                "gpu": const(None)},
        source=source, examples=(Example(example, {"device": "gpu", **(expect or {})}),),
        near_misses=(near_miss,))


_CUDA_MESSAGE = re.compile(r"CUDA error: (?P<msg>[^\n]+?)"
                           r"(?:\s*$|\.?\s+(?:CUDA kernel|Compile with|For debugging))")


def _cuda_message(m: re.Match) -> str:
    found = _CUDA_MESSAGE.search(m.string)
    text = found.group("msg") if found else m.string.split("CUDA error", 1)[1]
    return text.strip(" :")[:200]


def _device(id_: str, needle: str, source: Source, example: str) -> Signature:
    return Signature(
        id=id_, signal="device_mapping_error", oneof="device_mapping", prefilter=(needle,),
        pattern=re.escape(needle), fields={"message": body()}, source=source,
        implies=MISSING_GPU, examples=(Example(example),),
        near_misses=("device 0 is available",))


OOM = (
    Signature(
        id="torch.cuda_out_of_memory", signal="oom", oneof="oom", prefilter=("out of memory",),
        pattern=r"(?:CUDA|HIP|XPU|MPS|cuda)(?: error:)? out of memory"
                r"(?:\. Tried to allocate (?P<tried>[\d.]+ ?[KMGT]i?B))?"
                r"(?:[^;]*?GPU (?P<gpu>\d+))?",
        fields={"device": const("gpu"), "weak": const(False), "tried": str,
                "gpu": group("gpu", int)},
        source=Source(TORCH, "c10/cuda/CUDACachingAllocator.cpp", "DeviceCachingAllocator::malloc"),
        also=(CUDA_CHECK,),
        examples=(Example("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
                          "(GPU 3; 79.15 GiB total capacity; 75.2 GiB already allocated)",
                          {"tried": "2.00 GiB", "gpu": 3}),
                  Example("RuntimeError: CUDA error: out of memory", {"tried": None})),
        near_misses=("host out of memory",)),
    _oom("torch.out_of_memory_error", "OutOfMemoryError",
         Source(TORCH, "torch/csrc/Exceptions.cpp", "THPException_init",
                "the Python type of c10::OutOfMemoryError"),
         "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory."),
    _oom("torch.cublas_alloc_failed", "CUBLAS_STATUS_ALLOC_FAILED",
         Source(TORCH, "aten/src/ATen/cuda/Exceptions.cpp", "_cublasGetErrorEnum"),
         "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
         "`cublasCreate(handle)`"),
    _oom("torch.cuda_memory_allocation", "cudaErrorMemoryAllocation", CUDA_CHECK,
         "RuntimeError: cudaErrorMemoryAllocation: out of memory"),
)

ERRORS = (
    Signature(
        id="torch.cuda_error", signal="cuda_error", prefilter=("CUDA error",),
        unless=("out of memory",), pattern=r"CUDA error",
        fields={"message": compute(_cuda_message)},
        source=CUDA_CHECK,
        examples=(Example("RuntimeError: CUDA error: an illegal memory access was encountered",
                          {"message": "an illegal memory access was encountered"}),
                  Example("torch.AcceleratorError: CUDA error: device-side assert triggered. CUDA "
                          "kernel errors might be asynchronously reported",
                          {"message": "device-side assert triggered"})),
        near_misses=("RuntimeError: CUDA error: out of memory",)),
    _device("torch.nccl_without_gpus", "only supported with GPUs",
            Source(TORCH, "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
                   "ProcessGroupNCCL::ProcessGroupNCCL"),
            "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!"),
    _device("torch.invalid_device_ordinal", "invalid device ordinal", CUDA_CHECK,
            "RuntimeError: CUDA error: invalid device ordinal"),
    _device("torch.no_cuda_gpus", "No CUDA GPUs are available",
            Source(TORCH, "c10/cuda/CUDAFunctions.cpp", "device_count_ensure_non_zero"),
            "RuntimeError: No CUDA GPUs are available"),
)

ENTRIES = OOM + ERRORS
