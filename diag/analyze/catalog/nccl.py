"""NCCL's own lines (NCCL_DEBUG=INFO/WARN), and NCCL's words quoted inside other errors.

Every NCCL line is built by ``ncclDebugLog`` (src/debug.cc): ``host:pid:tid [cudaDev]``,
then ``NCCL INFO <msg>``, or ``<file>:<line> NCCL WARN <msg>`` (newer: ``<file>:<line>
(<function>) NCCL WARN``). The launcher and timestamp prefixes are peeled before these
patterns run, so they match the message alone.
"""

from __future__ import annotations

import re

from diag import fixes
from diag.analyze.catalog.spec import (Example, Implies, Signature, Source, body, compute,
                                       const, group, has, search, stripped)
from diag.verdict import Basis, Category

NCCL = "NVIDIA/nccl"

DUPLICATE_GPU = Implies(Category.ENV_MISCONFIG, Basis.EMITTER,
                        f"Two ranks share one GPU. {fixes.sentence(fixes.SHARED_GPU)}")
SHM_FULL = Implies(Category.ENV_MISCONFIG, Basis.EMITTER,
                   "Shared memory runs out: the container's /dev/shm is too small for NCCL or "
                   f"DataLoader workers. {fixes.sentence(fixes.SHM)}")


def _errno_of(reason: str) -> int | None:
    return REASON_ERRNO.get(reason.strip().lower())


# strerror() texts NCCL prints in place of the number
REASON_ERRNO = {"no route to host": 113, "connection refused": 111, "connection timed out": 110,
                "network is unreachable": 101, "connection reset by peer": 104,
                "software caused connection abort": 103, "cannot assign requested address": 99}

_IFACE_ITEM = re.compile(r"\[\d+\](?P<iface>[^:\s\[]+):(?P<addr>[^<\s]+)<\d+>")


def _ifaces(m: re.Match) -> list[tuple[str, str]]:
    # "[0]eth0:10.0.0.3<0> [1]eth1:10.1.0.3<0>" (IPv6 addresses hold colons too)
    return [(i.group("iface"), i.group("addr")) for i in _IFACE_ITEM.finditer(m.group("rest"))]


def _devices(m: re.Match) -> int:
    # 'NET/IB : Using%s %s; OOB ...': the first %s is the "[N]mlx5_0:1/IB" list, the
    # second the "[RO]" flag alone, so "Using [RO]; OOB" (2.28) lists no device at all
    return len(_DEVICE_ITEM.findall(m.group("rest") or ""))


_DEVICE_ITEM = re.compile(r"\[\d+\]\S")


def _net_interfaces(ex, line, m: re.Match) -> None:
    ifaces = _ifaces(m) if m.group("rest") else _listed_after(ex, line)
    ex.emit("nccl_net", line, transport=m.group("transport"), ifaces=ifaces, oob=_oob(m),
            devices=_devices(m) if m.group("rest") else len(ifaces))


def _listed_after(ex, line) -> list[tuple[str, str]]:
    """NCCL prints the list on its line; a paste (or a narrow terminal) may put each
    "[N]iface:addr<0>" item on a line of its own after a bare "NET/Socket : Using"."""
    out = []
    for text in ex.bodies_after(line, _MAX_LISTED):
        text = _TIMESTAMP.sub("", text, count=1)  # a launcher's stamp is no item
        items = list(_IFACE_ITEM.finditer(text))
        if not items or _IFACE_ITEM.sub("", text).strip():
            break
        out += [(it.group("iface"), it.group("addr")) for it in items]
    return out


_TIMESTAMP = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d[.,\d]*\]?\s*(?:\|\s*)?")
_MAX_LISTED = 32  # interfaces read off the lines after a bare "NET/Socket : Using"


def _driver_version(m: re.Match) -> str:
    v = int(m.group("v"))  # 12080 -> "12.8"
    return f"{v // 1000}.{v % 1000 // 10}"


def _after_level(m: re.Match) -> str:
    # what follows the first level word; the whole line when the level came from another
    # form ("NCCL WARNING")
    return m.string[m.end():].strip()[:300]


def _oob(m: re.Match) -> tuple[str, str] | None:
    # "...; OOB ib0:10.1.0.3<0>": the interface NCCL's IB transport picked for its
    # out-of-band TCP connections, by the same rule as bootstrap's (ncclFindInterfaces)
    found = _OOB.search(m.string)
    return (found.group("iface"), found.group("addr")) if found else None


_OOB = re.compile(r"; OOB (?P<iface>[^:\s]+):(?P<addr>[^<\s]+)<\d+>")

# NCCL_CONFIG_UNDEF_INT (src/nccl.h.in, 2.17+): the "unset" value NCCL_CONFIG_INITIALIZER
# gives every attribute; a library >= 2.17 replaces it by its default before checking
CONFIG_UNDEF_INT = -2147483648


def _nvls_bind(ex, line, m: re.Match) -> None:
    # the WARN holds newlines: a paste (or a wrapping terminal) may put the CUDA error on
    # the next line
    code, error = m.group("code"), m.group("error")
    if code is None:
        nxt = _CUDA_ERROR.search(ex.next_bodies(line, 1))
        code, error = (nxt.group("code"), nxt.group("error")) if nxt else (None, None)
    ex.emit("nccl_nvls_bind", line, size=int(m.group("size")),
            code=int(code) if code else None, error=error)


_CUDA_ERROR = re.compile(r"^\s*:?\s*CUDA error (?P<code>\d+) '(?P<error>[^']*)'")

NVLS_BIND = Implies(
    Category.ENV_MISCONFIG, Basis.EMITTER,
    "NCCL cannot bind NVLink SHARP multicast memory: the host's NVSwitch fabric is not set "
    "up. Start the fabric manager (`systemctl enable --now nvidia-fabricmanager`, its "
    "version must match the driver's), load the IMEX channels (nvidia-caps-imex-channels) "
    "where the driver needs them, then rerun; NCCL_NVLS_ENABLE=0 avoids NVLS meanwhile.")


# c10d's rendering of NCCL's result codes: ncclGetErrorString's text, or the enum's name
# with getNcclErrorDetailStr's explanation
_RESULT_SOURCE = Source(NCCL, "src/init.cc", "ncclGetErrorString",
                        "reaches the log inside torch's DistBackendError")
_RESULT_ALSO = (Source("pytorch/pytorch", "torch/csrc/distributed/c10d/NCCLUtils.cpp",
                       "getNcclErrorDetailStr"),)


def _result(code: str, text: str, enum: str, example: str) -> Signature:
    return Signature(
        id=f"nccl.result_{code}", signal="nccl_error", scope="nccl", oneof="nccl_result",
        prefilter=((text, enum),), pattern=f"{re.escape(text)}|{enum}",
        fields={"code": const(code), "message": body()},
        source=_RESULT_SOURCE, also=_RESULT_ALSO,
        examples=(Example(example, {"code": code}),),
        near_misses=(f"NCCL INFO {enum[4:]} is fine",))


ENTRIES = (
    Signature(
        # nccl-tests' device table: which host each rank runs on, the topology of the run
        id="nccl_tests.rank_device", signal="rank_host", prefilter=("Pid",),
        pattern=r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(?P<pid>\d+)\s+on"
                r"\s+(?P<host>\S+)\s+device\s+(?P<device>\d+)",
        fields={"rank": int, "pid": int, "host": str, "device": int},
        source=Source("NVIDIA/nccl-tests", "src/common.cu", "run",
                      "'#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s'; "
                      "before 2.13 without 'Group %2d' and with '[0x%02x]'"),
        examples=(Example("#   Rank  1 Pid  70497 on machine-19 device  0 [0x1a] Tesla "
                          "V100-SXM2-32GB", {"rank": 1, "pid": 70497, "host": "machine-19",
                                             "device": 0}),
                  Example("#  Rank  3 Group  0 Pid 4121 on gpu-a07 device  3 [0000:41:00] "
                          "NVIDIA H100 80GB HBM3", {"rank": 3, "host": "gpu-a07"})),
        near_misses=("# Rank 0 Pid 12 on",)),
    Signature(
        id="nccl.version", signal="version", scope="nccl_any", oneof="nccl_version",
        prefilter=("NCCL version",),
        pattern=r"NCCL version:?\s*(?P<version>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?",
        fields={"component": const("nccl"), "version": str, "cuda": str},
        source=Source(NCCL, "src/init.cc", "showVersion", "VERSION_STRING"),
        also=(Source("pytorch/pytorch", "torch/csrc/distributed/c10d/NCCLUtils.hpp",
                     "C10D_NCCL_CHECK", "', NCCL version 2.14.3' after the error"),),
        examples=(Example("node1:240:240 [0] NCCL INFO NCCL version 2.18.5+cuda12.2",
                          {"version": "2.18.5", "cuda": "12.2"}),
                  Example("RuntimeError: NCCL error in: ../NCCLUtils.hpp:219, unhandled "
                          "system error, NCCL version 2.14.3", {"version": "2.14.3"})),
        near_misses=("NCCL version mismatch suspected",)),
    Signature(
        id="vllm.nccl_version", signal="version", scope="nccl_any", oneof="nccl_version",
        prefilter=("nccl==",), pattern=r"nccl==(?P<version>\d+\.\d+\.\d+)",
        fields={"component": const("nccl"), "version": str, "cuda": const(None)},
        source=Source("vllm-project/vllm",
                      "vllm/distributed/device_communicators/pynccl.py",
                      "PyNcclCommunicator.__init__", "sglang prints the same, 'sglang is using'"),
        examples=(Example("INFO 03-18 pynccl.py:63] vLLM is using nccl==2.21.5",
                          {"version": "2.21.5"}),),
        near_misses=("pip install nccl==",)),
    Signature(
        id="nccl.env_set", signal="env", scope="nccl", prefilter=("set by environment to",),
        pattern=r"(?P<var>[A-Z][A-Z0-9_]+) set by environment to (?P<value>\S*?)\.?\s*$",
        fields={"var": str, "value": str, "source": const("nccl")},
        source=Source(NCCL, "src/misc/param.cc", "ncclLoadParam",
                      "string-valued variables print it where they are read, e.g. "
                      "src/bootstrap.cc bootstrapNetInit"),
        examples=(Example("n1:10:10 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
                          {"var": "NCCL_SOCKET_IFNAME", "value": "eth0"}),
                  Example("n1:10:10 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
                          {"var": "NCCL_IB_DISABLE", "value": "1"})),
        near_misses=("NCCL_IB_DISABLE=1",)),
    Signature(
        id="nccl.ib_no_device", signal="nccl_ib_no_device", scope="nccl", oneof="ib_none",
        prefilter=("NET/IB",), pattern=r"NET/IB\s*:\s*No (?:IB )?devices? found",
        flags=re.IGNORECASE,
        source=Source(NCCL, "src/transport/net_ib/init.cc", "ncclIbInitDevices",
                      "before 2.19: src/transport/net_ib.cc ncclIbInit"),
        examples=(Example("gpu7:4242:4242 [1] NCCL INFO NET/IB : No device found."),),
        near_misses=("gpu7:4242:4242 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0",)),
    Signature(
        id="nccl.libibverbs_missing", signal="nccl_ib_no_device", scope="nccl", oneof="ib_none",
        prefilter=("libibverbs", ("Failed", "failed")), pattern=r"libibverbs",
        fields={"reason": const("libibverbs")},
        source=Source(NCCL, "src/misc/ibvsymbols.cc", "buildIbvSymbols",
                      "before 2.12: src/misc/ibvwrap.cc wrap_ibv_symbols"),
        examples=(Example("e66a:3171:3171 [0] misc/ibvwrap.cu:61 WARN Failed to open "
                          "libibverbs.so[.1]", {"reason": "libibverbs"}),),
        near_misses=("n1:1:1 [0] NCCL INFO Loaded libibverbs.so.1",)),
    Signature(
        id="nccl.using_network", signal="nccl_net", scope="nccl", oneof="net_using",
        prefilter=("Using network",), pattern=r"Using network (?P<transport>\w+)",
        fields={"transport": str, "ifaces": const([])},
        source=Source(NCCL, "src/init.cc", "commAlloc"),
        examples=(Example("n1:10:10 [0] NCCL INFO Using network Socket",
                          {"transport": "Socket"}),
                  Example("n1:10:10 [0] NCCL INFO Using network IB", {"transport": "IB"})),
        near_misses=("n1:10:10 [0] NCCL INFO Using non-device net plugin version 0",)),
    Signature(
        id="nccl.net_interfaces", signal="nccl_net", scope="nccl", oneof="net_using",
        prefilter=("Using", "NET/"),
        pattern=r"NET/(?P<transport>Socket|IB)\s*:\s*Using(?: (?P<rest>.*)|\s*$)",
        fields={"transport": str, "ifaces": compute(_ifaces), "oob": compute(_oob),
                "devices": compute(_devices)},
        parse=_net_interfaces,
        source=Source(NCCL, "src/transport/net_socket.cc", "ncclNetSocketInit"),
        also=(Source(NCCL, "src/transport/net_ib/init.cc", "ncclIbInitDevices",
                     "'NET/IB : Using%s %s; OOB %s:%s'; before 2.19 src/transport/net_ib.cc "
                     "ncclIbInit"),),
        examples=(Example("n1:10:10 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.3<0> "
                          "[1]eth1:10.1.0.3<0>",
                          {"transport": "Socket", "oob": None,
                           "ifaces": [("eth0", "10.0.0.3"), ("eth1", "10.1.0.3")],
                           "devices": 2}),
                  Example("gpu-3:51:77 [2] NCCL INFO NET/IB : Using [0]mlx5_2:1/IB [1]mlx5_3:1"
                          "/IB [RO]; OOB ib1:172.16.9.3<0>",
                          {"transport": "IB", "oob": ("ib1", "172.16.9.3"), "devices": 2}),
                  Example("vm:850:850 [0] NCCL INFO NET/IB : Using [RO]; OOB eth0:192.0.2.2<0>",
                          {"transport": "IB", "oob": ("eth0", "192.0.2.2"), "devices": 0})),
        near_misses=("n1:10:10 [0] NCCL INFO NET/Plugin : Using [0]x",)),
    Signature(
        id="nccl.channel_via_net", signal="nccl_channel_net", scope="nccl", once_per_process=True,
        prefilter=("via NET/",), pattern=r"via NET/(?P<transport>[A-Za-z]+)",
        fields={"transport": str},
        source=Source(NCCL, "src/transport/net.cc", "sendSetup",
                      "and recvSetup; a channel over NET/* links ranks on different nodes"),
        examples=(Example("n1:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via "
                          "NET/Socket/0", {"transport": "Socket"}),),
        near_misses=("n1:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",)),
    Signature(
        id="nccl.bootstrap_interface", signal="nccl_bootstrap", scope="nccl",
        prefilter=("Bootstrap", "Using"),
        pattern=r"Bootstrap\s*:\s*Using (?:\[\d+\])?(?P<iface>[^:\s]+):(?P<addr>[^<\s]+)<\d+>",
        fields={"iface": str, "addr": str},
        source=Source(NCCL, "src/bootstrap.cc", "bootstrapNetInit"),
        examples=(Example("n1:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>",
                          {"iface": "eth0", "addr": "10.0.0.3"}),
                  Example("n1:10:10 [0] NCCL INFO Bootstrap: Using [0]ib0:fe80::1%ib0<0>",
                          {"iface": "ib0", "addr": "fe80::1%ib0"})),
        near_misses=("n1:10:10 [0] NCCL INFO Bootstrap timings total 0.001",)),
    Signature(
        id="nccl.no_interface", signal="nccl_no_interface", scope="nccl", flags=re.IGNORECASE,
        prefilter=("nterface",),
        pattern=r"no (?:socket |usable |ipv4 |ipv6 |usable listening )?interfaces? "
                r"(?:found|available)|unable to find (?:address for|interface)"
                r"|could not find (?:any )?interface",
        fields={"message": body()},
        source=Source(NCCL, "src/bootstrap.cc", "bootstrapNetInit"),
        also=(Source(NCCL, "src/misc/socket.cc", "ncclFindInterfaceMatchSubnet"),),
        examples=(Example("n1:10:10 [0] bootstrap.cc:126 NCCL WARN Bootstrap : no socket "
                          "interface found"),
                  Example("n1:10:10 [0] misc/socket.cc:261 NCCL WARN Net : No interface found "
                          "in the same subnet as remote address 10.0.0.2<36011>")),
        near_misses=("n1:10:10 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
                     "RuntimeError: Unable to find address for: eth9")),
    Signature(
        id="nccl.socket_family", signal="nccl_socket_family", scope="nccl",
        prefilter=(("Socket", "AF_INET", "family"),),
        pattern=r"Socket creation failed|Address family not supported|neither AF_INET",
        fields={"message": body()},
        source=Source(NCCL, "src/misc/socket.cc", "ncclSocketInit",
                      "before 2.12: src/include/socket.h"),
        examples=(Example("e66a:3171:3171 [0] include/socket.h:311 WARN Socket creation failed "
                          ": Address family not supported by protocol"),
                  Example("n1:1:1 [0] misc/socket.cc:585 NCCL WARN ncclSocketInit: connecting "
                          "to address  with family 1 is neither AF_INET(2) nor AF_INET6(10)")),
        near_misses=("n1:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",)),
    Signature(
        id="nccl.connect_returned", signal="nccl_connect_failed", scope="nccl",
        oneof="nccl_connect", prefilter=("onnect", "returned"),
        pattern=r"[Cc]onnect(?:ing)? to (?P<addr>[\w.:\[\]%-]+?)<(?P<port>\d+)>"
                r".*?returned (?P<errno>\d+)\((?P<reason>[^)]*)\)",
        fields={"addr": group("addr", lambda a: a.strip("[]")), "port": int, "errno": int,
                "reason": group("reason", str.strip)},
        source=Source(NCCL, "src/misc/socket.cc", "socketPollConnect", "2.19 to 2.25"),
        examples=(Example("n1:1:1 [0] misc/socket.cc:535 NCCL WARN socketPollConnect: Connect "
                          "to 10.0.0.4<56849> returned 113(No route to host) errno 115(Operation "
                          "now in progress)",
                          {"addr": "10.0.0.4", "port": 56849, "errno": 113,
                           "reason": "No route to host"}),),
        near_misses=("n1:1:1 [0] NCCL INFO Connected all rings",)),
    Signature(
        id="nccl.connect_failed", signal="nccl_connect_failed", scope="nccl",
        oneof="nccl_connect", prefilter=("onnect", "failed"),
        pattern=r"[Cc]onnect(?:ing)? to (?P<addr>[\w.:\[\]%-]+?)<(?P<port>\d+)>"
                r".*?failed\s*:\s*(?P<reason>[^,;]+)",
        fields={"addr": group("addr", lambda a: a.strip("[]")), "port": int,
                "errno": group("reason", _errno_of), "reason": group("reason", str.strip)},
        source=Source(NCCL, "src/misc/socket.cc", "socketConnectCheck",
                      "2.26+: src/os/linux.cc socketConnectCheck ('connect to')"),
        examples=(Example("n1:1:1 [0] misc/socket.cc:556 NCCL WARN socketStartConnect: Connect "
                          "to 10.1.1.1<43215> failed : No route to host",
                          {"addr": "10.1.1.1", "port": 43215, "errno": 113}),),
        near_misses=("n1:1:1 [0] NCCL WARN Connect failed",)),
    Signature(
        id="nccl.connect_call", signal="nccl_connect_failed", scope="nccl", oneof="nccl_connect",
        prefilter=("connect returned",), pattern=r"connect returned (?P<reason>[A-Za-z ]+?)(?:,|$)",
        fields={"addr": const(None), "port": const(None), "errno": group("reason", _errno_of),
                "reason": group("reason", str.strip)},
        source=Source(NCCL, "src/misc/socket.cc", "socketConnectCheck",
                      "before 2.22: socketStartConnect, 'Call to connect returned %s, retrying'"),
        examples=(Example("n1:1:1 [0] NCCL INFO Call to connect returned Connection refused, "
                          "retrying", {"errno": 111, "reason": "Connection refused"}),
                  Example("n1:1:1 [0] misc/socket.cc:544 NCCL WARN socketPollConnect: connect "
                          "returned Connection refused, exceeded error retry count (35)",
                          {"errno": 111})),
        near_misses=("n1:1:1 [0] NCCL INFO connect returned 0",)),
    Signature(
        id="nccl.cuda_failure", signal="nccl_cuda_failure", scope="nccl",
        prefilter=("Cuda failure",), pattern=r"Cuda failure(?: (?:\d+ )?'(?P<error>[^']*)')?",
        fields={"error": group("error", default=""),
                "src": search(r"([\w/.-]+\.(?:cc|cu|h|c)):\d+")},
        source=Source(NCCL, "src/include/checks.h", "CUDACHECK",
                      "the driver API's: src/include/cudawrap.h CUCHECK, 'Cuda failure %d'"),
        examples=(Example("n1:1:1 [0] transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid "
                          "argument'", {"error": "invalid argument", "src": "transport/nvls.cc"}),
                  Example("n1:1:1 [0] include/alloc.h:99 NCCL WARN Cuda failure 2 'out of "
                          "memory'", {"error": "out of memory"})),
        near_misses=("n1:1:1 [0] NCCL INFO Cuda Host Alloc Size 4 pointer 0x7f",)),
    _result("system", "unhandled system error", "ncclSystemError",
            "RuntimeError: NCCL error in: ../NCCLUtils.hpp:219, unhandled system error, NCCL "
            "version 2.14.3"),
    _result("cuda", "unhandled cuda error", "ncclUnhandledCudaError",
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3"),
    _result("internal", "internal error", "ncclInternalError",
            "RuntimeError: NCCL Error 3: internal error"),
    _result("remote", "remote process exited", "ncclRemoteError",
            "DistBackendError: NCCL error: remote process exited or there was a network error"),
    _result("invalid_usage", "invalid usage", "ncclInvalidUsage",
            "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"),
    _result("invalid_argument", "ncclInvalidArgument", "ncclInvalidArgument",
            "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid argument, NCCL "
            "version 2.19.3 ncclInvalidArgument: Invalid value for an argument."),
    Signature(
        id="nccl.comm_init", signal="nccl_init", scope="nccl", prefilter=("anks ",),
        pattern=r"\brank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)(?: nNodes (?P<nnodes>\d+))?",
        fields={"rank": int, "nranks": int, "nnodes": int},
        source=Source(NCCL, "src/init.cc", "initTransportsRank",
                      "and the 'Init START/COMPLETE' lines of ncclCommInitRankFunc; the rank "
                      "that the process's other lines take (by pid)"),
        examples=(Example("n1:1:9 [0] NCCL INFO comm 0x7f rank 3 nRanks 8 nNodes 2 localRanks 4 "
                          "localRank 3 MNNVL 0", {"rank": 3, "nranks": 8, "nnodes": 2}),
                  Example("n1:1:9 [0] NCCL INFO ncclCommInitRank comm 0x55eb rank 0 nranks 2 "
                          "cudaDev 0 busId 1000 - Init COMPLETE", {"rank": 0, "nranks": 2})),
        near_misses=("n1:1:9 [0] NCCL INFO Ranks 0 and 1 share a node",)),
    Signature(
        id="nccl.cuda_driver_version", signal="version", scope="nccl",
        prefilter=("cudaDriverVersion",), pattern=r"cudaDriverVersion (?P<v>\d+)",
        fields={"component": const("cuda_driver"), "version": compute(_driver_version)},
        source=Source(NCCL, "src/misc/cudawrap.cc", "initOnceFunc"),
        examples=(Example("n1:1:1 [0] NCCL INFO cudaDriverVersion 12080",
                          {"component": "cuda_driver", "version": "12.8"}),),
        near_misses=("n1:1:1 [0] NCCL INFO cudaDriverVersion unknown",)),
    Signature(
        id="nccl.ib_completion_error", signal="nccl_ib_error", scope="nccl",
        prefilter=("completion",),
        pattern=r"Got completion (?:from peer (?P<peer>\S+?)(?:<\d+>)? )?"
                r"with (?:error |status=?)(?:[A-Z_]+\()?(?P<status>\d+)",
        fields={"peer": group("peer"), "status": int, "op": const("completion")},
        source=Source(NCCL, "src/transport/net_ib/p2p.cc", "ncclIbLogCompletionWithError",
                      "before 2.22: src/transport/net_ib.cc ncclIbTest; before 2.9 without "
                      "the peer: 'NET/IB : Got completion with error %d, opcode %d, len %d, "
                      "vendor err %d'"),
        examples=(Example("n1:1:1 [0] transport/net_ib.cc:1909 NCCL WARN NET/IB : Got "
                          "completion from peer 10.0.0.2<39421> with status=12 opcode=0 len=0 "
                          "vendor err 129", {"peer": "10.0.0.2", "status": 12}),
                  Example("n1:1:1 [0] p2p.cc:688 NCCL WARN NET/IB: Got completion from peer "
                          "10.0.0.2<39421> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=RDMA_WRITE"
                          "(0) vendor_err=129", {"status": 12}),
                  Example("h7:881:902 [1] transport/net_ib.cc:775 NCCL WARN NET/IB : Got "
                          "completion with error 12, opcode 1, len 65536, vendor err 129",
                          {"peer": None, "status": 12})),
        near_misses=("n1:1:1 [0] NCCL INFO waiting for completion",)),
    Signature(
        id="nccl.ibv_call_failed", signal="nccl_ib_error", scope="nccl",
        prefilter=("ibv_", "failed"), pattern=r"ibv_(?P<op>\w+)",
        fields={"peer": const(None), "status": const(None), "op": str, "gid": has("GID", "gid"),
                # "failed with %d %s" (2.19+: errno and strerror), "failed with error %s"
                "reason": search(r"failed with (?:error )?(?:\d+ )?([A-Za-z][A-Za-z ]{2,40})",
                                 stripped)},
        source=Source(NCCL, "src/misc/ibvwrap.cc", "wrap_ibv_modify_qp",
                      "and the IBV_*_CHECK macros of the other wrap_ibv_* calls"),
        examples=(Example("n1:1:1 [0] misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp "
                          "failed with 110 Connection timed out, on dev mlx5_0:1, curr state "
                          "INIT, next state RTR, local GID index 3",
                          {"op": "modify_qp", "gid": True, "reason": "Connection timed out"}),
                  Example("n1:1:1 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp "
                          "failed with error Network is unreachable",
                          {"op": "modify_qp", "reason": "Network is unreachable"}),
                  Example("n1:1:1 [0] misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp "
                          "failed with 22 Invalid argument, on dev mlx5_0:1, curr state INIT, "
                          "next state RTR, local GID index 0",
                          {"op": "modify_qp", "reason": "Invalid argument"})),
        near_misses=("n1:1:1 [0] NCCL INFO ibv_fork_init() done",)),
    Signature(
        id="nccl.socket_truncated", signal="nccl_truncated", scope="nccl",
        prefilter=("truncated",),
        pattern=r"message truncated\s*:\s*receiving (?P<got>\d+) bytes instead of (?P<want>\d+)",
        fields={"got": int, "want": int},
        source=Source(NCCL, "src/transport/net_socket.cc", "ncclNetSocketTest"),
        examples=(Example("n1:1:1 [0] NCCL WARN NET/Socket : peer 10.0.0.2<33421> message "
                          "truncated : receiving 1048576 bytes instead of 65536",
                          {"got": 1048576, "want": 65536}),),
        near_misses=("n1:1:1 [0] NCCL INFO log truncated",)),
    Signature(
        id="nccl.duplicate_gpu", signal="nccl_duplicate_gpu", scope="nccl",
        prefilter=("Duplicate GPU",),
        pattern=r"Duplicate GPU detected\s*:\s*rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA "
                r"device (?P<device>\w+)",
        fields={"ranks": compute(lambda m: [int(m.group("a")), int(m.group("b"))]),
                "device": str},
        source=Source(NCCL, "src/init.cc", "initTransportsRank"), implies=DUPLICATE_GPU,
        examples=(Example("n1:1:1 [1] init.cc:722 NCCL WARN Duplicate GPU detected : rank 1 and "
                          "rank 0 both on CUDA device 1a000",
                          {"ranks": [1, 0], "device": "1a000"}),),
        near_misses=("n1:1:1 [1] NCCL WARN Duplicate GPU detected",)),
    Signature(
        id="nccl.shm_error", signal="shm_error", scope="nccl",
        prefilter=(("shared memory", "/dev/shm"), ("rror", "ailed", "nable")),
        pattern=r"shared memory|/dev/shm", fields={"message": body()}, implies=SHM_FULL,
        source=Source(NCCL, "src/misc/shmutils.cc", "ncclShmOpen",
                      "2.26+: src/os/linux.cc; 'Error while creating shared memory segment'"),
        examples=(Example("n1:1:1 [0] misc/shmutils.cc:112 NCCL WARN Error while creating shared "
                          "memory segment /dev/shm/nccl-3lK3iW (size 9637888)"),),
        near_misses=("n1:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",)),
    Signature(
        id="nccl.topo_xml", signal="nccl_topo_xml", scope="nccl_warn", prefilter=("XML ",),
        pattern=r"XML (?:Import Channel : dev (?P<dev>-?\d+) not found"
                r"|(?P<which>Topology|Graph) has wrong version (?P<have>-?\d+), (?P<need>\d+) needed"
                r"|Parse(?: error)? : (?!Ignoring)(?P<parse>.+)|Mismatch : (?P<mismatch>.+))"
                r"|Could not open XML graph file (?P<path>\S+) : (?P<error>.+)",
        fields={"dev": int, "version": group("have", int), "path": str,
                "what": compute(lambda m: "import_channel" if m.group("dev") is not None
                                else "wrong_version" if m.group("which")
                                else "open" if m.group("path") else "parse")},
        source=Source(NCCL, "src/graph/search.cc", "ncclTopoGetChannelFromXml",
                      "since 2.6; the graph NCCL_GRAPH_FILE names (ncclTopoCompute) asks for "
                      "a GPU this node does not have"),
        also=(Source(NCCL, "src/graph/xml.cc", "ncclTopoXmlLoadSystem",
                     "'XML Topology has wrong version'; 'XML Graph has wrong version' in "
                     "ncclTopoXmlGraphLoadGraphs"),
              Source(NCCL, "src/graph/xml.cc", "ncclTopoGetXmlGraphFromFile",
                     "'Could not open XML graph file %s : %s'"),
              Source(NCCL, "src/graph/xml.cc", "xmlLoadSub",
                     "and xmlGetValue/xmlGetToken: 'XML Parse : ...', 'XML Mismatch : ...' "
                     "while reading NCCL_TOPO_FILE or NCCL_GRAPH_FILE")),
        examples=(Example("node7:811:902 [3] graph/search.cc:919 (ncclTopoGetChannelFromXml) "
                          "NCCL WARN XML Import Channel : dev 5 not found.",
                          {"what": "import_channel", "dev": 5}),
                  Example("h1:22:22 [0] graph/xml.cc:394 NCCL WARN XML Topology has wrong "
                          "version 1, 2 needed", {"what": "wrong_version", "version": 1}),
                  Example("vm2:90:131 [0] graph/xml.cc:1257 NCCL WARN Could not open XML graph "
                          "file /etc/nccl/graph.xml : No such file or directory",
                          {"what": "open", "path": "/etc/nccl/graph.xml"}),
                  Example("vm2:90:131 [0] graph/xml.cc:219 NCCL WARN XML Mismatch : gpu / pci",
                          {"what": "parse"})),
        near_misses=("n1:5:9 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /x/graph.xml",
                     "n1:5:9 [0] NCCL INFO XML Parse : Ignoring extra attributes (max 16)",
                     "n1:5:9 [0] NCCL INFO Could not open XML topology file /x/t.xml : No such "
                     "file or directory")),
    Signature(
        id="nccl.err_chain", signal="nccl_err_chain", scope="nccl",
        prefilter=((".cc:", ".cu:", ".h:"), " ->"),
        pattern=r"NCCL INFO (?P<src>[\w./-]+\.(?:cc|cu|h|cpp)):(?P<src_line>\d+)"
                r"(?: \((?P<func>\w+)\))? ->(?: (?P<code>\d+))?(?: \((?P<reason>[^)]*)\))?"
                r"(?P<async> \[Async thread\])?\s*$",
        fields={"src": str, "src_line": int, "code": int, "reason": str,
                "tid": search(r":(\d+) \[\d+\] NCCL INFO", int),
                "async": compute(lambda m: m.group("async") is not None)},
        source=Source(NCCL, "src/include/checks.h", "NCCLCHECK",
                      "each frame an error passes through: '%s:%d -> %d', with errno "
                      "'-> %d (%s)' (SYSCHECK), '-> %d [Async thread]'; newest master adds "
                      "the function, '%s:%d (%s) -> %d' (src/include/debug.h INFO_LOC)"),
        examples=(Example("a100-7:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2",
                          {"src": "misc/socket.cc", "src_line": 567, "code": 2, "tid": 2658}),
                  Example("n4:77:91 [1] NCCL INFO transport/net_ib/connect.cc:402 "
                          "(ncclIbConnect) -> 6 (Connection refused)",
                          {"src": "transport/net_ib/connect.cc", "code": 6,
                           "reason": "Connection refused"}),
                  Example("n4:77:91 [1] NCCL INFO group.cc:64 -> 1 [Async thread]",
                          {"src": "group.cc", "code": 1, "async": True}),
                  Example("n4:77:91 [1] NCCL INFO init.cc:1350 ->", {"code": None})),
        near_misses=("n4:77:91 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
                     "n4:77:91 [1] NCCL INFO init.cc:1584 Cuda Host Alloc Size 4 pointer 0x7f",
                     "n4:77:91 [1] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1")),
    Signature(
        id="nccl.nvls_bind_failed", signal="nccl_nvls_bind",
        prefilter=("NVLink SHARP (NVLS) Multicast",),
        pattern=r"Failed to bind NVLink SHARP \(NVLS\) Multicast memory of size (?P<size>\d+)"
                r"(?:\s*:\s*CUDA error (?P<code>\d+) '(?P<error>[^']*)')?",
        parse=_nvls_bind, implies=NVLS_BIND,
        source=Source(NCCL, "src/transport/nvls.cc", "ncclNvlsBufferSetup",
                      "2.27.3+, after cuMulticastBindMem fails; a three-line WARN (the hint "
                      "about the Fabric Manager and NCCL_NVLS_ENABLE=0 follow unprefixed)"),
        examples=(Example("h100-7:3321:3400 [5] transport/nvls.cc:376 NCCL WARN Failed to bind "
                          "NVLink SHARP (NVLS) Multicast memory of size 4194304 : CUDA error 801 "
                          "'operation not supported'.",
                          {"size": 4194304, "code": 801, "error": "operation not supported"}),
                  Example("[2026-01-09 10:02:11] b200-2:77:98 [0] transport/nvls.cc:380 "
                          "(ncclNvlsBufferSetup) NCCL WARN Failed to bind NVLink SHARP (NVLS) "
                          "Multicast memory of size 8388608 : CUDA error 999 'unknown error'.",
                          {"size": 8388608, "code": 999})),
        near_misses=("h100-7:33:40 [5] NCCL INFO NVLS multicast support is not available on dev 5",
                     "h100-7:33:40 [5] NCCL INFO NVLS Bind mem 0x7f00 UC handle 0x1 MC handle 0x2 "
                     "size 2097152")),
    Signature(
        id="nccl.config_attribute", signal="nccl_config_invalid",
        prefilter=("Invalid config", "attribute value"),
        pattern=r"Invalid config (?P<attr>[\w/ ]+?) attribute value (?P<value>-?\d+)"
                r"(?:/(?P<value2>-?\d+))?",
        fields={"attr": str, "value": int, "value2": int,
                "undef": compute(lambda m: str(CONFIG_UNDEF_INT) in (m.group("value"),
                                                                      m.group("value2")))},
        source=Source(NCCL, "src/init.cc", "parseCommConfig",
                      "2.17+, which skips attributes left at NCCL_CONFIG_UNDEF_INT; 2.14-2.16: "
                      "ncclCommInitRankConfig, which knows no such value; reaches torch's "
                      "DistBackendError after 'Last error:'"),
        examples=(Example("n1:33:33 [0] init.cc:1270 NCCL WARN Invalid config blocking attribute "
                          "value -2147483648",
                          {"attr": "blocking", "value": -2147483648, "undef": True}),
                  Example("Invalid config cgaClusterSize attribute value 9",
                          {"attr": "cgaClusterSize", "value": 9, "undef": False}),
                  Example("g2:8:8 [1] init.cc:2328 NCCL WARN Invalid config min/max channels "
                          "attribute value 64/-2147483648",
                          {"attr": "min/max channels", "undef": True})),
        near_misses=("n1:33:33 [0] init.cc:1280 NCCL WARN Invalid NCCL_COMM_BLOCKING value 5",
                     "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER")),
    Signature(
        id="nccl.warn", signal="nccl_warn", scope="nccl_warn", prefilter=(("WARN", "ERROR"),),
        pattern=r"^(?:.*?\b(?:WARN|ERROR)\b)?", fields={"message": compute(_after_level)},
        source=Source(NCCL, "src/debug.cc", "ncclDebugLogV",
                      "older: ncclDebugLog; every WARN: '[dev] file:line NCCL WARN msg', "
                      "newest '[dev] file:line (function) NCCL WARN msg'"),
        examples=(Example("n1:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: boom",
                          {"message": "socketStartConnect: boom"}),
                  Example("node7:811:902 [3] graph/search.cc:919 (ncclTopoGetChannelFromXml) NCCL "
                          "WARN XML Import Channel : dev 5 not found.",
                          {"message": "XML Import Channel : dev 5 not found."})),
        near_misses=("n1:1:1 [0] NCCL INFO all fine, no WARNING",)),
)
