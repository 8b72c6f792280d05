"""The host under the job: the kernel's OOM killer, the GPU driver's Xid reports, the C
and C++ runtimes, the Python interpreter, the shell; and the host-memory errors PyTorch's
CPU side prints.
"""

from __future__ import annotations

from diag.analyze.catalog.spec import Example, Signature, Source, body, const

TORCH = "pytorch/pytorch"
LINUX = "torvalds/linux"
CPYTHON = "python/cpython"


def _host_oom(id_: str, needles: tuple, pattern: str, source: Source, example: str,
              near_miss: str) -> Signature:
    return Signature(
        id=id_, signal="oom", oneof="oom", prefilter=(needles,), pattern=pattern,
        fields={"device": const("host"), "weak": const(False), "tried": const(None),
                "gpu": const(None)},
        source=source, examples=(Example(example, {"device": "host", "weak": False}),),
        near_misses=(near_miss,))


OOM = (
    Signature(
        id="shell.killed", signal="oom", oneof="oom", prefilter=("Killed",),
        pattern=r"^\s*Killed\s*$",
        fields={"device": const("host"), "weak": const(True), "tried": const(None),
                "gpu": const(None)},
        source=Source("bminor/bash", "jobs.c", "notify_of_job_status",
                      "a foreground job's SIGKILL, most often the OOM killer's"),
        examples=(Example("Killed", {"device": "host", "weak": True}),),
        near_misses=("Killed process 1234 (python)",)),
    _host_oom("torch.cpu_alloc_failed", ("DefaultCPUAllocator",),
              r"DefaultCPUAllocator: can't allocate memory",
              Source(TORCH, "c10/core/impl/alloc_cpu.cpp", "alloc_cpu"),
              "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't "
              "allocate memory: you tried to allocate 123456 bytes. Error code 12 (Cannot allocate "
              "memory)", "DefaultCPUAllocator: allocated 12 bytes"),
    _host_oom("linux.oom_killed_process", ("Out of memory: Kill",),
              r"Out of memory: Kill(?:ed)? process",
              Source(LINUX, "mm/oom_kill.c", "__oom_kill_process",
                     "before 4.19: oom_kill_process, 'Kill process'"),
              "[Tue Mar 18 11:13:09 2026] Out of memory: Killed process 1234 (python) "
              "total-vm:98765432kB", "Out of memory: nothing killed"),
    _host_oom("slurm.oom_kill_event", ("oom-kill event", "oom_kill"), r"oom-kill event|oom_kill",
              Source("SchedMD/slurm", "src/plugins/task/cgroup/task_cgroup_memory.c",
                     "task_cgroup_memory_check_oom",
                     "'Detected 1 oom_kill event in StepId=...'; older: 'oom-kill event(s)'"),
              "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=12.0. Some of your "
              "processes may have been killed by the cgroup out-of-memory handler.",
              "oom-killer disabled"),
    _host_oom("linux.oom_killer_invoked", ("invoked oom-killer",), r"invoked oom-killer",
              Source(LINUX, "mm/oom_kill.c", "dump_header"),
              "[123.456] python invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), "
              "order=0, oom_score_adj=0", "oom killer not invoked"),
    _host_oom("libc.enomem", ("Cannot allocate memory",), r"Cannot allocate memory",
              Source(CPYTHON, "Objects/exceptions.c", "OSError_str",
                     "strerror(ENOMEM) as '[Errno 12] Cannot allocate memory'; C programs print "
                     "the same text"),
              "OSError: [Errno 12] Cannot allocate memory", "memory allocated"),
    _host_oom("libstdcxx.bad_alloc", ("std::bad_alloc",), r"std::bad_alloc",
              Source("gcc-mirror/gcc", "libstdc++-v3/libsupc++/vterminate.cc",
                     "__gnu_cxx::__verbose_terminate_handler"),
              "terminate called after throwing an instance of 'std::bad_alloc'",
              "std::allocator<int>"),
    _host_oom("python.memory_error", ("MemoryError",), r"^\s*MemoryError\b",
              Source(CPYTHON, "Lib/traceback.py", "TracebackException.format_exception_only",
                     "the exception's last line"),
              "MemoryError: Unable to allocate 8.00 GiB for an array",
              "numpy.core._exceptions._ArrayMemoryError: Unable to allocate"),
    _host_oom("torch.dataloader_worker_killed", ("is killed by signal",),
              r"is killed by signal: Killed",
              Source(TORCH, "torch/csrc/DataLoader.cpp", "THPModule_errorIfAnyWorkerFails"),
              "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.",
              "DataLoader worker (pid 4242) is killed by signal: Segmentation fault."),
)

GPU_DRIVER = (
    Signature(
        id="nvrm.xid", signal="xid", prefilter=("Xid",),
        pattern=r"\bXid\b[^:]*?(?:\(PCI:(?P<pci>[^)]+)\))?:\s*(?P<code>\d+)",
        fields={"code": int, "pci": str},
        source=Source("NVIDIA/open-gpu-kernel-modules", "src/nvidia/src/kernel/gpu/rc/kernel_rc.c",
                      "krcReportXid_IMPL", "in dmesg / the kernel log"),
        examples=(Example("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
                          {"code": 79, "pci": "0000:3b:00"}),),
        near_misses=("Xid errors: none",)),
)

NAMES = (
    Signature(
        id="python.gaierror", signal="name_resolution_failed", oneof="name_resolution",
        prefilter=(("Name or service not known", "name resolution", "nodename nor servname",
                    "getaddrinfo failed", "No address associated with hostname"),),
        unless=("IPv6",),  # hosts without IPv6 warn about it harmlessly
        pattern=r"Name or service not known|Temporary failure in name resolution"
                r"|nodename nor servname|getaddrinfo failed|No address associated with hostname",
        fields={"host": const(None), "port": const(None),
                "reason": body(200)},
        source=Source(CPYTHON, "Modules/socketmodule.c", "set_gaierror",
                      "the C library's gai_strerror text"),
        examples=(Example("socket.gaierror: [Errno -2] Name or service not known",
                          {"reason": "socket.gaierror: [Errno -2] Name or service not known"}),),
        near_misses=("[W socket.cpp:697] [c10d] The IPv6 network addresses of (node1, 29500) "
                     "cannot be retrieved (gai error: -2 - Name or service not known).",)),
)

ENTRIES = OOM + GPU_DRIVER + NAMES
