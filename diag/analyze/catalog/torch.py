"""PyTorch's distributed runtime: c10d's process groups (watchdog, desync debug, DETAIL
fingerprints, monitoredBarrier), the TCPStore and its sockets, env:// rendezvous, DDP's
reducer, the DataLoader and the CPU allocator.

Paths are torch's own (``torch/csrc/distributed/c10d/...``); line numbers move with every
release, so only file and function are given.
"""

from __future__ import annotations

import re

from diag.analyze.catalog.nccl import SHM_FULL
from diag.analyze.catalog.spec import (Example, Implies, Signature, Source, body, compute,
                                       const, group, ranks, search)
from diag.verdict import Basis, Category

TORCH = "pytorch/pytorch"
C10D = "torch/csrc/distributed/c10d/"
PG_NCCL = C10D + "ProcessGroupNCCL.cpp"
PG_GLOO = C10D + "ProcessGroupGloo.cpp"
SOCKET = C10D + "socket.cpp"
TRACE_UTILS = C10D + "TraceUtils.h"

UNUSED_PARAMETERS = Implies(
    Category.UNUSED_PARAMETERS, Basis.EMITTER,
    "Some parameters get no gradient in a step (a branch not taken, an unused head). Pass "
    "find_unused_parameters=True to DistributedDataParallel (slower), or remove/freeze the "
    "unused parameters, or make every rank run the same branches; "
    "TORCH_DISTRIBUTED_DEBUG=DETAIL names them.")

# ---------------------------------------------------------------------------------------
# The watchdog's timeout line: what a regex cannot say alone. torch (or a paste) may wrap
# the message, so the Work(...) part is looked for on the next lines too.

# "WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000)"
# old: "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000)"; also WorkGloo, WorkXCCL
_WORK = re.compile(r"Work[A-Z]*\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)")
_KV = re.compile(r"(?P<k>\w+(?:\(ms\))?)=(?P<v>\[[^\]]*\]|[^,)\s]+)")
_RAN_FOR = re.compile(r"ran for (?P<ms>\d+) milliseconds")
# "[PG ID 2 PG GUID 9 Rank 7]"  "[PG 0 (default_pg) Rank 1]"
_PG = re.compile(r"\[PG (?:ID )?(?P<pg>\d+)")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_watchdog(ex, line, m: re.Match) -> None:
    text = line.body
    if "Work" not in text.split("Watchdog caught", 1)[-1]:
        text = text + " " + ex.next_bodies(line, 2)
    work = _WORK.search(text)
    args = {kv.group("k"): kv.group("v") for kv in _KV.finditer(work.group("args"))} if work else {}
    ran = _RAN_FOR.search(text)
    pg = _PG.search(line.body)
    ex.emit("watchdog_timeout", line, seq=_int(args.get("SeqNum")), op=args.get("OpType"),
            numel_in=_int(args.get("NumelIn")), numel_out=_int(args.get("NumelOut")),
            timeout_ms=_int(args.get("Timeout(ms)")), ran_ms=int(ran.group("ms")) if ran else None,
            pg=int(pg.group("pg")) if pg else None, blocking="blocking wait" in text,
            backend="gloo" if "WorkGloo" in text else "nccl")


# ---------------------------------------------------------------------------------------
# TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint mismatch: one message, two or more sides

# "Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=2373, OpType=_ALLGATHER_BASE,"
# old: "Rank 0 is running inconsistent collective: CollectiveFingerPrint(OpType=ALLREDUCE, ..."
_FP_SIDE = re.compile(r"Rank (?P<rank>\d+) is running (?:inconsistent )?collective: "
                      r"CollectiveFingerPrint\(")
_FP_SEQ = re.compile(r"SequenceNumber=(?P<v>\d+)")
_FP_OP = re.compile(r"OpType=(?P<v>\w+)")
_FP_SHAPE = re.compile(r"TensorShape=(?P<v>\[(?:[^\[\]]|\[[^\]]*\])*\])")
_FP_DTYPE = re.compile(r"TensorDtypes=(?P<v>[\w\[\], ]+?)(?:, Tensor|\)|$)")


def parse_fingerprint(ex, line, m: re.Match) -> None:
    text = line.body
    if "but Rank" not in text:
        text = text + " " + ex.next_bodies(line, 3)
    sides = list(_FP_SIDE.finditer(text))
    if not sides:
        return
    parsed = []
    for i, side in enumerate(sides):
        end = sides[i + 1].start() if i + 1 < len(sides) else len(text)
        parsed.append(_fp_fields(int(side.group("rank")), text[side.end():end]))
    aspects = text.split("differ in the following aspects", 1)[-1] if "differ in" in text else ""
    ex.emit("fingerprint_mismatch", line, sides=parsed, aspects=aspects.strip(" :")[:300],
            inconsistent="inconsistent collective" in text)


def _fp_fields(rank: int, segment: str) -> dict:
    def one(regex: re.Pattern) -> str | None:
        found = regex.search(segment)
        return found.group("v").strip() if found else None
    seq = one(_FP_SEQ)
    return {"rank": rank, "seq": int(seq) if seq else None, "op": one(_FP_OP),
            "shape": one(_FP_SHAPE), "dtype": one(_FP_DTYPE)}


def _timeout_ms(m: re.Match) -> int:
    return int(m.group("t")) * (1 if m.group("unit") == "ms" else 1000)


_WATCHDOG_SOURCE = Source(TORCH, PG_NCCL, "ProcessGroupNCCL::WorkNCCL::checkTimeout",
                          "torch < 2.0: ProcessGroupNCCL::abortTimedOutCollectives; the "
                          "'[Rank r] ' head became logPrefix()'s "
                          "'[PG ID p PG GUID g(desc) Rank r] '")
_BLOCKING_SOURCE = Source(TORCH, PG_NCCL, "ProcessGroupNCCL::WorkNCCL::synchronizeInternal",
                          "TORCH_NCCL_BLOCKING_WAIT=1")
_WATCHDOG_LINE = ("[rank0]:[E1103 04:12:55.118 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
                  "collective operation timeout: WorkNCCL(SeqNum=2207, OpType=_ALLGATHER_BASE, "
                  "NumelIn=8388608, NumelOut=67108864, Timeout(ms)=600000) ran for 600030 "
                  "milliseconds before timing out.")
_BLOCKING_LINE = ("[E ProcessGroupNCCL.cpp:541] [Rank 1] Work WorkNCCL(SeqNum=3, OpType=ALLREDUCE, "
                  "NumelIn=1, NumelOut=1, Timeout(ms)=1800000) timed out in blocking wait "
                  "(NCCL_BLOCKING_WAIT=1).")


def _watchdog(id_: str, needles: tuple, source: Source, example: str, fields: dict) -> Signature:
    return Signature(
        id=id_, signal="watchdog_timeout", oneof="watchdog", prefilter=needles,
        pattern="|".join(re.escape(n) for n in needles[:1]), parse=parse_watchdog,
        source=source, examples=(Example(example, fields),),
        near_misses=("[I ProcessGroupNCCL.cpp:900] [Rank 0] ProcessGroupNCCL watchdog thread "
                     "started",))


WATCHDOG = (
    _watchdog("torch.watchdog_timeout", ("Watchdog caught",), _WATCHDOG_SOURCE, _WATCHDOG_LINE,
              {"rank": 0, "seq": 2207, "op": "_ALLGATHER_BASE", "numel_in": 8388608,
               "timeout_ms": 600000, "ran_ms": 600030, "blocking": False}),
    _watchdog("torch.blocking_wait_timeout", ("timed out in blocking wait",), _BLOCKING_SOURCE,
              _BLOCKING_LINE, {"rank": 1, "seq": 3, "blocking": True}),
    _watchdog("torch.work_timed_out", ("WorkNCCL(", "timed out"), _BLOCKING_SOURCE,
              "[Rank 2] Work WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=600000) timed out",
              {"seq": 3, "timeout_ms": 600000}),
    _watchdog("torch.watchdog_timeout_wrapped", ("operation timeout: Work",), _WATCHDOG_SOURCE,
              "collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLGATHER, NumelIn=191, "
              "NumelOut=1528, Timeout(ms)=200000) ran for 200059 milliseconds before timing out.",
              {"seq": 57, "op": "ALLGATHER", "ran_ms": 200059}),
)

# c10::Error's backtrace names the function that threw: a paste of the watchdog's C++
# frames alone (no "Watchdog caught" line) still says a collective timed out there
WATCHDOG_FRAME = Signature(
    id="torch.watchdog_timeout_frame", signal="watchdog_frame", once_per_process=True,
    prefilter=("checkTimeout",),
    pattern=r"Exception raised from checkTimeout at |WorkNCCL::checkTimeout\(",
    source=Source(TORCH, PG_NCCL, "ProcessGroupNCCL::WorkNCCL::checkTimeout",
                  "C10_THROW_ERROR(DistBackendError, ...): c10::Error's backtrace "
                  "'Exception raised from {function} at {file}:{line}' and 'frame #N:' lines"),
    examples=(Example("Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/"
                      "ProcessGroupNCCL.cpp:525 (most recent call first):", {}),
              Example("frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional"
                      "<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 "
                      "(0x1554e9e0f8f2 in /x/torch/lib/libtorch_cuda.so)", {})),
    near_misses=("frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233",))

C10D_ENTRIES = WATCHDOG + (WATCHDOG_FRAME,) + (
    Signature(
        id="torch.watchdog_status", signal="watchdog_status", flags=re.IGNORECASE,
        prefilter=(("ast enqueued", "ast completed"),),
        # the watchdog's periodic progress line of a healthy rank is not a failure report
        unless=("Work update periodically",),
        pattern=r"last (?:enqueued|completed) (?:NCCL )?work:?\s*-?\d+",
        fields={"at": search(r"at (?:NCCL )?work(?: sequence id)?:?\s*(-?\d+)", int),
                "last_enqueued": search(r"last enqueued (?:NCCL )?work:?\s*(-?\d+)", int,
                                        re.IGNORECASE),
                "last_completed": search(r"last completed (?:NCCL )?work:?\s*(-?\d+)", int,
                                         re.IGNORECASE),
                "pg": search(r"\[PG (?:ID )?(\d+)", int)},
        source=Source(TORCH, PG_NCCL, "ProcessGroupNCCL::watchdogHandler",
                      "'<NCCL error|Work timeout> is detected by watchdog at work: N, last "
                      "enqueued NCCL work: ...'; earlier 'Exception (either an error or "
                      "timeout) detected by watchdog at work:'; later releases: "
                      "ProcessGroupNCCL::Watchdog::runLoop, 'failure detected by watchdog at "
                      "work sequence id: N PG status: last enqueued work: ...'"),
        examples=(Example("[rank0]:[E1103 04:22:51.338 ProcessGroupNCCL.cpp:1785] [PG 0 "
                          "(default_pg) Rank 0] Timeout at NCCL work: 9481, last enqueued NCCL "
                          "work: 9481, last completed NCCL work: 9480.",
                          {"at": 9481, "last_enqueued": 9481, "last_completed": 9480, "pg": 0}),
                  Example("[PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or "
                          "timeout) detected by watchdog at work: 2207, last enqueued NCCL work: "
                          "2207, last completed NCCL work: 2206.", {"at": 2207, "rank": 1}),
                  Example("[rank5]:[E0412 09:41:07.552 ProcessGroupNCCL.cpp:2062] [PG ID 1 PG GUID "
                          "5(tp) Rank 5]  failure detected by watchdog at work sequence id: 731 PG "
                          "status: last enqueued work: 733, last completed work: 730",
                          {"at": 731, "last_enqueued": 733, "last_completed": 730, "pg": 1})),
        near_misses=("the last enqueued job finished",
                     "[rank2]:[I1203 10:00:00.1 ProcessGroupNCCL.cpp:2100] [PG ID 0 PG GUID 0 "
                     "Rank 2] NCCL Work update periodically: last enqueued NCCL work: 812, last "
                     "completed NCCL work: 811.")),
    Signature(
        id="torch.desync_lagging_ranks", signal="desync_report", oneof="desync",
        prefilter=("lagging",),
        pattern=r"\[?(?P<ranks>\d+(?:\s*,\s*\d+)*)\]? (?:are|is) the lagging ranks?",
        fields={"ranks": ranks, "state": const("never_joined"), "seq": const(None)},
        source=Source(TORCH, TRACE_UTILS, "analyzeMissingRanks",
                      "TORCH_NCCL_DESYNC_DEBUG=1: retrieveDesyncReport's text, appended to the "
                      "watchdog's message"),
        examples=(Example("[Rank 0] ranks [3] are the lagging ranks that caused this timeout",
                          {"ranks": [3], "state": "never_joined"}),),
        near_misses=("the lagging/dead/mismatched ranks that caused the desync are:",)),
    Signature(
        id="torch.desync_not_finished", signal="desync_report", oneof="desync",
        prefilter=("didn't finish collective",),
        pattern=r"\[?(?P<ranks>\d+(?:\s*,\s*\d+)*)\]? joined but didn'?t finish "
                r"collective #(?P<seq>\d+)",
        fields={"ranks": ranks, "state": const("joined_not_finished"), "seq": int},
        source=Source(TORCH, TRACE_UTILS, "analyzeLaggingRanks"),
        examples=(Example("   - [1, 2] joined but didn't finish collective #5 (count from 1)",
                          {"ranks": [1, 2], "seq": 5}),),
        near_misses=("rank 1 didn't finish collective work",)),
    Signature(
        id="torch.desync_not_joined", signal="desync_report", oneof="desync",
        prefilter=("but didn't join",),
        pattern=r"\[?(?P<ranks>\d+(?:\s*,\s*\d+)*)\]? finished collective #(?P<seq>\d+), "
                r"but didn'?t join",
        fields={"ranks": ranks, "state": const("finished_not_joined"), "seq": int},
        source=Source(TORCH, TRACE_UTILS, "analyzeLaggingRanks"),
        examples=(Example("\t   - [6] finished collective #730, but didn't join collective #731 "
                          "(count from 1)", {"ranks": [6], "seq": 730}),),
        near_misses=("he finished, but didn't join us",)),
    Signature(
        id="torch.fingerprint_mismatch", signal="fingerprint_mismatch",
        prefilter=("mismatch between collectives",), pattern=r"mismatch between collectives",
        parse=parse_fingerprint,
        source=Source(TORCH, C10D + "ProcessGroupWrapper.cpp", "CollectiveFingerPrint::verify",
                      "TORCH_DISTRIBUTED_DEBUG=DETAIL"),
        examples=(Example("[rank0]: RuntimeError: Detected mismatch between collectives on ranks. "
                          "Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=118, "
                          "OpType=ALLREDUCE, TensorShape=[1024], TensorDtypes=Float), but Rank 1 "
                          "is running collective: CollectiveFingerPrint(SequenceNumber=118, "
                          "OpType=BROADCAST, TensorShape=[1024], TensorDtypes=Float).",
                          {"sides": [{"rank": 0, "seq": 118, "op": "ALLREDUCE",
                                      "shape": "[1024]", "dtype": "Float"},
                                     {"rank": 1, "seq": 118, "op": "BROADCAST",
                                      "shape": "[1024]", "dtype": "Float"}]}),),
        near_misses=("no mismatch between the two runs",)),
    Signature(
        id="torch.monitored_barrier_failed", signal="monitored_barrier_failed",
        prefilter=("monitoredBarrier",),
        pattern=r"Ranks? (?P<ranks>\d+(?:\s*,\s*\d+)*) failed to pass monitoredBarrier "
                r"in (?P<timeout_ms>\d+) ?ms",
        fields={"ranks": ranks, "timeout_ms": int},
        source=Source(TORCH, PG_GLOO, "ProcessGroupGloo::monitoredBarrier"),
        examples=(Example("[rank0]: RuntimeError: [Rank 0]: Rank 2 failed to pass monitoredBarrier "
                          "in 30000 ms", {"ranks": [2], "timeout_ms": 30000}),
                  Example("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms",
                          {"ranks": [1, 3]})),
        near_misses=("Rank 1 successfully reached monitoredBarrier",)),
    Signature(
        id="torch.fr_missing_ranks", signal="fr_missing_ranks", prefilter=("missing ranks",),
        pattern=r"missing ranks:?\s*[\[{](?P<ranks>[\d, ]+)[\]}]", fields={"ranks": ranks},
        source=Source(TORCH, "torch/distributed/flight_recorder/components/types.py",
                      "EntryState.log",
                      "the Flight Recorder analyzer (torchfrtrace): logger.info('missing ranks: "
                      "%s', a set), called from utils.py error_analysis (builder.py "
                      "build_collectives calls that)"),
        examples=(Example("missing ranks: {3}", {"ranks": [3]}),),
        near_misses=("missing ranks are reported below",)),
    Signature(
        id="torch.unique_id_store_get", signal="blamed_rank", oneof="blamed",
        prefilter=("ncclUniqueId",), pattern=r"ncclUniqueId from \[(?P<uid>\d+)\]",
        # "setup": the wait is the communicator's creation, the group's first collective
        fields={"ranks": group("uid", lambda r: [int(r)]), "setup": const(True)},
        source=Source(TORCH, PG_NCCL, "ProcessGroupNCCL::broadcastUniqueNCCLID"),
        examples=(Example("[rank1]: torch.distributed.DistBackendError: [1] is setting up NCCL "
                          "communicator and retrieving ncclUniqueId from [0] via c10d key-value "
                          "store by key '0', but store->get('0') got error: Socket Timeout",
                          {"ranks": [0], "rank": 1, "setup": True}),),
        near_misses=("ncclUniqueId created",)),
    Signature(
        id="torch.monitored_barrier_faulty_rank", signal="blamed_rank", oneof="blamed",
        prefilter=("faulty rank",), pattern=r"check rank (?P<faulty>\d+) logs for faulty",
        fields={"ranks": group("faulty", lambda r: [int(r)])},
        source=Source(TORCH, PG_GLOO, "ProcessGroupGloo::monitoredBarrier"),
        examples=(Example("[rank2]:[E ProcessGroupGloo.cpp:138] Rank 2 successfully reached "
                          "monitoredBarrier, but received errors while waiting for send/recv from "
                          "rank 0. Please check rank 0 logs for faulty rank.", {"ranks": [0]}),),
        near_misses=("no faulty rank found",)),
)

_STORE_FAIL_FIELDS = {"errno": int, "reason": group("reason", str.strip, default="")}

STORE_ENTRIES = (
    Signature(
        id="torch.store_connect_timeout", signal="store_connect_timeout", oneof="store_socket",
        prefilter=("has timed out after",),
        pattern=r"client socket has timed out after (?P<t>\d+)\s*(?P<unit>ms|s)\b.*?connect to "
                r"\((?P<host>[^,()]+), (?P<port>\d+)\)",
        fields={"host": group("host", str.strip), "port": int,
                "timeout_ms": compute(_timeout_ms)},
        source=Source(TORCH, SOCKET, "SocketConnectOp::throwTimeoutError"),
        examples=(Example("torch.distributed.DistNetworkError: The client socket has timed out "
                          "after 60000ms while trying to connect to (10.0.0.1, 29500).",
                          {"host": "10.0.0.1", "port": 29500, "timeout_ms": 60000}),
                  Example("The client socket has timed out after 1800s while trying to connect to "
                          "(gpu-1, 29500).", {"host": "gpu-1", "timeout_ms": 1800000})),
        near_misses=("The server socket has timed out after 60000ms",)),
    Signature(
        id="torch.store_connect_any_address", signal="store_connect_failed",
        oneof="store_socket", prefilter=("connect to", "socket"),
        pattern=r"client socket has failed to connect to any network address of "
                r"\((?P<host>[^,()]+), (?P<port>\d+)\)"
                r"(?:.*?errno: (?P<errno>\d+) - (?P<reason>[^).]*))?",
        fields={"host": group("host", str.strip), "port": int, **_STORE_FAIL_FIELDS},
        source=Source(TORCH, SOCKET, "SocketConnectOp::run"),
        examples=(Example("The client socket has failed to connect to any network address of "
                          "(node1, 29500).", {"host": "node1", "port": 29500, "errno": None}),),
        near_misses=("The client socket has connected to (node1, 29500)",)),
    Signature(
        id="torch.store_connect_address", signal="store_connect_failed", oneof="store_socket",
        prefilter=("connect to", "socket"),
        pattern=r"client socket (?:has failed to connect|cannot be initialized to connect) to "
                r"\[(?P<host>[^\]]+)\]:(?P<port>\d+)(?:.*?errno: (?P<errno>\d+) - "
                r"(?P<reason>[^).]*))?",
        fields={"host": group("host", str.strip), "port": int, **_STORE_FAIL_FIELDS},
        source=Source(TORCH, SOCKET, "SocketConnectOp::tryConnect"),
        examples=(Example("[W socket.cpp:663] [c10d] The client socket has failed to connect to "
                          "[::ffff:10.0.0.1]:29500 (errno: 110 - Connection timed out).",
                          {"host": "::ffff:10.0.0.1", "port": 29500, "errno": 110,
                           "reason": "Connection timed out"}),
                  Example("The client socket cannot be initialized to connect to [localhost]:29500 "
                          "(errno: 97 - Address family not supported by protocol).",
                          {"host": "localhost", "errno": 97})),
        near_misses=("[I socket.cpp:787] [c10d] The client socket has connected to "
                     "[node1]:29500 on [node2]:40992.",)),
    Signature(
        id="torch.client_hostname_unresolvable", signal="hostname_unresolvable",
        prefilter=("hostname of the client socket cannot be retrieved",),
        pattern=r"hostname of the client socket cannot be retrieved",
        source=Source(TORCH, SOCKET, "formatSockAddr",
                      "the server cannot resolve the connecting client's address"),
        examples=(Example("[W socket.cpp:601] [c10d] The hostname of the client socket cannot be "
                          "retrieved. err=-3"),),
        near_misses=("The hostname of the client socket is node1",)),
    Signature(
        id="torch.store_address_unresolvable", signal="name_resolution_failed",
        oneof="name_resolution", prefilter=("network addresses of",),
        pattern=r"(?:IPv4|The) network addresses of \((?P<host>[^,()]+), (?P<port>\d+)\) cannot "
                r"be retrieved(?: \(gai error: (?P<code>-?\d+) - (?P<reason>[^)]*))?",
        fields={"host": str, "port": int, "reason": str},
        source=Source(TORCH, SOCKET, "SocketConnectOp::tryConnect",
                      "'The {IPv4 |IPv6 |}network addresses of (host, port) cannot be retrieved "
                      "(gai error: ...)', the family empty when IPv6 is not preferred; IPv6 alone "
                      "is left out (hosts without IPv6 print it harmlessly)"),
        examples=(Example("[W socket.cpp:436] [c10d] The IPv4 network addresses of "
                          "(badhost, 29500) "
                          "cannot be retrieved (gai error: -2 - Name or service not known).",
                          {"host": "badhost", "port": 29500,
                           "reason": "Name or service not known"}),
                  Example("[W1107 03:14:15.926 socket.cpp:752] [c10d] The network addresses of "
                          "(head-0.svc, 23456) cannot be retrieved (gai error: -3 - Temporary "
                          "failure in name resolution).",
                          {"host": "head-0.svc", "port": 23456,
                           "reason": "Temporary failure in name resolution"})),
        near_misses=("The IPv6 network addresses of (node1, 29500) cannot be retrieved (gai error: "
                     "-3 - Temporary failure in name resolution).",)),
    Signature(
        id="torch.store_address_unresolvable_v6", signal="name_resolution_v6",
        prefilter=("IPv6 network addresses of",),
        pattern=r"IPv6 network addresses of \((?P<host>[^,()]+), (?P<port>\d+)\) cannot be "
                r"retrieved(?: \(gai error: (?P<code>-?\d+) - (?P<reason>[^)]*))?",
        fields={"host": str, "port": int, "reason": str},
        source=Source(TORCH, SOCKET, "SocketConnectOp::tryConnect",
                      "the IPv6 lookup of the store's address: harmless once (a host without "
                      "IPv6 connects over IPv4 next), the name unknown when tryConnect's retry "
                      "loop prints it again and again (torch 2.x tries IPv6 alone first)"),
        examples=(Example("[W1205 08:15:34.949982305 socket.cpp:764] [c10d] The IPv6 network "
                          "addresses of (nosuchhost.invalid, 29611) cannot be retrieved (gai "
                          "error: -2 - Name or service not known).",
                          {"host": "nosuchhost.invalid", "port": 29611,
                           "reason": "Name or service not known"}),),
        near_misses=("The IPv4 network addresses of (node1, 29500) cannot be retrieved",)),
)

STORE_ENTRIES += (
    Signature(
        id="torch.store_bind_failed", signal="store_bind_failed", oneof="store_bind",
        prefilter=("failed to bind to",),
        pattern=r"failed to bind to (?:\[[^\]]*\]|[\w.:]+?):(?P<port>\d+)", fields={"port": int},
        source=Source(TORCH, SOCKET, "SocketListenOp::tryListen"),
        examples=(Example("The server socket has failed to bind to [::]:29500 (errno: 98 - Address "
                          "already in use).", {"port": 29500}),),
        near_misses=("failed to bind to a GPU",)),
    Signature(
        id="torch.store_address_in_use", signal="store_bind_failed", oneof="store_bind",
        prefilter=(("EADDRINUSE", "Address already in use"),),
        pattern=r"EADDRINUSE|Address already in use", fields={"port": const(None)},
        source=Source(TORCH, C10D + "TCPStoreLibUvBackend.cpp", "UvTcpServer::makeWithPort",
                      "the libuv store server (the default in torch 2.4+): 'failed to listen on "
                      "any local network address. port: ..., name: EADDRINUSE'; libuv reports a "
                      "bind's EADDRINUSE at listen"),
        also=(Source(TORCH, SOCKET, "SocketListenOp::run",
                     "'failed to listen on any local network address.' then tryListen's "
                     "'(errno: 98 - Address already in use)'"),),
        examples=(Example("The server socket has failed to listen on any local network address. "
                          "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address "
                          "already in use", {"port": None}),),
        near_misses=("address already in use by another job?",)),
    Signature(
        id="torch.store_wait_for_clients", signal="store_wait_clients",
        prefilter=("clients joined",),
        pattern=r"waiting for clients\. (?P<joined>\d+)/(?P<total>\d+) clients joined",
        fields={"joined": int, "total": int},
        source=Source(TORCH, C10D + "TCPStore.cpp", "TCPStore::waitForWorkers"),
        examples=(Example("torch.distributed.DistStoreError: Timed out after 901 seconds waiting "
                          "for clients. 1/2 clients joined.", {"joined": 1, "total": 2}),),
        near_misses=("2 clients joined",)),
    Signature(
        id="torch.store_based_barrier", signal="store_wait_clients",
        prefilter=("store based barrier",),
        pattern=r"store based barrier.*?world_size=(?P<total>\d+), "
                r"(?:worker_count|num_workers_joined)=(?P<joined>\d+)",
        fields={"joined": int, "total": int,
                # the process group's ordinal: 1 is init_process_group's, 2+ new_group's
                "group": search(r"store_based_barrier_key:(\d+)", int),
                "waiter": search(r"for rank:? (\d+)", int)},
        source=Source(TORCH, "torch/distributed/distributed_c10d.py", "_store_based_barrier",
                      "torch 2.x says num_workers_joined=, 1.x worker_count="),
        examples=(Example("RuntimeError: Timed out initializing process group in store based "
                          "barrier on rank: 0, for key: store_based_barrier_key:1 (world_size=2, "
                          "worker_count=1, timeout=0:30:00)", {"joined": 1, "total": 2,
                                                               "group": 1, "waiter": None}),
                  Example("I0510 07:28:04.417845 1398 distributed_c10d.py:337] Waiting in store "
                          "based barrier to initialize process group for rank: 2, key: "
                          "store_based_barrier_key:2 (world_size=8, worker_count=7, "
                          "timeout=0:30:00)", {"joined": 7, "total": 8, "group": 2,
                                               "waiter": 2}),
                  Example("torch.distributed.DistStoreError: Timed out initializing process group "
                          "in store based barrier on rank 3, for key: store_based_barrier_key:1 "
                          "(world_size=8, num_workers_joined=7, timeout=0:30:00 error=Socket "
                          "Timeout)", {"joined": 7, "total": 8})),
        near_misses=("Added key: store_based_barrier_key:1 to store for rank: 0",)),
    Signature(
        id="torch.store_based_barrier_world", signal="world_size",
        prefilter=("store based barrier",),
        pattern=r"store based barrier.*?world_size=(?P<n>\d+), "
                r"(?:worker_count|num_workers_joined)=\d+",
        fields={"n": int, "source": const("store_barrier")},
        source=Source(TORCH, "torch/distributed/distributed_c10d.py", "_store_based_barrier"),
        examples=(Example("Timed out initializing process group in store based barrier on rank: "
                          "0, for key: store_based_barrier_key:1 (world_size=4, worker_count=3, "
                          "timeout=0:30:00)", {"n": 4}),),
        near_misses=("Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 "
                     "with 2 nodes.",)),
    Signature(
        id="torch.env_rendezvous_var_missing", signal="env_missing",
        prefilter=("expected, but not set",),
        pattern=r"environment variable (?P<var>\w+) expected, but not set", fields={"var": str},
        source=Source(TORCH, "torch/distributed/rendezvous.py",
                      "_env_rendezvous_handler._env_error"),
        examples=(Example("ValueError: Error initializing torch.distributed using env:// "
                          "rendezvous: environment variable MASTER_ADDR expected, but not set",
                          {"var": "MASTER_ADDR"}),),
        near_misses=("MASTER_ADDR expected",)),
    Signature(
        id="torch.store_connect_timeout_old", signal="store_connect_timeout",
        prefilter=("connect() timed out",),
        pattern=r"connect\(\) timed out\. Original timeout was (?P<timeout_ms>\d+) ms",
        fields={"host": const(None), "port": const(None), "timeout_ms": int},
        source=Source(TORCH, "torch/lib/c10d/Utils.cpp", "tcputil::handleConnectException",
                      "torch 1.x, called from tcputil::connect: kConnectTimeoutMsg 'connect() "
                      "timed out.' + ' Original timeout was N ms.'; the file later moved to "
                      "torch/csrc/distributed/c10d/"),
        examples=(Example("RuntimeError: connect() timed out. Original timeout was 1800000 ms.",
                          {"timeout_ms": 1800000}),),
        near_misses=("connect() timed out",)),
    Signature(
        id="torch.store_socket_timeout", signal="store_wait_timeout", oneof="store_wait",
        prefilter=("Socket Timeout",), pattern=r"Socket Timeout", fields={"message": body()},
        source=Source(TORCH, C10D + "Utils.hpp", "SYSCHECK",
                      "the macro's EAGAIN/EWOULDBLOCK branch, hit through tcputil::recvBytes/"
                      "sendBytes: a store get/wait whose peer never answered"),
        examples=(Example("torch.distributed.DistNetworkError: Socket Timeout"),),
        near_misses=("socket timeout set to 30s",)),
    Signature(
        id="torch.store_wait_timeout", signal="store_wait_timeout", oneof="store_wait",
        prefilter=("wait timeout after",), pattern=r"wait timeout after",
        fields={"message": body()},
        source=Source(TORCH, C10D + "TCPStore.cpp", "TCPStore::doWait"),
        examples=(Example("torch.distributed.DistStoreError: wait timeout after 30000ms, keys: "
                          "/default_pg/0//cuda//0"),),
        near_misses=("no wait timeout",)),
)

DDP_ENTRIES = (
    Signature(
        id="torch.ddp_prior_reduction_unfinished", signal="ddp_unused_params", oneof="ddp",
        prefilter=(("finished reduction in the prior iteration", "not used in producing"),),
        pattern=r"finished reduction in the prior iteration|not used in producing",
        fields={"named_rank": const(None), "params": const(None)}, implies=UNUSED_PARAMETERS,
        source=Source(TORCH, C10D + "reducer.cpp", "Reducer::ensure_prior_reduction_finished"),
        examples=(Example("RuntimeError: Expected to have finished reduction in the prior "
                          "iteration before starting a new one. This error indicates that your "
                          "module has parameters that were not used in producing loss.",
                          {"named_rank": None}),),
        near_misses=("finished reduction",)),
    Signature(
        id="torch.ddp_params_without_grad", signal="ddp_unused_params", oneof="ddp",
        prefilter=("did not receive grad",),
        pattern=r"did not receive grad for rank (?P<named_rank>\d+):\s*(?P<params>.*)",
        fields={"named_rank": int, "params": group("params", lambda p: p.strip()[:300])},
        implies=UNUSED_PARAMETERS,
        source=Source(TORCH, C10D + "reducer.cpp", "Reducer::ensure_prior_reduction_finished",
                      "names under TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL"),
        examples=(Example("Parameter indices which did not receive grad for rank 1: 12 13",
                          {"named_rank": 1, "params": "12 13"}),
                  Example("Parameters which did not receive grad for rank 0: head.weight, "
                          "head.bias", {"named_rank": 0, "params": "head.weight, head.bias"})),
        near_misses=("did not receive grad",)),
)

MEMORY_ENTRIES = (
    Signature(
        id="torch.dataloader_shm", signal="shm_error",
        prefilter=("shared memory", ("insufficient", "No space left")),
        pattern=r"shared memory", fields={"message": body()}, implies=SHM_FULL,
        source=Source(TORCH, "torch/csrc/DataLoader.cpp", "handler_SIGBUS",
                      "a DataLoader worker's bus error: /dev/shm is full"),
        examples=(Example("ERROR: Unexpected bus error encountered in worker. This might be caused "
                          "by insufficient shared memory (shm)."),),
        near_misses=("using shared memory for the tensors",)),
)

TENSOR_ON_WRONG_DEVICE = Implies(
    Category.OTHER, Basis.EMITTER,
    "A collective got a tensor on a device its process group has no backend for (a CPU "
    "tensor on an NCCL-only group): create the tensor on the group's device "
    "(torch.cuda.current_device()), or use a gloo group for CPU objects "
    "(init_process_group(backend='cpu:gloo,cuda:nccl') or new_group(backend='gloo')); if "
    "a library makes the call, upgrade it.")

BACKEND_ENTRIES = (
    Signature(
        id="torch.no_backend_for_device", signal="tensor_device_backend",
        oneof="tensor_device_backend", prefilter=("No backend type associated",),
        pattern=r"No backend type associated with device type (?P<device>\w+)",
        fields={"device": str}, implies=TENSOR_ON_WRONG_DEVICE,
        source=Source(TORCH, C10D + "ProcessGroup.cpp", "ProcessGroup::getBackend",
                      "torch 2.0+ (multi-backend groups; earlier inline in ProcessGroup.hpp)"),
        examples=(Example("RuntimeError: No backend type associated with device type cpu",
                          {"device": "cpu"}),
                  Example("[rank2]: RuntimeError: No backend type associated with device type "
                          "npu", {"device": "npu", "rank": 2})),
        near_misses=("Backend nccl does not support allgather_coalesced",
                     "No backend type associated with this store")),
    Signature(
        id="torch.nccl_tensor_not_cuda", signal="tensor_device_backend",
        oneof="tensor_device_backend", prefilter=("Tensors must be CUDA and dense",),
        pattern=r"Tensors must be CUDA and dense", fields={"device": const(None)},
        implies=TENSOR_ON_WRONG_DEVICE,
        source=Source(TORCH, PG_NCCL, "check_gpu_single_tensor",
                      "torch 1.x and NCCL-only groups; a ValueError in 2.x"),
        examples=(Example("ValueError: Tensors must be CUDA and dense", {"device": None}),),
        near_misses=("Tensors must be contiguous",)),
)

ENTRIES = C10D_ENTRIES + STORE_ENTRIES + DDP_ENTRIES + MEMORY_ENTRIES + BACKEND_ENTRIES
