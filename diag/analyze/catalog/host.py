"""The host under the job: the kernel's OOM killer, the GPU driver's Xid reports, the C
and C++ runtimes, the Python interpreter, the shell; and the host-memory errors PyTorch's
CPU side prints.
"""

from __future__ import annotations

import re

from diag.analyze.catalog.spec import (Example, Signature, Source, body, compute, const,
                                       group, search)

TORCH = "pytorch/pytorch"
LINUX = "torvalds/linux"
CPYTHON = "python/cpython"


def _host_oom(id_: str, needles: tuple, pattern: str, source: Source, example: str,
              near_miss: str, more: tuple = (), weak: bool = False) -> Signature:
    return Signature(
        id=id_, signal="oom", oneof="oom", prefilter=(needles,), pattern=pattern,
        fields={"device": const("host"), "weak": const(weak), "tried": const(None),
                "gpu": const(None),
                # the victim's pid: the post-pass maps it to a rank when the log ties them
                **({"pid": group("pid", int)} if "(?P<pid>" in pattern else {})},
        source=source, examples=tuple(Example(line, {"device": "host", "weak": weak})
                                      for line in (example, *more)),
        near_misses=(near_miss,))


OOM = (
    Signature(
        id="shell.killed", signal="oom", oneof="oom", prefilter=("Killed",),
        pattern=r"^\s*Killed(?:\s*$| {2,}\S)|: line \d+: +\d+ Killed\b",
        fields={"device": const("host"), "weak": const(True), "tried": const(None),
                "gpu": const(None)},
        source=Source("bminor/bash", "jobs.c", "notify_of_job_status",
                      "a job's SIGKILL, most often the OOM killer's: a non-interactive shell (a "
                      "batch script) prints '<script>: line N: <pid> Killed  <command>'; an "
                      "interactive one 'Killed', from bash 5.3 'Killed  <command>'"),
        examples=(Example("Killed", {"device": "host", "weak": True}),
                  Example("/var/spool/slurmd/job4711/slurm_script: line 23: 918273 Killed"
                          "                  torchrun --nproc_per_node=8 train.py",
                          {"device": "host", "weak": True}),
                  Example("Killed                     python finetune.py --bs 64",
                          {"device": "host", "weak": True})),
        near_misses=("Killed process 1234 (python)",)),
    _host_oom("torch.cpu_alloc_failed", ("DefaultCPUAllocator",),
              r"DefaultCPUAllocator: (?:can't allocate|not enough) memory",
              Source(TORCH, "c10/core/impl/alloc_cpu.cpp", "alloc_cpu",
                     "posix_memalign: 'can't allocate memory: ... Error code N (<strerror>)'; "
                     "Windows/Android: 'not enough memory: you tried to allocate N bytes.'; "
                     "torch 1.x: c10/core/CPUAllocator.cpp"),
              "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't "
              "allocate memory: you tried to allocate 123456 bytes. Error code 12 (Cannot allocate "
              "memory)", "DefaultCPUAllocator: allocated 12 bytes",
              more=("RuntimeError: [enforce fail at C:\\actions-runner\\pytorch\\c10\\core\\impl\\"
                    "alloc_cpu.cpp:72] data. DefaultCPUAllocator: not enough memory: you tried to "
                    "allocate 4294967296 bytes.",)),
    _host_oom("linux.oom_killed_process", ("Out of memory", "out of memory: Kill"),
              r"[Oo]ut of memory(?: \(oom_kill_allocating_task\))?: Kill(?:ed)? process"
              r"(?: (?P<pid>\d+))?",
              Source(LINUX, "mm/oom_kill.c", "__oom_kill_process",
                     "'%s: Killed process %d (%s) total-vm:...', %s 'Out of memory', 'Memory "
                     "cgroup out of memory' (a cgroup's limit) or 'Out of memory "
                     "(oom_kill_allocating_task)'; before 4.19: oom_kill_process, 'Kill process'"),
              "[Tue Mar 18 11:13:09 2026] Out of memory: Killed process 1234 (python) "
              "total-vm:98765432kB", "Out of memory: nothing killed",
              more=("[812345.118902] Memory cgroup out of memory: Killed process 40771 (python3) "
                    "total-vm:61237712kB, anon-rss:50331648kB, file-rss:0kB, shmem-rss:0kB, "
                    "UID:1000 pgtables:98304kB oom_score_adj:0",
                    "kernel: Out of memory (oom_kill_allocating_task): Killed process 991 (pt_main_"
                    "thread) total-vm:1024kB")),
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
                     "the exception's last line '<type>: <message>'; the interpreter's own "
                     "report of an uncaught exception goes through it from 3.13 (PyErr_Display "
                     "-> traceback._print_exception_bltin)"),
              "MemoryError: Unable to allocate 8.00 GiB for an array",
              "numpy.core._exceptions._ArrayMemoryError: Unable to allocate"),
    _host_oom("torch.dataloader_worker_killed", ("is killed by signal",),
              r"is killed by signal: Killed",
              Source(TORCH, "torch/csrc/DataLoader.cpp", "THPModule_errorIfAnyWorkerFails"),
              "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.",
              "DataLoader worker (pid 4242) is killed by signal: Segmentation fault."),
)

# What an Xid says about the GPU (NVIDIA's Xid catalog, docs.nvidia.com/deploy/xid-errors):
# these are the hardware's or the driver's; any other code counts as hardware too.
_XID_HARDWARE = {48: "ecc", 63: "row_remap", 64: "row_remap", 74: "nvlink_error",
                 79: "fell_off_bus", 92: "ecc", 94: "ecc", 95: "ecc", 119: "gsp", 120: "gsp"}
# Raised by what the application ran, not by the GPU: a fault in its kernels ...
_XID_APP = {13: "graphics engine exception (often an out-of-range index in the application)",
            31: "GPU memory page fault (an illegal memory access by the application)"}
# ... and the driver stopping a channel whose process faulted or was killed: an aftermath
_XID_STOPPED = {43: "GPU stopped processing", 45: "preemptive cleanup, due to previous errors"}
_XID = r"\bXid\b[^:]*?(?:\(PCI:(?P<pci>[^)]+)\))?:\s*"
# The process the driver names: the post-pass maps a pid that NCCL's lines or torchrun's
# summary tie to a rank onto that rank (in a container the kernel's pid differs: no match)
_XID_PID = search(r"\bpid=(\d+)", int)


def _xid_what(m) -> str:
    return _XID_HARDWARE.get(int(m.group("code")), "xid")


def _xid(id_: str, signal: str, codes: dict, example: str, code: int) -> Signature:
    """An Xid whose code says the application, not the GPU, is at fault."""
    return Signature(
        id=id_, signal=signal, oneof="xid", prefilter=("Xid",),
        pattern=_XID + r"(?P<code>" + "|".join(map(str, codes)) + r")\b",
        fields={"code": int, "pci": str, "pid": _XID_PID, "message": compute(
            lambda m: f"Xid {m.group('code')}: {codes[int(m.group('code'))]}")},
        source=Source("NVIDIA/open-gpu-kernel-modules", "src/nvidia/src/kernel/gpu/rc/kernel_rc.c",
                      "krcReportXid_IMPL", "'NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, "
                      "%s'; what the codes mean: NVIDIA's Xid catalog"),
        examples=(Example(example, {"code": code}),),
        near_misses=("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",))


def _aer_what(m) -> str:
    return "pcie_fatal" if "(Fatal)" in m.group("severity") else "pcie_uncorrected"


_BDF = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"  # domain:bus:device.function
_AER_SOURCE = re.compile(r"received(?: from|:) (" + _BDF + ")")
_AER_PRINTER = re.compile(r"\b(" + _BDF + r"): ")


def _aer_device(m) -> str | None:
    """The device in error: the one the root port received the message from, else the
    device that prints the line (dev_printk's 'nvidia 0000:3b:00.0: ' prefix)."""
    found = _AER_SOURCE.search(m.string) or _AER_PRINTER.search(m.string)
    return found.group(1) if found else None


# A launcher's child killed by SIGKILL, in the exception a Python launcher raises for it
# (torch.distributed.launch before torchrun, DeepSpeed before 0.5, many scripts).
SUBPROCESS = (
    Signature(
        id="python.subprocess_sigkill", signal="oom", oneof="oom",
        prefilter=("died with <Signals.SIGKILL",),
        pattern=r"Command .* died with <Signals\.SIGKILL: 9>",
        fields={"device": const("host"), "weak": const(True), "tried": const(None),
                "gpu": const(None)},
        source=Source(CPYTHON, "Lib/subprocess.py", "CalledProcessError.__str__",
                      "\"Command '%s' died with %r.\" for a negative returncode"),
        examples=(Example("subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', "
                          "'train.py', '--local_rank=3']' died with <Signals.SIGKILL: 9>.",
                          {"device": "host", "weak": True}),),
        near_misses=("subprocess.CalledProcessError: Command '['python', 'x.py']' died with "
                     "<Signals.SIGSEGV: 11>.",)),
)

GPU_DRIVER = (
    _xid("nvrm.xid_app_fault", "cuda_error", _XID_APP,
         "NVRM: Xid (PCI:0000:86:00): 31, pid=20713, name=python3, Ch 00000010, intr 00000000. "
         "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f3a_91200000. Fault is of type "
         "FAULT_PDE ACCESS_TYPE_VIRT_READ", 31),
    _xid("nvrm.xid_app_stopped", "xid_app_stopped", _XID_STOPPED,
         "[Thu Jun 12 04:11:52 2025] NVRM: Xid (PCI:0000:1a:00): 43, pid=88123, "
         "name=pt_main_thread, Ch 00000008", 43),
    Signature(
        id="nvrm.xid", signal="xid", prefilter=("Xid",), oneof="xid",
        pattern=r"\bXid\b[^:]*?(?:\(PCI:(?P<pci>[^)]+)\))?:\s*(?P<code>\d+)",
        fields={"code": int, "pci": str, "what": compute(_xid_what), "pid": _XID_PID},
        source=Source("NVIDIA/open-gpu-kernel-modules", "src/nvidia/src/kernel/gpu/rc/kernel_rc.c",
                      "krcReportXid_IMPL", "in dmesg / the kernel log"),
        examples=(Example("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
                          {"code": 79, "pci": "0000:3b:00", "what": "fell_off_bus"}),
                  Example("NVRM: Xid (PCI:0000:c1:00 GPU-I:02): 94, pid=7001, name=python, "
                          "Contained: CE User Channel (0x9). RST: No, D-RST: No",
                          {"code": 94, "what": "ecc"})),
        near_misses=("Xid errors: none",)),
    Signature(
        id="linux.pcie_aer_uncorrected", signal="hardware_error",
        prefilter=("Uncorrected (", ("Bus Error", "AER")),
        pattern=r"(?:Bus Error: severity=|AER: (?:Multiple )?)"
                r"(?P<severity>Uncorrected \((?:Non-)?Fatal\))",
        fields={"what": compute(_aer_what), "pci": compute(_aer_device), "message": body()},
        source=Source(LINUX, "drivers/pci/pcie/aer.c", "aer_print_error",
                      "'PCIe Bus Error: severity=%s, type=%s, (%s)' (6.x: '%s Bus Error', PCIe or "
                      "CXL), severity from aer_error_severity_string; Corrected errors are "
                      "routine and not read"),
        also=(Source(LINUX, "drivers/pci/pcie/aer.c", "aer_print_port_info",
                     "'AER: %s%s error received: ...' (4.x); 5.x+: '%s%s error message received "
                     "from %s', the first %s 'Multiple '"),),
        examples=(Example("[Tue Feb  4 09:12:40 2025] nvidia 0000:3b:00.0: PCIe Bus Error: "
                          "severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
                          {"what": "pcie_fatal", "pci": "0000:3b:00.0"}),
                  Example("pcieport 0000:3a:00.0: AER: Multiple Uncorrected (Non-Fatal) error "
                          "message received from 0000:3b:00.0",
                          {"what": "pcie_uncorrected", "pci": "0000:3b:00.0"}),
                  Example("kernel: pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error "
                          "received: 0000:41:00.0", {"what": "pcie_fatal"})),
        near_misses=("pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, type=Physical "
                     "Layer, (Receiver ID)",
                     "pcieport 0000:00:1c.5: AER: Corrected error received: 0000:00:1c.5")),
    Signature(
        id="nvidia_smi.driver_unreachable", signal="hardware_error",
        prefilter=("couldn't communicate with the NVIDIA driver",),
        pattern=r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
        fields={"what": const("driver_unreachable"), "message": body()},
        source=Source("NVIDIA/go-nvml", "gen/nvml/nvml.h", "nvmlInit_v2",
                      "nvidia-smi is closed source: it prints this sentence when nvmlInit fails "
                      "with NVML_ERROR_DRIVER_NOT_LOADED (the kernel module is not loaded or "
                      "does not answer: a crashed driver, a kernel updated without the module)"),
        examples=(Example("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                          "driver. Make sure that the latest NVIDIA driver is installed and "
                          "running.", {"what": "driver_unreachable"}),),
        near_misses=("Failed to initialize NVML: Driver/library version mismatch",)),
    # The kernel's half of "Failed to initialize NVML: Driver/library version mismatch": the
    # user-space driver was upgraded, the loaded kernel module was not (reboot or reload it)
    Signature(
        id="nvrm.api_mismatch", signal="version_error", prefilter=("API mismatch",),
        pattern=r"NVRM: API mismatch: the client has the version (?P<client>\S+?),",
        fields={"what": const("NVIDIA kernel module and user-space driver differ"),
                "message": body()},
        source=Source("NVIDIA/open-gpu-kernel-modules", "src/nvidia/arch/nvalloc/unix/src/osapi.c",
                      "RmPerformVersionCheck",
                      "'NVRM: API mismatch: the client has the version %s, but\\nNVRM: this kernel "
                      "module has the version %s.  Please ...' over four lines"),
        examples=(Example("[2140090.470492] NVRM: API mismatch: the client has the version "
                          "550.127.05, but", {"message": "[2140090.470492] NVRM: API mismatch: "
                                                         "the client has the version 550.127.05, "
                                                         "but"}),),
        near_misses=("NVRM: API version check passed",)),
    # The driver could not bring a GPU up (after a fall off the bus, a bad board, or a driver
    # that does not support it): CUDA then sees fewer GPUs, or none.
    Signature(
        id="nvrm.rm_init_adapter_failed", signal="hardware_error",
        prefilter=(("RmInitAdapter failed", "rm_init_adapter failed"),),
        pattern=r"RmInitAdapter failed!|rm_init_adapter failed",
        fields={"what": const("gpu_init_failed"), "message": body()},
        source=Source("NVIDIA/open-gpu-kernel-modules", "src/nvidia/arch/nvalloc/unix/src/osinit.c",
                      "RmInitAdapter", "'RmInitAdapter failed! (0x%x:0x%x:%d)' with the GPU's "
                      "'NVRM: GPU %04x:%02x:%02x.%x: ' prefix"),
        also=(Source("NVIDIA/open-gpu-kernel-modules", "kernel-open/nvidia/nv.c",
                     "nv_start_device", "'NVRM: rm_init_adapter failed, device minor number %d'"),),
        examples=(Example("Aug 12 06:54:37 gpu-n14 kernel: NVRM: GPU 0000:39:00.0: RmInitAdapter "
                          "failed! (0x62:0x40:2393)", {"what": "gpu_init_failed"}),
                  Example("[   14.1023] NVRM: GPU 0000:07:00.0: rm_init_adapter failed, device "
                          "minor number 3", {"what": "gpu_init_failed"})),
        near_misses=("NVRM: GPU 0000:39:00.0: RmInitAdapter succeeded!",)),
    # A device whose config space reads all ones is gone from the bus: its revision byte
    # reads 0xff (a real NVIDIA GPU revision is a1, a2 ...).
    Signature(
        id="lspci.gpu_rev_ff", signal="hardware_error", prefilter=("(rev ff)", "NVIDIA"),
        pattern=r"NVIDIA Corporation\b.*\(rev ff\)",
        fields={"what": const("fell_off_bus"), "message": body()},
        source=Source("pciutils/pciutils", "lspci.c", "show_terse",
                      "' (rev %02x)' of the config space's revision byte"),
        examples=(Example("1c:00.0 3D controller: NVIDIA Corporation GA100 [A100 PCIe 80GB] "
                          "(rev ff)", {"what": "fell_off_bus"}),),
        near_misses=("1c:00.0 3D controller: NVIDIA Corporation GA100 [A100 PCIe 80GB] (rev a1)",
                     "00:1f.6 Ethernet controller: Intel Corporation (rev ff) NVIDIA")),
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

KUBECTL = "kubernetes/kubectl"
KUBERNETES = (
    # A pod's container killed at its memory limit: the runtime's reason, as `kubectl describe
    # pod` prints it under "State:"/"Last State: Terminated", or in the STATUS column of
    # `kubectl get pods` ("trainer-worker-1   0/1   OOMKilled   3   12m"), or in the YAML.
    _host_oom("kubernetes.oom_killed", ("OOMKilled",),
              r"^\s*\"?[Rr]eason\"?:\s+\"?OOMKilled\b"
              r"|^\s*[a-z0-9][-a-z0-9.]*\s+\d+/\d+\s+OOMKilled\s+\d+",
              Source(KUBECTL, "pkg/describe/describe.go", "describeContainerState",
                     "'Reason:\\t%s' of a Terminated state; the reason is the runtime's "
                     "(containerd pkg/cri/server/helpers.go oomExitReason = \"OOMKilled\"); "
                     "kubectl get pods shows it as STATUS (kubernetes/kubernetes "
                     "pkg/printers/internalversion/printers.go printPod)"),
              "      Reason:       OOMKilled", "  Warning  BackOff  kubelet  OOMKilled pods "
              "are restarted", more=("pytorchjob-llama-worker-2   0/1     OOMKilled   3 (41s ago)"
                                     "   27m",
                                     "        reason: OOMKilled")),
    # The kubelet evicting pods because the node ran short of memory (pod status reason
    # "Evicted" with this message; shown in `kubectl describe pod` and its events).
    _host_oom("kubernetes.evicted_low_memory", ("low on resource: memory",),
              r"The node was low on resource: memory",
              Source("kubernetes/kubernetes", "pkg/kubelet/eviction/helpers.go",
                     "nodeLowMessageFmt", "'The node was low on resource: %v. ' (+ 'Container %s "
                     "was using %s, request is %s, has larger consumption of %v. '); other "
                     "resources (ephemeral-storage, pids) are not memory"),
              "Message:  The node was low on resource: memory. Threshold quantity: 100Mi, "
              "available: 81232Ki. Container trainer was using 58736412Ki, request is 32Gi, has "
              "larger consumption of memory.",
              "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi"),
    # Exit code 137 = 128 + SIGKILL: the OOM killer most often, but also a liveness probe or
    # a grace period that ran out; on its own it is a hint.
    _host_oom("kubernetes.exit_code_137", ("Exit Code:",), r"^\s*Exit Code:\s+137\s*$",
              Source(KUBECTL, "pkg/describe/describe.go", "describeContainerState",
                     "'Exit Code:\\t%d' of a Terminated state"),
              "      Exit Code:    137", "      Exit Code:    1", weak=True),
)

# SIGBUS: on Linux a process touching a page of a mapped file that cannot be backed, in a
# training job the shared memory of /dev/shm (DataLoader workers' tensors, NCCL's SHM
# transport) once the tmpfs is full; torch's own SIGBUS handler says so (handler_SIGBUS)
BUS_ERROR = (
    Signature(
        id="shell.bus_error", signal="bus_error", prefilter=("Bus error",),
        pattern=r"^\s*(?:\S+: line \d+: +\d+ )?Bus error\b(?: \(core dumped\)|:|\s*$| {2,}\S)",
        fields={},
        source=Source("bminor/bash", "jobs.c", "notify_of_job_status",
                      "strsignal(SIGBUS) as the shell reports a job's death ('Bus error (core "
                      "dumped)'); glibc's psiginfo adds the si_code ('Bus error: nonexistent "
                      "physical address', BUS_ADRERR)"),
        examples=(Example("Bus error (core dumped)"),
                  Example("Bus error: nonexistent physical address"),
                  Example("/var/spool/slurmd/job7/slurm_script: line 9: 4242 Bus error"
                          "               (core dumped) python train.py")),
        near_misses=("ERROR: Unexpected bus error encountered in worker.",
                     "Bus error handling is documented below")),
)

ENTRIES = OOM + SUBPROCESS + GPU_DRIVER + NAMES + KUBERNETES + BUS_ERROR
