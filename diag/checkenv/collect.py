"""Collect one rank's facts from the machine: with ``netfacts`` (interfaces and routes),
the only module of check-env that reads it.

Every probe is bounded in time (a name lookup or a connect can hang for minutes on a
broken network) and never raises: what could not be read is recorded as such.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import errno
import os
import platform
import resource
import socket
import time
from typing import Callable, Mapping, TypeVar

from diag.checkenv import importenv
from diag.checkenv.gpufacts import gpu_facts
from diag.checkenv.catalog import in_family
from diag.checkenv.facts import (
    UNLIMITED, GpuFacts, Iface, Limits, PortProbe, RankFacts, Resolution, Route, Versions,
)
from diag.checkenv.netfacts import interfaces, route

T = TypeVar("T")
LOOKUP_TIMEOUT_S = 3.0
CONNECT_TIMEOUT_S = 2.0
NVML_TIMEOUT_S = 20.0   # NVML can hang on a GPU that fell off the bus, as nvidia-smi does


def bounded(fn: Callable[[], T], seconds: float, on_timeout: T) -> T:
    """Run ``fn`` in a daemon thread; a lookup stuck in the resolver is abandoned."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn).result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        return on_timeout
    finally:
        pool.shutdown(wait=False)


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def resolve(name: str) -> Resolution:
    def lookup() -> Resolution:
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            return Resolution(name, error=str(exc))
        return Resolution(name, tuple(dict.fromkeys(i[4][0] for i in infos)))
    return bounded(lookup, LOOKUP_TIMEOUT_S,
                   Resolution(name, error=f"lookup timed out after {LOOKUP_TIMEOUT_S:.0f} s"))


def probe_port(addr: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> PortProbe:
    start = time.monotonic()
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((addr, port))
            outcome, error = "open", None
        except OSError as exc:
            outcome, error = _connect_outcome(exc), str(exc)
    return PortProbe(addr, port, outcome, error, time.monotonic() - start)


def _connect_outcome(exc: OSError) -> str:
    if isinstance(exc, socket.timeout) or exc.errno == errno.ETIMEDOUT:
        return "timeout"
    if exc.errno == errno.ECONNREFUSED:
        return "refused"
    if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "unreachable"
    return "error"


def limits() -> Limits:
    def norm(v: int) -> int:
        return UNLIMITED if v == resource.RLIM_INFINITY else v
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return Limits(norm(nofile[0]), norm(nofile[1]), norm(memlock[0]), norm(memlock[1]))


def shm_bytes(path: str = "/dev/shm") -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def libibverbs_error() -> str | None:
    try:
        ctypes.CDLL("libibverbs.so.1")
        return None
    except OSError as exc:
        return str(exc)


def ib_devices(root: str = "/sys/class/infiniband") -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir(root)))
    except OSError:
        return ()


def driver_version() -> str | None:
    text = _read("/proc/driver/nvidia/version")
    words = text.split("Kernel Module", 1)[-1].split() if "Kernel Module" in text else []
    return words[0] if words else None


def torch_facts() -> tuple[Versions, tuple[str, ...]]:
    """Versions and the visible GPUs' UUIDs; torch is imported here, in the rank only."""
    import torch

    from diag import __version__

    cuda_ok = torch.cuda.is_available()
    nccl = None
    if cuda_ok:
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - a build without NCCL
            nccl = None
    uuids = tuple(str(torch.cuda.get_device_properties(i).uuid)
                  for i in range(torch.cuda.device_count())) if cuda_ok else ()
    return Versions(platform.python_version(), torch.__version__, torch.version.cuda, nccl,
                    driver_version(), __version__), uuids


def master_facts(env: Mapping[str, str], ifaces: tuple[Iface, ...]
                 ) -> tuple[Resolution | None, Route | None, PortProbe | None]:
    from diag.checkenv.checks_master import bad_address

    name = env.get("MASTER_ADDR", "").strip()
    if not name:
        return None, None, None
    res = resolve(name)
    ips = sorted(res.addrs, key=lambda a: ":" in a)  # IPv4 first, as c10d tries it first
    # Never send anything to a netmask, broadcast or wildcard: the check says why it is wrong.
    if not ips or bad_address(ips[0], RankFacts(node="", hostname="", interfaces=ifaces)):
        return res, None, None
    port = env.get("MASTER_PORT", "").strip()
    probe = probe_port(ips[0], int(port)) if port.isdigit() and 0 < int(port) < 65536 else None
    return res, route(ips[0], ifaces), probe


def host_gpus(root: str = "/proc/driver/nvidia/gpus") -> int | None:
    """The NVIDIA driver's GPUs (one folder each), blind to CUDA_VISIBLE_DEVICES; a
    container's runtime shows it only the GPUs it was given. None when the driver's
    device nodes are there but not its /proc entry (some runtimes): unknown, not 0."""
    try:
        return len(os.listdir(root))
    except OSError:
        return None if os.path.exists("/dev/nvidiactl") else 0


def gpu(host: int | None) -> GpuFacts:
    return bounded(lambda: gpu_facts(host), NVML_TIMEOUT_S, GpuFacts(
        nvml_error=f"NVML did not answer within {NVML_TIMEOUT_S:.0f} s: a GPU may have "
        "fallen off the bus (nvidia-smi hangs the same way)"))


def collect(env: Mapping[str, str] | None = None) -> RankFacts:
    """``env`` defaults to this process's; its import-checked variables are set aside
    before torch is imported here, and vetted after."""
    own = env is None
    if own:
        importenv.set_aside(os.environ)
    env = importenv.real_env(os.environ if env is None else env)
    host, ifaces = socket.gethostname(), interfaces()
    master, master_route, master_port = master_facts(env, ifaces)
    versions, uuids = torch_facts()
    import_errors = importenv.vet_after_import() if own else {}
    node_gpus = host_gpus()
    return RankFacts(
        node=env.get("SLURMD_NODENAME") or host, hostname=host,
        env={k: v for k, v in env.items() if in_family(k)}, env_names=tuple(sorted(env)),
        interfaces=ifaces, hostname_addrs=resolve(host), master=master,
        master_route=master_route, master_port=master_port, limits=limits(),
        shm_bytes=shm_bytes(), cpus=len(os.sched_getaffinity(0)), ib_devices=ib_devices(),
        dev_infiniband=os.path.isdir("/dev/infiniband"), libibverbs_error=libibverbs_error(),
        versions=versions, gpu_uuids=uuids, host_gpus=node_gpus,
        import_errors=import_errors, time=time.time(), gpu=gpu(node_gpus))
