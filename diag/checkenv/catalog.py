"""The catalog of distributed-training environment variables: meaning, valid values,
scope across ranks, and what replaced the deprecated ones.

A data table: checks read it, nothing here reads the environment. Names come from
PyTorch's c10d sources (ProcessGroupNCCL.hpp, FlightRecorder.hpp, torchrun), NCCL's
environment-variable documentation, and gloo.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass
from typing import Callable


class Scope(str, enum.Enum):
    """How a variable may differ across the ranks of one job."""

    JOB = "job"
    """Must be identical on every rank: a difference changes protocol or topology."""
    NODE = "node"
    """May differ between nodes (interface or HCA names), must match within a node."""
    RANK = "rank"
    """Rank-specific by design (RANK, LOCAL_RANK, per-task device masks)."""
    FREE = "free"
    """Logging only: a difference is harmless."""


@dataclass(frozen=True)
class Values:
    """The valid values of a variable: ``text`` for people, ``accepts`` for checks."""

    text: str
    accepts: Callable[[str], bool]


@dataclass(frozen=True)
class Var:
    name: str
    meaning: str
    values: Values
    scope: Scope = Scope.JOB
    replaced_by: str | None = None
    """Set when the name is deprecated or removed: what to use instead."""
    if_invalid: str | None = None
    """What its reader does with an invalid value when it merely ignores it (a warn);
    None when an invalid value breaks or changes the job (a fail)."""
    import_checked: bool = False
    """``import torch`` itself validates it and raises: every process that imports torch
    (torchrun, each rank) dies before it starts."""


def _int_in(lo: int, hi: int | None = None) -> Values:
    text = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
    return Values(text, lambda v: _is_int(v) and int(v) >= lo and (hi is None or int(v) <= hi))


def _is_int(value: str) -> bool:
    return bool(re.fullmatch(r"[+-]?\d+", value.strip()))


def _one_of(*choices: str) -> Values:
    allowed = {c.lower() for c in choices}
    return Values(" | ".join(choices), lambda v: v.strip().lower() in allowed)


def _list_of(*choices: str, negate: bool = True) -> Values:
    """NCCL's comma lists, optionally negated with a leading ``^``."""
    allowed = {c.lower() for c in choices}

    def accepts(v: str) -> bool:
        body = v.strip()[1:] if negate and v.strip().startswith("^") else v.strip()
        items = [i.strip().lower() for i in body.split(",")]
        return bool(body) and all(i in allowed for i in items)
    return Values(("[^]" if negate else "") + ",".join(choices) + " (comma list)", accepts)


def _nccl_algo(v: str) -> bool:
    # Newer NCCL also takes per-collective lists: "allreduce:tree,ring;broadcast:ring".
    algos = _list_of("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
    parts = [p.split(":", 1)[-1] for p in v.split(";") if p.strip()]
    return bool(parts) and all(algos.accepts(p) for p in parts)


def _cuda_devices(v: str) -> bool:
    items = [i.strip() for i in v.split(",")]
    return v.strip() == "" or all(re.fullmatch(r"\d+|GPU-[0-9a-fA-F-]+|MIG-[\w/-]+", i)
                                  for i in items)


def _host(v: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9_.:%\[\]-]+", v.strip()))


BOOL = Values("0 | 1", lambda v: v.strip() in ("0", "1"))
# c10d's getCvarBool (torch/csrc/distributed/c10d/Utils.hpp): these ten, any case; anything
# else is TORCH_CHECK(false, "Invalid value for environment variable: ...").
TORCH_BOOL = Values("1 | 0 | true | false | yes | no | y | n | t | f (any case)",
                    lambda v: v.lower() in ("1", "0", "true", "false", "yes", "no", "y", "n",
                                            "t", "f"))
POS_INT = _int_in(1)
NONNEG_INT = _int_in(0)
ANY = Values("any string", lambda v: True)
IFNAMES = Values("comma list of interface names", lambda v: bool(v.strip()))
NCCL_IFNAMES = Values("[^][=]prefix,... (^ excludes, = matches exactly)", lambda v: bool(
    v.strip().lstrip("^=").strip()))
PORT = _int_in(1, 65535)
HOST = Values("a hostname or IP address", _host)
LEVEL = Values("LOC | NVL | PIX | PXB | PHB | SYS or an integer",
               lambda v: _is_int(v) or v.strip().upper() in
               ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS"))
CUDA_DEVICES = Values("comma list of GPU ordinals or GPU-/MIG- UUIDs", _cuda_devices)
NCCL_ALGO = Values("Ring,Tree,CollnetDirect,CollnetChain,NVLS,NVLSTree,PAT (^ negates; "
                   "or coll:algos;...)", _nccl_algo)


def _per_collective(items: Values) -> Callable[[str], bool]:
    """NCCL's parseList (src/graph/tuning.cc): ``[coll:]list;coll:list...``."""
    def accepts(v: str) -> bool:
        parts = [p.split(":", 1)[-1] for p in v.split(";") if p.strip()]
        return bool(parts) and all(items.accepts(p) for p in parts)
    return accepts


NCCL_PROTO = Values("LL,LL128,Simple (^ negates; or coll:protos;...)",
                    _per_collective(_list_of("LL", "LL128", "Simple")))
# src/debug.cc of 2.20-2.28 (BOOTSTRAP and REG from 2.21, PROFILE 2.22, RAS 2.24).
NCCL_SUBSYS = _list_of("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC",
                       "CALL", "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "ALL")
# src/misc/socket.cc: strcmp, so the case matters; other text leaves the family unforced.
AF_FAMILY = Values("AF_INET | AF_INET6 (exactly, upper case)",
                   lambda v: v in ("AF_INET", "AF_INET6"))


def _torch_logs(v: str) -> bool:
    # torch._logging's own pattern; "help" prints the names and raises, "" crashes it.
    return bool(re.fullmatch(r"((\+|-)?[\w.]+,\s*)*(\+|-)?[\w.]+", v)) and v not in (
        "help", "+help")


def _log_format(v: str) -> bool:
    if v in ("short", "basic"):
        return True
    try:
        logging.Formatter(v)
    except (ValueError, TypeError):
        return False
    return True


TORCH_LOGS = Values("comma list of torch log, artifact or module names, each optionally "
                    "prefixed + (more) or - (less) (TORCH_LOGS=help lists them)", _torch_logs)
LOG_FILE = Values("a file path whose directory exists and is writable on every node",
                  lambda v: bool(v.strip()))
LOG_FORMAT = Values("short | basic | a logging format with %(field)s placeholders",
                    _log_format)


def _v(name, meaning, values=ANY, scope=Scope.JOB, replaced_by=None, *,
       if_invalid=None, import_checked=False) -> Var:
    return Var(name, meaning, values, scope, replaced_by, if_invalid, import_checked)


_LAUNCH = [
    _v("MASTER_ADDR", "host of rank 0's TCPStore (env:// rendezvous)", HOST),
    _v("MASTER_PORT", "port of rank 0's TCPStore", PORT),
    _v("WORLD_SIZE", "number of ranks in the job", POS_INT),
    _v("RANK", "this process's global rank, 0..WORLD_SIZE-1", NONNEG_INT, Scope.RANK),
    _v("LOCAL_RANK", "rank within this node; picks the GPU", NONNEG_INT, Scope.RANK),
    _v("LOCAL_WORLD_SIZE", "ranks on this node", POS_INT, Scope.NODE),
    _v("GROUP_RANK", "torchrun: this node's (agent's) rank", NONNEG_INT, Scope.RANK),
    _v("GROUP_WORLD_SIZE", "torchrun: number of nodes (agents)", POS_INT),
    _v("ROLE_RANK", "torchrun: rank within the role", NONNEG_INT, Scope.RANK),
    _v("ROLE_WORLD_SIZE", "torchrun: ranks in the role", POS_INT),
    _v("ROLE_NAME", "torchrun: worker role name"),
    _v("TORCHELASTIC_RUN_ID", "torchrun --rdzv-id; 'none' under static rendezvous"),
    _v("TORCHELASTIC_RESTART_COUNT", "torchrun: restarts so far", NONNEG_INT),
    _v("TORCHELASTIC_MAX_RESTARTS", "torchrun --max-restarts", NONNEG_INT),
    _v("TORCHELASTIC_USE_AGENT_STORE", "workers use the agent's TCPStore",
       _one_of("True", "False")),
    _v("TORCHELASTIC_ERROR_FILE", "where a failing worker writes its error JSON", ANY, Scope.RANK),
    _v("TORCHELASTIC_SIGNALS_TO_HANDLE", "signals torchrun forwards to workers"),
    _v("TORCHELASTIC_HEALTH_CHECK_PORT", "torchrun agent health-check port", PORT, Scope.NODE),
    _v("TORCHELASTIC_ENABLE_FILE_TIMER", "torchrun file-based watchdog timer", BOOL),
    _v("TORCHELASTIC_TIMER_FILE", "path of the file timer's pipe", ANY, Scope.NODE),
    _v("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "torchrun output prefix template", ANY, Scope.FREE),
    _v("CUDA_VISIBLE_DEVICES", "GPUs this process may see, in ordinal order", CUDA_DEVICES,
       Scope.RANK),
    _v("NVIDIA_VISIBLE_DEVICES", "container runtime's GPU list", ANY, Scope.RANK),
    _v("CUDA_DEVICE_MAX_CONNECTIONS", "hardware work queues per device", POS_INT),
    _v("CUDA_LAUNCH_BLOCKING", "synchronous kernel launches (debug; slow)", BOOL),
    _v("OMP_NUM_THREADS", "intra-op CPU threads per process", POS_INT, Scope.NODE),
    _v("USE_LIBUV", "TCPStore server backend: 1 = libuv (default), 0 = legacy", BOOL),
]

_TORCH = [
    _v("TORCH_DISTRIBUTED_DEBUG", "collective checks; DETAIL adds a barrier + all_gather "
       "per collective, so it must be set on every rank or none", _one_of("OFF", "INFO", "DETAIL"),
       import_checked=True),
    _v("TORCH_LOGS", "torch's component logging (dynamo, inductor, c10d, ...)", TORCH_LOGS,
       Scope.FREE, import_checked=True),
    _v("TORCH_LOGS_FORMAT", "format of TORCH_LOGS records", LOG_FORMAT, Scope.FREE,
       import_checked=True),
    _v("TORCH_LOGS_OUT", "file torch's log records also go to", LOG_FILE, Scope.FREE,
       import_checked=True),
    _v("TORCH_CPP_LOG_LEVEL", "c10 C++ log level",
       _one_of("INFO", "WARNING", "ERROR", "FATAL", "0", "1", "2", "3"), Scope.FREE,
       if_invalid="torch ignores it (keeps its default level) and says so at import"),
    _v("TORCH_SHOW_CPP_STACKTRACES", "C++ frames in Python errors", BOOL, Scope.FREE,
       if_invalid="torch ignores it (no C++ frames) and warns at import"),
    _v("TORCH_DIST_INIT_BARRIER", "barrier at the end of init_process_group", BOOL),
    _v("TORCH_DISTRIBUTED_USE_TORCHCOMMS", "torchcomms backend switch", BOOL),
    _v("TORCH_DISTRIBUTED_COMPILE_ON_ONE_RANK", "compile on rank 0 only", BOOL),
    _v("TORCH_FR_BUFFER_SIZE", "Flight Recorder entries per rank (0 = off)", NONNEG_INT),
    _v("TORCH_FR_DUMP_TEMP_FILE", "Flight Recorder dump path prefix", ANY, Scope.FREE),
    _v("TORCH_FR_CPP_STACK", "record C++ stacks in Flight Recorder", TORCH_BOOL),
    _v("TORCH_FR_DUMP_DYNAMIC_FILE_NAME", "Flight Recorder dump names include pg/time",
       TORCH_BOOL, Scope.FREE),
    _v("TORCH_GLOO_LAZY_INIT", "connect gloo pairs on first use", TORCH_BOOL),
    _v("GLOO_SOCKET_IFNAME", "interface(s) gloo binds, exact names, comma list", IFNAMES,
       Scope.NODE),
    _v("GLOO_DEVICE_TRANSPORT", "gloo transport", _one_of("TCP", "TCP_TLS", "UV")),
    _v("GLOO_LOG_LEVEL", "gloo log level", ANY, Scope.FREE),
    _v("GLOO_DISABLE_CONNECTION_RETRIES", "fail on the first refused gloo connect", BOOL),
    _v("GLOO_ENABLE_RANK_AS_SEQUENCE_NUMBER", "gloo pair sequence numbering", BOOL),
    _v("GLOO_ENABLE_STORE_V2_API", "gloo uses the store's v2 API", BOOL),
]

_TORCH_NCCL = [
    _v("TORCH_NCCL_ASYNC_ERROR_HANDLING", "watchdog on error: 0 none, 1 tear down, "
       "2 cleanup only, 3 skip cleanup", _int_in(0, 3)),
    _v("TORCH_NCCL_BLOCKING_WAIT", "wait() blocks and raises on timeout", TORCH_BOOL),
    _v("TORCH_NCCL_DUMP_ON_TIMEOUT", "dump Flight Recorder on watchdog timeout", TORCH_BOOL),
    _v("TORCH_NCCL_PROPAGATE_ERROR", "propagate errors to all ranks via the store", TORCH_BOOL),
    _v("TORCH_NCCL_DESYNC_DEBUG", "name the lagging ranks on timeout", TORCH_BOOL),
    _v("TORCH_NCCL_ENABLE_TIMING", "record start events: duration_ms in Flight Recorder",
       TORCH_BOOL),
    _v("TORCH_NCCL_ENABLE_MONITORING", "heartbeat monitor aborts a stuck watchdog", TORCH_BOOL),
    _v("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "heartbeat monitor timeout", POS_INT),
    _v("TORCH_NCCL_RETHROW_CUDA_ERRORS", "rethrow CUDA errors from the watchdog", TORCH_BOOL),
    _v("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "extra wait for dumps before exit", NONNEG_INT),
    _v("TORCH_NCCL_COORD_CHECK_MILSEC", "interval of the dump-coordination check", POS_INT),
    _v("TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "log C++ stack on abort", TORCH_BOOL),
    _v("TORCH_NCCL_EXTRA_DUMP_ON_EXEC", "dump Flight Recorder on exceptions too", TORCH_BOOL),
    _v("TORCH_NCCL_CUDA_EVENT_CACHE", "reuse CUDA events", TORCH_BOOL),
    _v("TORCH_NCCL_RANKS_PER_ROOT", "ranks per unique-id root in scalable init", POS_INT),
    _v("TORCH_NCCL_NAN_CHECK", "check collective inputs for NaN", TORCH_BOOL),
    _v("TORCH_NCCL_AVOID_RECORD_STREAMS", "stash tensors instead of recordStream", TORCH_BOOL),
    _v("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK", "register allocator segments with NCCL",
       TORCH_BOOL),
    _v("TORCH_NCCL_HIGH_PRIORITY", "use high-priority CUDA streams", TORCH_BOOL),
    _v("TORCH_NCCL_BCAST_UNIQUEID", "broadcast the unique id for split comms", TORCH_BOOL),
    _v("TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING", "warn on eager-init p2p",
       TORCH_BOOL, Scope.FREE),
    _v("TORCH_NCCL_TRACE_BUFFER_SIZE", "Flight Recorder entries (old name)", NONNEG_INT,
       replaced_by="TORCH_FR_BUFFER_SIZE"),
    _v("TORCH_NCCL_TRACE_CPP_STACK", "Flight Recorder C++ stacks (old name)", TORCH_BOOL,
       replaced_by="TORCH_FR_CPP_STACK"),
    _v("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "Flight Recorder dump prefix (old name)", ANY,
       Scope.FREE, replaced_by="TORCH_FR_DUMP_TEMP_FILE"),
    _v("NCCL_ASYNC_ERROR_HANDLING", "old name", _int_in(0, 3),
       replaced_by="TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    _v("NCCL_BLOCKING_WAIT", "old name", TORCH_BOOL, replaced_by="TORCH_NCCL_BLOCKING_WAIT"),
    _v("NCCL_DESYNC_DEBUG", "old name", TORCH_BOOL, replaced_by="TORCH_NCCL_DESYNC_DEBUG"),
    _v("NCCL_ENABLE_TIMING", "old name", TORCH_BOOL, replaced_by="TORCH_NCCL_ENABLE_TIMING"),
    _v("NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK", "old name", TORCH_BOOL,
       replaced_by="TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"),
]

_NCCL = [
    _v("NCCL_DEBUG", "NCCL log level", _one_of("VERSION", "WARN", "INFO", "TRACE", "ABORT"),
       Scope.FREE, if_invalid="NCCL ignores a level it does not know and logs nothing"),
    _v("NCCL_DEBUG_SUBSYS", "subsystems to log, e.g. INIT,ENV,NET", NCCL_SUBSYS, Scope.FREE,
       if_invalid="NCCL skips a subsystem name it does not know (src/debug.cc)"),
    _v("NCCL_DEBUG_FILE", "log file pattern (%h host, %p pid)", ANY, Scope.FREE),
    _v("NCCL_SOCKET_IFNAME", "interfaces for bootstrap and socket transport", NCCL_IFNAMES,
       Scope.NODE),
    _v("NCCL_SOCKET_FAMILY", "address family for sockets", AF_FAMILY),
    _v("NCCL_SOCKET_NTHREADS", "helper threads per socket connection", _int_in(1, 16)),
    _v("NCCL_NSOCKS_PERTHREAD", "sockets per helper thread", POS_INT),
    _v("NCCL_SOCKET_RETRY_CNT", "socket connect retries", NONNEG_INT),
    _v("NCCL_SOCKET_RETRY_SLEEP_MSEC", "sleep between connect retries", NONNEG_INT),
    _v("NCCL_OOB_NET_ENABLE", "use the network plugin for bootstrap", BOOL),
    _v("NCCL_OOB_NET_IFNAME", "interfaces for out-of-band bootstrap", NCCL_IFNAMES, Scope.NODE),
    _v("NCCL_UID_STAGGER_THRESHOLD", "ranks above which unique-id fetch is staggered", POS_INT),
    _v("NCCL_UID_STAGGER_RATE", "unique-id fetches per second", POS_INT),
    _v("NCCL_NET", "network plugin to use, e.g. IB or Socket"),
    _v("NCCL_NET_PLUGIN", "network plugin library name"),
    _v("NCCL_TUNER_PLUGIN", "tuner plugin library name"),
    _v("NCCL_PROFILER_PLUGIN", "profiler plugin library name"),
    _v("NCCL_IB_DISABLE", "1 = never use InfiniBand/RoCE (falls back to sockets)", BOOL),
    _v("NCCL_IB_HCA", "HCAs to use, [^][=]mlx5_0:1,...", ANY, Scope.NODE),
    _v("NCCL_IB_TIMEOUT", "IB verbs timeout exponent (4.096us * 2^n)", _int_in(1, 31)),
    _v("NCCL_IB_RETRY_CNT", "IB verbs retry count", _int_in(0, 7)),
    _v("NCCL_IB_GID_INDEX", "RoCE GID index", _int_in(-1), Scope.NODE),
    _v("NCCL_IB_ADDR_FAMILY", "RoCE address family", _one_of("AF_INET", "AF_INET6")),
    _v("NCCL_IB_ADDR_RANGE", "RoCE address range (CIDR)"),
    _v("NCCL_IB_ROCE_VERSION_NUM", "RoCE version", _int_in(1, 2)),
    _v("NCCL_IB_SL", "IB service level", _int_in(0, 15)),
    _v("NCCL_IB_TC", "IB traffic class", _int_in(0, 255)),
    _v("NCCL_IB_FIFO_TC", "traffic class of control messages", _int_in(0, 255)),
    _v("NCCL_IB_RETURN_ASYNC_EVENTS", "report IB async events", BOOL),
    _v("NCCL_IB_AR_THRESHOLD", "adaptive-routing size threshold", NONNEG_INT),
    _v("NCCL_IB_QPS_PER_CONNECTION", "queue pairs per connection", POS_INT),
    _v("NCCL_IB_SPLIT_DATA_ON_QPS", "split each message across QPs", BOOL),
    _v("NCCL_IB_PCI_RELAXED_ORDERING", "PCI relaxed ordering (0, 1, 2 auto)", _int_in(0, 2)),
    _v("NCCL_IB_ADAPTIVE_ROUTING", "IB adaptive routing", BOOL),
    _v("NCCL_IB_ECE_ENABLE", "enhanced connection establishment", BOOL),
    _v("NCCL_IB_MERGE_NICS", "merge ports of one NIC", BOOL),
    _v("NCCL_IB_MERGE_VFS", "merge virtual functions", BOOL),
    _v("NCCL_IB_CUDA_SUPPORT", "removed in NCCL 2.4", BOOL, replaced_by="NCCL_NET_GDR_LEVEL"),
    _v("NCCL_NET_GDR_LEVEL", "max topology distance for GPUDirect RDMA", LEVEL),
    _v("NCCL_NET_GDR_READ", "GPUDirect RDMA for sends", BOOL),
    _v("NCCL_NET_GDR_C2C", "GPUDirect RDMA over C2C", BOOL),
    _v("NCCL_NET_DISABLE_INTRA", "no network transport within a node", BOOL),
    _v("NCCL_NET_FORCE_FLUSH", "force GDR flush", BOOL),
    _v("NCCL_NET_SHARED_BUFFERS", "share buffers between peers", BOOL),
    _v("NCCL_NET_SHARED_COMMS", "share connections (PXN)", BOOL),
    _v("NCCL_NCHANNELS_PER_NET_PEER", "channels per network peer", POS_INT),
    _v("NCCL_CROSS_NIC", "rings/trees may use different NICs (0, 1, 2 auto)", _int_in(0, 2)),
    _v("NCCL_COLLNET_ENABLE", "enable CollNet (SHARP)", BOOL),
    _v("NCCL_COLLNET_NODE_THRESHOLD", "nodes needed before CollNet is used", POS_INT),
    _v("NCCL_TOPO_FILE", "XML topology file to load", ANY, Scope.NODE),
    _v("NCCL_TOPO_DUMP_FILE", "where to dump the detected topology", ANY, Scope.FREE),
    _v("NCCL_IGNORE_CPU_AFFINITY", "ignore the job's CPU affinity", BOOL),
    _v("NCCL_CONF_FILE", "file of NCCL_* settings", ANY, Scope.NODE),
    _v("NCCL_SET_THREAD_NAME", "name NCCL threads", BOOL, Scope.FREE),
    _v("NCCL_P2P_DISABLE", "1 = no peer-to-peer (NVLink/PCI) transport", BOOL),
    _v("NCCL_P2P_LEVEL", "max topology distance for P2P", LEVEL),
    _v("NCCL_P2P_DIRECT_DISABLE", "no direct P2P within a process", BOOL),
    _v("NCCL_P2P_NET_CHUNKSIZE", "P2P chunk size over the network", POS_INT),
    _v("NCCL_P2P_NVL_CHUNKSIZE", "P2P chunk size over NVLink", POS_INT),
    _v("NCCL_P2P_PCI_CHUNKSIZE", "P2P chunk size over PCI", POS_INT),
    _v("NCCL_P2P_LL_THRESHOLD", "max size for LL protocol in P2P", NONNEG_INT),
    _v("NCCL_SHM_DISABLE", "1 = no shared-memory transport", BOOL),
    _v("NCCL_SHM_USE_CUDA_MEMCPY", "use cudaMemcpy for SHM", BOOL),
    _v("NCCL_SHM_MEMCPY_MODE", "SHM copy engine use (1, 2, 3)", _int_in(1, 3)),
    _v("NCCL_SHM_LOCALITY", "where SHM buffers live (1 sender, 2 receiver)", _int_in(1, 2)),
    _v("NCCL_BUFFSIZE", "buffer size per channel, bytes", POS_INT),
    _v("NCCL_NTHREADS", "CUDA threads per block", _one_of("64", "128", "256", "512")),
    _v("NCCL_MAX_NCHANNELS", "max channels", POS_INT),
    _v("NCCL_MIN_NCHANNELS", "min channels", POS_INT),
    _v("NCCL_MAX_CTAS", "max CTAs", POS_INT),
    _v("NCCL_MIN_CTAS", "min CTAs", POS_INT),
    _v("NCCL_CGA_CLUSTER_SIZE", "CGA cluster size (0-8)", _int_in(0, 8)),
    _v("NCCL_CHECK_POINTERS", "check CUDA pointers", BOOL),
    _v("NCCL_LAUNCH_MODE", "kernel launch mode", _one_of("PARALLEL", "GROUP")),
    _v("NCCL_ALGO", "algorithms to use", NCCL_ALGO),
    _v("NCCL_PROTO", "protocols to use", NCCL_PROTO),
    _v("NCCL_NVB_DISABLE", "no NVLink-bridged path through a GPU", BOOL),
    _v("NCCL_PXN_DISABLE", "no PXN (NVLink then network)", BOOL),
    _v("NCCL_P2P_PXN_LEVEL", "PXN use (0, 1, 2)", _int_in(0, 2)),
    _v("NCCL_RUNTIME_CONNECT", "connect lazily on first use", BOOL),
    _v("NCCL_GRAPH_REGISTER", "register buffers in CUDA graphs", BOOL),
    _v("NCCL_LOCAL_REGISTER", "register user buffers", BOOL),
    _v("NCCL_LEGACY_CUDA_REGISTER", "legacy buffer registration", BOOL),
    _v("NCCL_GRAPH_MIXING_SUPPORT", "mix graph and non-graph launches", BOOL),
    _v("NCCL_DMABUF_ENABLE", "use DMA-BUF for GDR", BOOL),
    _v("NCCL_CUMEM_ENABLE", "use the cuMem* allocator", BOOL),
    _v("NCCL_CUMEM_HOST_ENABLE", "cuMem host allocations", BOOL),
    _v("NCCL_NVLS_ENABLE", "NVLink SHARP (0 off, 1 on, 2 auto)", _int_in(0, 2)),
    _v("NCCL_NVLS_CHUNKSIZE", "NVLS chunk size", POS_INT),
    _v("NCCL_MNNVL_ENABLE", "multi-node NVLink", _int_in(0, 2)),
    _v("NCCL_WORK_FIFO_BYTES", "work FIFO size", POS_INT),
    _v("NCCL_COMM_BLOCKING", "blocking communicator calls", BOOL),
    _v("NCCL_SET_STACK_SIZE", "set the CUDA stack size", BOOL),
    _v("NCCL_MEM_SYNC_DOMAIN", "CUDA memory sync domain", NONNEG_INT),
    _v("NCCL_HOSTID", "override the host id (distinguishes nodes)", ANY, Scope.NODE),
    _v("NCCL_RAS_ENABLE", "reliability/availability service", BOOL),
    _v("NCCL_RAS_ADDR", "RAS listen address", ANY, Scope.NODE),
    _v("NCCL_RAS_TIMEOUT_FACTOR", "RAS timeout multiplier", POS_INT),
    _v("NCCL_LL_THRESHOLD", "removed; use NCCL_PROTO", NONNEG_INT, replaced_by="NCCL_PROTO"),
    _v("NCCL_TREE_THRESHOLD", "removed; use NCCL_ALGO", NONNEG_INT, replaced_by="NCCL_ALGO"),
    _v("NCCL_SINGLE_RING_THRESHOLD", "removed; use NCCL_ALGO", NONNEG_INT, replaced_by="NCCL_ALGO"),
]

CATALOG: dict[str, Var] = {v.name: v for v in _LAUNCH + _TORCH + _TORCH_NCCL + _NCCL}

# Variables whose values a snapshot records: these families, nothing else.
FAMILIES = ("NCCL_", "TORCH_", "GLOO_", "MASTER_", "CUDA_", "OMP_", "TORCHELASTIC_",
            "PYTORCH_", "SLURM_")
FAMILY_NAMES = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                          "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                          "USE_LIBUV", "NVIDIA_VISIBLE_DEVICES", "SLURMD_NODENAME"})
# Families whose unknown members are worth a typo check (launchers' own are not ours).
TYPO_FAMILIES = ("NCCL_", "TORCH_", "GLOO_", "MASTER_", "TORCHELASTIC_")


def in_family(name: str) -> bool:
    return name in FAMILY_NAMES or name.startswith(FAMILIES)


def lookup(name: str) -> Var | None:
    return CATALOG.get(name)
