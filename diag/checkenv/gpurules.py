"""The GPU health checks as data: each one's id, what it reads (the NVML call or the kernel
log), when it fails or warns, and its fix. ``checks_gpu`` judges, docs/check-env.md's GPU
table is ``markdown()`` of this list (a test keeps the two the same)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuRule:
    id: str
    reads: str
    """The NVML call(s) or file the check reads."""
    when: str
    """fail / warn when: what the check flags."""
    fix: str


RULES: tuple[GpuRule, ...] = (
    GpuRule("gpu.nvml", "`nvmlInit`, `nvmlDeviceGetCount`",
            "skip: pynvml not installed, or no NVIDIA GPU/driver (every other GPU check then "
            "says nothing); warn: the node has GPUs (driver or CUDA sees them) but nvmlInit "
            "fails",
            "install the driver's NVML library in the image (the container runtime mounts "
            "libnvidia-ml.so.1 with --gpus); a GPU that fell off the bus can also take NVML "
            "down: see gpu.xid"),
    GpuRule("gpu.ecc", "`nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE / AGGREGATE)`",
            "fail: uncorrected ECC errors since the driver loaded (volatile); warn: only "
            "over the GPU's life (aggregate)",
            "drain the node and reset the GPU (nvidia-smi -r, or reboot) so the bad memory is "
            "remapped; replace the GPU if errors come back"),
    GpuRule("gpu.remap", "`nvmlDeviceGetRemappedRows`, `nvmlDeviceGetRetiredPagesPendingStatus`",
            "fail: a row remap failed (out of spare rows), or a row remap or page retirement "
            "is pending (it takes effect at the next GPU reset)",
            "pending: drain the node and reset the GPU; failed: replace the GPU"),
    GpuRule("gpu.throttle", "`nvmlDeviceGetCurrentClocksEventReasons` (older drivers: "
            "`...ThrottleReasons`)",
            "warn: clocks held down by HW slowdown, HW thermal slowdown, HW power brake or "
            "SW thermal slowdown: this GPU's rank becomes every collective's straggler",
            "check the node's cooling, fans and power supply (nvidia-smi -q -d "
            "PERFORMANCE,TEMPERATURE,POWER); a power brake is asserted by the chassis"),
    GpuRule("gpu.pcie", "`nvmlDeviceGetCurrPcieLinkWidth` / `...MaxPcieLinkWidth`, "
            "`...CurrPcieLinkGeneration` / `...MaxPcieLinkGeneration`",
            "warn: the link trained narrower than its maximum (x8 of x16): host transfers and "
            "GPUDirect RDMA to the NIC run at a fraction. A generation below the maximum is "
            "reported, not flagged: an idle GPU lowers it to save power",
            "reseat the GPU or its riser, check the slot and BIOS PCIe settings; "
            "nvidia-smi -q -d PCI shows the link"),
    GpuRule("gpu.nvlink", "`nvmlDeviceGetNvLinkState(link)` for each link",
            "warn: an NVLink of a GPU that has NVLink is down: NCCL's traffic to its peers "
            "drops to fewer links (or PCIe), and with NVSwitch the fabric may exclude it",
            "nvidia-smi nvlink -s / -e; reset the GPUs or reboot the node; check Fabric "
            "Manager (systemctl status nvidia-fabricmanager) on NVSwitch systems"),
    GpuRule("gpu.compute_mode", "`nvmlDeviceGetComputeMode`",
            "fail: Prohibited (no process may use the GPU); warn: Exclusive Process or "
            "Exclusive Thread (a second process on it fails with 'all CUDA-capable devices "
            "are busy or unavailable')",
            "nvidia-smi -c DEFAULT (root), or ask the cluster's admins"),
    GpuRule("gpu.mig", "`nvmlDeviceGetMigMode`",
            "warn: MIG enabled: a rank gets an instance, not the GPU, and NCCL has no "
            "NVLink or P2P between instances",
            "nvidia-smi -mig 0 (root; takes a GPU reset), or request whole GPUs"),
    GpuRule("gpu.persistence", "`nvmlDeviceGetPersistenceMode`",
            "warn: persistence mode off: every process start waits for the driver to "
            "initialise the GPU (seconds each), and its state is torn down between jobs",
            "run nvidia-persistenced (or nvidia-smi -pm 1 as root)"),
    GpuRule("gpu.count", "`nvmlDeviceGetCount` against `LOCAL_WORLD_SIZE`",
            "fail: fewer GPUs on the node than ranks per node; warn: more, with "
            "CUDA_VISIBLE_DEVICES unset (GPUs left idle)",
            "match --nproc-per-node to the node's GPUs (or Slurm's --gpus-per-node)"),
    GpuRule("gpu.cuda_driver", "`nvmlSystemGetCudaDriverVersion` against "
            "`torch.version.cuda`",
            "fail: the driver supports an older CUDA major than torch was built with "
            "('CUDA driver version is insufficient for CUDA runtime version'); warn: an older "
            "minor of the same major (runs under CUDA's minor-version compatibility, but "
            "PTX that needs the newer driver fails to JIT)",
            "upgrade the NVIDIA driver, or install the torch build for the driver's CUDA "
            "(pip install torch --index-url https://download.pytorch.org/whl/cuXYZ)"),
    GpuRule("gpu.xid", "the kernel log: `dmesg`, else `journalctl -k -b` (5 s, newest "
            "8 MiB); `NVRM: Xid` lines of the last 24 h, their meaning from `xid.tsv`",
            "fail: an Xid whose row says fail (48 double-bit ECC, 79 fallen off the bus, 74 "
            "NVLink, 94/95 ECC, 119/120 GSP, ...); warn: others (13, 31, 43, 45: usually an "
            "earlier program's own fault). skip: the log could not be read (dmesg_restrict, "
            "no journal access)",
            "each Xid's action (xid.tsv); to read the log as a user: sysctl "
            "kernel.dmesg_restrict=0, or add the user to the systemd-journal group"),
    GpuRule("cross.gpu", "the GPU facts of one rank per node",
            "fail: the NVIDIA driver, the GPU model or count, or GPU health (ECC, remaps, "
            "Xids) differs between nodes, naming the odd nodes; warn: a node's PCIe width "
            "or NVLink links up differ from its peers'",
            "fix the odd node (its own gpu.* rows say what is wrong), or drain it from the "
            "job"),
)
BY_ID = {r.id: r for r in RULES}


def fix(check: str) -> str:
    return BY_ID[check].fix


def markdown() -> str:
    """The docs table of the GPU checks."""
    rows = ["| check | reads | fail / warn when | fix |", "|---|---|---|---|"]
    rows += [f"| `{r.id}` | {r.reads} | {r.when} | {r.fix} |" for r in RULES]
    return "\n".join(rows) + "\n"


__all__ = ["BY_ID", "GpuRule", "RULES", "fix", "markdown"]
