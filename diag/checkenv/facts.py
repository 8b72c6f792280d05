"""The facts one rank collects about its environment: plain values, JSON both ways.

Checks are pure functions of these; ``collect`` and ``netfacts`` are the only code that
reads the machine.
Unit tests build them by hand.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field, fields

UNLIMITED = -1  # how an unlimited rlimit is stored


@dataclass(frozen=True)
class Iface:
    """One network interface; ``addrs`` are CIDR strings such as ``10.0.0.1/24``."""

    name: str
    up: bool
    """Administratively and operationally up (IFF_UP and IFF_RUNNING: carrier, not
    dormant), so it can carry traffic; ``ip`` shows such an interface UP, LOWER_UP."""
    addrs: tuple[str, ...] = ()
    mtu: int = 1500
    loopback: bool = False

    @property
    def ips(self) -> tuple[str, ...]:
        return tuple(a.split("/")[0] for a in self.addrs)


@dataclass(frozen=True)
class Resolution:
    """A name looked up with getaddrinfo; ``error`` set when it did not resolve."""

    name: str
    addrs: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Route:
    """The kernel's route to DST (``ip route get DST``): the interface and source address
    traffic to DST leaves by."""

    dst: str
    dev: str | None = None
    src: str | None = None
    local: bool = False
    """DST is an address of this node."""
    error: str | None = None


@dataclass(frozen=True)
class PortProbe:
    """A TCP connect to MASTER_ADDR:MASTER_PORT.

    ``outcome``: open, refused (host answered, nothing listens), timeout (dropped on the
    way: firewall, link down, wrong address), unreachable (no route) or error.
    """

    addr: str
    port: int
    outcome: str
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Limits:
    """Soft and hard rlimits; memlock in bytes; ``UNLIMITED`` (-1) for unlimited."""

    nofile_soft: int
    nofile_hard: int
    memlock_soft: int
    memlock_hard: int


@dataclass(frozen=True)
class Versions:
    """Component versions; None where the component is absent (no CUDA, no driver)."""

    python: str
    torch: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    driver: str | None = None
    ddiag: str | None = None


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as NVML reports it; a field is None where NVML answered "Not Supported"
    (or failed), and the call is then listed in ``unanswered``."""

    index: int
    uuid: str
    name: str = ""
    bus_id: str = ""
    ecc_volatile: int | None = None
    """Uncorrected ECC errors since the driver loaded (nvmlDeviceGetTotalEccErrors)."""
    ecc_aggregate: int | None = None
    """Uncorrected ECC errors over the GPU's life (kept in its InfoROM)."""
    remap_pending: bool | None = None
    """A row remap waits for a GPU reset (nvmlDeviceGetRemappedRows; A100 and later)."""
    remap_failed: bool | None = None
    retired_pending: bool | None = None
    """A page retirement waits for a reset (nvmlDeviceGetRetiredPagesPendingStatus; before
    A100)."""
    clock_reasons: int | None = None
    """nvmlDeviceGetCurrentClocksEventReasons: the bitmask of why clocks are held down."""
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlinks_up: int = 0
    nvlinks_down: tuple[int, ...] = ()
    """Link numbers NVML reports inactive; empty and ``nvlinks_up`` 0 without NVLink."""
    compute_mode: int | None = None
    """0 default, 1 exclusive thread, 2 prohibited, 3 exclusive process (nvml.h)."""
    mig_mode: int | None = None
    persistence: int | None = None
    unanswered: tuple[str, ...] = ()


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid (PCI:...): N, ...`` line of the kernel log."""

    xid: int
    bus_id: str
    text: str
    age_s: float | None = None
    """Seconds between the line and the collection; None when the log had no clock."""


@dataclass(frozen=True)
class GpuFacts:
    """The node's GPUs through NVML, and the Xid lines of its kernel log."""

    nvml_error: str | None = None
    """Why NVML gave no answers (pynvml missing, nvmlInit failed); None when it did."""
    driver: str | None = None
    cuda_driver: str | None = None
    """The newest CUDA the driver supports, "12.4" (nvmlSystemGetCudaDriverVersion)."""
    devices: tuple[GpuDevice, ...] = ()
    xids: tuple[XidEvent, ...] = ()
    kernel_log: str = "not read"
    """Where the Xid lines came from (dmesg, journalctl -k), or why it was not read."""
    kernel_log_read: bool = False


@dataclass(frozen=True)
class RankFacts:
    """Everything one rank's checks look at.

    ``env`` holds the values of the variables ddiag knows the families of (NCCL_*,
    TORCH_*, MASTER_*, ...); ``env_names`` holds every variable's name, never the value,
    so that typos are found without copying secrets into snapshot files.
    """

    node: str
    hostname: str
    env: dict[str, str] = field(default_factory=dict)
    env_names: tuple[str, ...] = ()
    interfaces: tuple[Iface, ...] = ()
    hostname_addrs: Resolution | None = None
    master: Resolution | None = None
    master_route: Route | None = None
    master_port: PortProbe | None = None
    limits: Limits | None = None
    shm_bytes: int | None = None
    cpus: int = 1
    ib_devices: tuple[str, ...] = ()
    dev_infiniband: bool = False
    libibverbs_error: str | None = "not tried"
    """None when libibverbs loaded; else why it did not."""
    versions: Versions = field(default_factory=lambda: Versions(python="?"))
    gpu_uuids: tuple[str, ...] = ()
    """The GPUs this rank sees, in CUDA ordinal order."""
    host_gpus: int | None = None
    """The GPUs the node has whatever CUDA_VISIBLE_DEVICES says (the driver's list);
    0 without an NVIDIA driver, None when unknown."""
    import_errors: dict[str, str] = field(default_factory=dict)
    """Variables torch rejected when its import-time parsers re-ran on them, with its
    message (they are set aside while check-env imports torch)."""
    time: float = 0.0
    gpu: GpuFacts | None = None
    """None in snapshots written before the GPU checks (or when not collected)."""

    def iface(self, name: str) -> Iface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def iface_of_ip(self, ip: str) -> Iface | None:
        return next((i for i in self.interfaces if ip in i.ips), None)

    def to_json(self) -> dict:
        return asdict(self)


_NESTED = {"hostname_addrs": Resolution, "master": Resolution, "master_route": Route,
           "master_port": PortProbe, "limits": Limits, "versions": Versions}


def _tuples(cls: type, doc: dict) -> dict:
    """JSON lists back to the tuples the frozen dataclasses declare."""
    names = {f.name for f in fields(cls)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items() if k in names}


def facts_from_json(doc: dict) -> RankFacts:
    values = _tuples(RankFacts, doc)
    for key, cls in _NESTED.items():
        if isinstance(values.get(key), dict):
            values[key] = cls(**_tuples(cls, values[key]))
    values["interfaces"] = tuple(Iface(**_tuples(Iface, i)) for i in doc.get("interfaces", ()))
    values["env"] = dict(doc.get("env", {}))
    values["gpu"] = gpu_from_json(doc["gpu"]) if isinstance(doc.get("gpu"), dict) else None
    values["import_errors"] = dict(doc.get("import_errors", {}))
    return RankFacts(**values)


def gpu_from_json(doc: dict) -> GpuFacts:
    values = _tuples(GpuFacts, doc)
    values["devices"] = tuple(GpuDevice(**_tuples(GpuDevice, d)) for d in doc.get("devices", ()))
    values["xids"] = tuple(XidEvent(**_tuples(XidEvent, x)) for x in doc.get("xids", ()))
    return GpuFacts(**values)


def is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip.split("%")[0]).is_loopback
    except ValueError:
        return False
