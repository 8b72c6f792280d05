"""NCCL's (and RCCL's) per-collective trace: one INFO line per collective a rank issues
(NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=COLL), and the communicator lines that say which
rank of which communicator a process is. detectors/mismatch.py lines the ranks' traces up
opCount by opCount.

People quote these lines from per-rank files (``LOG1.3.txt:host:pid:tid [3] NCCL INFO``,
``grep -H`` style), so NCCL's ``host:pid:tid [dev]`` prefix is searched for anywhere
before the message, and what stands before it is kept as ``quoted_from``.
"""

from __future__ import annotations

import re
from dataclasses import replace

from diag.analyze.catalog.spec import Example, Signature, Source

NCCL = "NVIDIA/nccl"

# "learnfair062:32615:32615 [0] NCCL INFO", or quoted: "LOG1.0.txt:learnfair062:32615:..."
_PREFIX = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]")
_QUOTED_PREFIX = re.compile(r"(?:^|(?<=[\s:|>]))(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) "
                            r"\[(?P<dev>\d+)\]")

# src/enqueue.cc ncclEnqueueCheck (2.4+; src/collectives/*.cu in 2.3): "%s: opCount %lx
# sendbuff %p recvbuff %p count %zi datatype %d op %d root %d comm %p [nranks=%d] stream %p";
# RCCL (rocm-6.0+) appends " task %d globalrank %d". A paste may cut the line short: the
# fields after the datatype are optional.
_COLL = (r"(?P<op>[A-Z][A-Za-z]+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff (?P<sendbuff>\S+) "
         r"recvbuff (?P<recvbuff>\S+) count (?P<count>\d+) datatype (?P<dtype>\d+)"
         r"(?: op (?P<redop>\d+)(?: root (?P<root>-?\d+)(?: comm (?P<comm>0x[0-9a-fA-F]+|\(nil\)) "
         r"\[nranks=(?P<nranks>\d+)\](?: stream (?P<stream>\S+))?"
         r"(?: task (?P<task>\d+) globalrank (?P<grank>\d+))?)?)?)?")

# src/init.cc: "comm %p rank %d nranks %d cudaDev %d ... commId 0x%llx - Init START|COMPLETE"
# (commId since 2.18: the same on every rank of the communicator), "comm %p rank %d nRanks %d
# nNodes %d ..." (initTransportsRank), 2.3's "comm %p rank %d nranks %d".
_COMM = (r"\bcomm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)"
         r"(?:.*?\bcommId (?P<commid>0x[0-9a-fA-F]+))?")


def _int(text: str | None, base: int = 10) -> int | None:
    return None if text is None else int(text, base)


def _prefixed(line, m: re.Match):
    """The line with NCCL's prefix read from wherever it stands before the message, and
    what a quoter put in front of it."""
    found = _PREFIX.match(m.string)  # the common case: NCCL's prefix starts the line
    if found is None:
        found = _QUOTED_PREFIX.search(m.string, 0, m.start())
    if found is None:
        return line, None
    quoted = m.string[:found.start()].strip().rstrip(":") or None
    pid = int(found.group("pid"))
    if line.pid != pid or line.host is None:
        line = replace(line, host=line.host or found.group("host"), pid=pid)
    return line, (quoted, int(found.group("dev")))


def parse_coll(ex, line, m: re.Match) -> None:
    line, where = _prefixed(line, m)
    quoted, dev = where or (None, None)
    g = m.group
    ex.emit("nccl_coll", line, op=g("op"), opcount=int(g("opcount"), 16), count=int(g("count")),
            dtype=int(g("dtype")), redop=_int(g("redop")), root=_int(g("root")), comm=g("comm"),
            nranks=_int(g("nranks")), stream=g("stream"), comm_rank=_int(g("grank")),
            dev=dev, quoted_from=quoted, pid=line.pid)


def parse_comm(ex, line, m: re.Match) -> None:
    line, where = _prefixed(line, m)
    g = m.group
    ex.emit("nccl_comm", line, comm=g("comm"), comm_rank=int(g("rank")),
            nranks=int(g("nranks")), commid=g("commid"), dev=where[1] if where else None,
            quoted_from=where[0] if where else None, pid=line.pid)


_ENQUEUE = Source(NCCL, "src/enqueue.cc", "ncclEnqueueCheck",
                  "NCCL_DEBUG_SUBSYS=COLL; 2.3: src/collectives/*.cu; count %zi until 2.23, %zu "
                  "since; opCount is per communicator (since 2.12 one per launch, so the "
                  "collectives of one group share it)")

COLL = (
    Signature(
        id="nccl.coll_trace", signal="nccl_coll", scope="nccl", prefilter=(": opCount ",),
        pattern=_COLL, parse=parse_coll, source=_ENQUEUE,
        also=(Source("ROCm/rccl", "src/enqueue.cc", "ncclEnqueueCheck",
                     "rocm-6.0+ appends ' task %d globalrank %d'"),),
        examples=(
            Example("node3:1201:1201 [1] NCCL INFO ReduceScatter: opCount 1a sendbuff 0x7f10 "
                    "recvbuff 0x7f20 count 4096 datatype 9 op 0 root 0 comm 0x55aa [nranks=16] "
                    "stream 0x55bb", {"op": "ReduceScatter", "opcount": 26, "count": 4096,
                                      "dtype": 9, "nranks": 16, "dev": 1, "pid": 1201}),
            Example("rank7.log:gpu-a12:88:88 [3] NCCL INFO AllReduce: opCount 0 sendbuff "
                    "0x7f0000 recvbuff 0x7f0000 count 1 datatype 7 op 0 root 0 comm 0x5611 "
                    "[nranks=8] stream 0x5612", {"quoted_from": "rank7.log", "dev": 3,
                                                 "opcount": 0}),
            Example("mi300-2:4410:4410 [5] NCCL INFO AllGather: opCount 3f sendbuff 0x7f1 "
                    "recvbuff 0x7f2 count 2048 datatype 0 op 0 root 0 comm 0x5599 [nranks=8] "
                    "stream 0x55a0 task 0 globalrank 13", {"comm_rank": 13, "opcount": 63}),
            Example("x:9:9 [0] NCCL INFO Broadcast: opCount 4 sendbuff 0x7f0 recvbuff 0x7f0 "
                    "count 1024 datatype 4 op 0 root", {"op": "Broadcast", "nranks": None})),
        near_misses=(
            "n1:7:7 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo 1 proto 2 time 12.3",
            "n1:7:9 [0] proxy.cc:455 NCCL WARN Unable to post incomplete proxy op chain 0..3 "
            "(opCount 17)",
            "n1:7:9 [0] 1717171717.5 ncclProxySaveColl:12 NCCL TRACE opCount 28c slicesteps 4 "
            "spl 2 cpl 2 nbytes 65536")),
    Signature(
        id="nccl.comm_rank", signal="nccl_comm", scope="nccl", prefilter=("comm 0x", "anks "),
        pattern=_COMM, parse=parse_comm,
        source=Source(NCCL, "src/init.cc", "ncclCommInitRankFunc",
                      "'Init START/COMPLETE' (commId since 2.18); also initTransportsRank's "
                      "'comm %p rank %d nRanks %d nNodes %d'"),
        examples=(
            Example("gpu-b07:5521:5521 [2] NCCL INFO ncclCommInitRank comm 0x55d0c8a0 rank 10 "
                    "nranks 16 cudaDev 2 nvmlDev 2 busId 41000 commId 0x9e4f1b2c3d4e5f60 - "
                    "Init COMPLETE", {"comm": "0x55d0c8a0", "comm_rank": 10, "nranks": 16,
                                      "commid": "0x9e4f1b2c3d4e5f60", "pid": 5521}),
            Example("out.1:h2:77:77 [1] NCCL INFO comm 0x7f3bf405a260 rank 1 nranks 8 cudaDev 1 "
                    "busId 1b000 - Init COMPLETE", {"comm_rank": 1, "quoted_from": "out.1"})),
        near_misses=("n1:1:9 [0] NCCL INFO Ranks 0 and 1 share a node",
                     "n1:1:9 [0] NCCL INFO comm 0x55 rank 0 has 2 channels")),
)

# ---------------------------------------------------------------------------------------
# The RAS client's report (NCCL 2.24+: `ncclras`, or NCCL_RAS_* to a file): per section
# header and per line one signal, in order; the detector reads a rank line in the light
# of the section and the "N ranks have ..." line above it (detectors/hang.py).

_RAS = Source(NCCL, "src/ras/client_support.cc", "rasClientRunComms",
              "text report of the ncclras client, NCCL 2.24+ (2.24 says 'different collective "
              "operation counts', later ones name the collective)")
_RAS_GPU = (r"GPU (?P<gpu>[\d,]+(?: \(NVML [\d,]+\))?) managed by process (?P<pid>\d+) "
            r"on node (?P<node>\S+)")


def _ras(what: str):
    def parse(ex, line, m: re.Match) -> None:
        fields = {k: (int(v) if v and v.isdigit() and k not in ("gpu", "node") else v)
                  for k, v in m.groupdict().items()}
        rank = fields.pop("rank", None)
        ex.emit("nccl_ras", line, rank=rank, what=what, **fields)
    return parse


RAS = (
    Signature(
        id="nccl.ras_section", signal="nccl_ras", prefilter=((") MISMATCH", ") INCOMPLETE",
                                                             ") ERROR"),),
        pattern=r"^\s*#\d+-\d+ \((?P<hash>[0-9a-f]{16})\) (?P<state>MISMATCH|INCOMPLETE|ERROR)\s*$",
        parse=_ras("section"), source=_RAS,
        examples=(Example("#0-1 (0c4de57a91b2f830) MISMATCH", {"what": "section",
                                                             "state": "MISMATCH"}),),
        near_misses=("#3 (see above) ERROR",)),
    Signature(
        id="nccl.ras_differ", signal="nccl_ras", prefilter=("Communicator ranks have different",),
        pattern=r"Communicator ranks have different (?:(?P<op>\w+) operation counts|status)",
        parse=_ras("differ"), source=_RAS,
        examples=(Example("  Communicator ranks have different AllReduce operation counts",
                          {"what": "differ", "op": "AllReduce"}),
                  Example("  Communicator ranks have different status", {"op": None})),
        near_misses=("Communicator ranks have different hosts",)),
    Signature(
        id="nccl.ras_group", signal="nccl_ras", prefilter=(" ranks ha",),
        pattern=r"^\s*(?P<n>\d+) ranks have (?:launched up to operation (?P<count>\d+)"
                r"|(?P<none>not launched any operations)|status (?P<status>[A-Z]+))",
        parse=_ras("group"), source=_RAS,
        examples=(Example("  15 ranks have launched up to operation 48120",
                          {"what": "group", "n": 15, "count": 48120}),
                  Example("  3 ranks have status RUNNING", {"n": 3, "status": "RUNNING"}),
                  Example("  2 ranks have not launched any operations", {"count": None})),
        near_misses=("8 ranks have finished the epoch",)),
    Signature(
        id="nccl.ras_rank", signal="nccl_ras", prefilter=(" -- ", "Rank "),
        pattern=r"^\s*Rank (?P<rank>\d+)(?: has (?:launched up to operation (?P<count>\d+)"
                r"|(?P<none>not launched any operations)|status (?P<status>[A-Z]+)))? -- "
                rf"(?:{_RAS_GPU}|\[process information not found\])",
        parse=_ras("rank"), source=_RAS,
        examples=(Example("  Rank 13 has launched up to operation 48119 -- GPU 5 managed by "
                          "process 20417 on node gpu-b12", {"rank": 13, "count": 48119,
                                                            "node": "gpu-b12", "pid": 20417}),
                  Example("  Rank 2 -- GPU 2 (NVML 6) managed by process 811 on node 10.1.0.7",
                          {"rank": 2, "gpu": "2 (NVML 6)", "count": None}),
                  Example("  Rank 6 has status ABORT -- [process information not found]",
                          {"rank": 6, "status": "ABORT"})),
        near_misses=("Rank 3 -- epoch 2 done", "[Rank 0] -- GPU 0 ready")),
    Signature(
        id="nccl.ras_lost", signal="nccl_ras",
        prefilter=(("considered dead", "Missing communicator data"),),
        pattern=r"(?P<n>\d+) job process(?:es are| is) considered dead"
                r"|Missing communicator data from (?P<missing>\d+) (?P<of>job process|rank)",
        parse=_ras("lost"), source=_RAS,
        examples=(Example("  2 job processes are considered dead (unreachable via the RAS "
                          "network)", {"what": "lost", "n": 2}),
                  Example("  Missing communicator data from 1 rank", {"missing": 1,
                                                                       "of": "rank"})),
        near_misses=("the process is considered healthy",)),
)

ENTRIES = COLL + RAS
