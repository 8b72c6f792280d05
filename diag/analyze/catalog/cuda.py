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
from diag.verdict import Basis, Category

TORCH = "pytorch/pytorch"
CUDA_CHECK = Source(TORCH, "c10/cuda/CUDAException.cpp", "c10_cuda_check_implementation",
                    "'CUDA error: <cudaGetErrorString>'")
MISSING_GPU = Implies(Category.ENV_MISCONFIG, Basis.LINE,
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
        source=Source(TORCH, "c10/cuda/CUDACachingAllocator.cpp", "DeviceCachingAllocator::malloc",
                      "torch 2.1+: 'Tried to allocate X. GPU N has a total capacity of ...'; "
                      "before: 'Tried to allocate X (GPU N; ... total capacity; ...)'"),
        also=(CUDA_CHECK,),
        examples=(Example("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
                          "(GPU 3; 79.15 GiB total capacity; 75.2 GiB already allocated)",
                          {"tried": "2.00 GiB", "gpu": 3}),
                  Example("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. "
                          "GPU 6 has a total capacity of 139.81 GiB of which 812.00 MiB is free.",
                          {"tried": "1.50 GiB", "gpu": 6}),
                  Example("RuntimeError: CUDA error: out of memory", {"tried": None})),
        near_misses=("host out of memory",)),
    _oom("torch.out_of_memory_error", "OutOfMemoryError",
         Source(TORCH, "torch/csrc/Exceptions.cpp", "THPException_init",
                "the Python type of c10::OutOfMemoryError: 'torch.cuda.OutOfMemoryError', "
                "later 'torch.OutOfMemoryError'"),
         "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory."),
    _oom("torch.cublas_alloc_failed", "CUBLAS_STATUS_ALLOC_FAILED",
         Source(TORCH, "aten/src/ATen/cuda/Exceptions.h", "TORCH_CUDABLAS_CHECK",
                "'CUDA error: <status> when calling `<call>`', the status named by "
                "Exceptions.cpp _cublasGetErrorEnum"),
         "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
         "`cublasCreate(handle)`"),
    _oom("torch.cuda_memory_allocation", "cudaErrorMemoryAllocation",
         Source("NVIDIA/thrust", "thrust/system/cuda/detail/error.inl",
                "cuda_cub::detail::cuda_error_category::message",
                "'<cudaGetErrorName>: <cudaGetErrorString>', e.g. thrust's 'std::bad_alloc: "
                "cudaErrorMemoryAllocation: out of memory' (now in NVIDIA/cccl); torch's own "
                "check prints 'CUDA error: out of memory' instead"),
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

# nvidia-smi is closed source; its line is "<what failed> for GPU <index or bus id>: " +
# nvmlErrorString(ret) of nvmlDeviceGetHandleByIndex. NVML_ERROR_GPU_IS_LOST (15) is "GPU is
# lost" ("fallen off the bus or otherwise inaccessible", nvml.h); NVML_ERROR_UNKNOWN (999)
# "Unknown Error" is what a GPU gone from the bus usually gives.
_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_NVML_SOURCE = Source("NVIDIA/go-nvml", "gen/nvml/nvml.h", "nvmlDeviceGetHandleByIndex",
                      "nvidia-smi prints the failed call's nvmlErrorString; the tool itself "
                      "is closed source")


NVML = (
    Signature(
        id="nvml.device_handle_failed", signal="hardware_error", oneof="nvml_lost",
        prefilter=("Unable to determine the device handle",),
        unless=("ersion mismatch",),  # a driver/library mismatch is not a broken GPU
        pattern=rf"Unable to determine the device handle for GPU ?(?:(?P<bus>{_BUS})|"
                rf"(?P<index>\d+)(?:: ?(?P<bus2>{_BUS}))?)?(?:: ?(?P<error>.*\S))?",
        fields={"what": const("gpu_lost"),
                "bus": compute(lambda m: m.group("bus") or m.group("bus2")),
                "index": group("index", int), "error": str, "message": body()},
        source=_NVML_SOURCE,
        examples=(Example("Unable to determine the device handle for GPU 0000:3B:00.0: GPU is "
                          "lost.  Reboot the system to recover this GPU",
                          {"what": "gpu_lost", "bus": "0000:3B:00.0"}),
                  Example("Unable to determine the device handle for GPU0000:C1:00.0: Unknown "
                          "Error", {"bus": "0000:C1:00.0", "error": "Unknown Error"}),
                  Example("Unable to determine the device handle for GPU2: 0000:61:00.0: Unknown "
                          "Error", {"index": 2, "bus": "0000:61:00.0"})),
        near_misses=("Failed to initialize NVML: Driver/library version mismatch",
                     "No devices were found")),
    Signature(
        id="nvml.gpu_is_lost", signal="hardware_error", oneof="nvml_lost",
        prefilter=("GPU is lost",), pattern=r"\bGPU is lost\b",
        fields={"what": const("gpu_lost"), "bus": const(None), "index": const(None),
                "error": const("GPU is lost"), "message": body()},
        source=Source("NVIDIA/go-nvml", "gen/nvml/nvml.h", "nvmlErrorString",
                      "NVML_ERROR_GPU_IS_LOST's text, raised by pynvml as NVMLError_GPUIsLost"),
        examples=(Example("pynvml.nvml.NVMLError_GPUIsLost: GPU is lost", {"what": "gpu_lost"}),),
        near_misses=("NVML: GPU is lostless-mode capable",)),
)

ENTRIES = OOM + ERRORS + NVML
