"""Line parsers for text logs: NCCL_DEBUG, watchdog, c10d, gloo, torchelastic, Python, Slurm
and training-progress lines become typed ``Signal``s, whatever launcher prefixed them.

One pass over the lines, linear in their number. Each family of parsers first checks a
few plain substrings, so the common line (NCCL INFO chatter, training output) costs a
handful of ``in`` tests before it is dropped. A line that makes a parser raise is counted
and skipped: a log from a dying job is exactly the input this must survive.

Wording changes across torch and NCCL versions, so every pattern matches the stable core
of a message and leaves the rest optional. Each regex carries an example line.
"""

from __future__ import annotations

import calendar
import functools
import re
from dataclasses import dataclass, field, replace

from diag.analyze.signals import Signal
from diag.format.schema import MAX_WORLD_SIZE

MAX_LINE = 8192  # longer lines are cut before parsing: a regex over 1 MB of junk is a stall
_ANY_TIME_WINDOW = 72  # timestamps sit near the start of a line

# ---------------------------------------------------------------------------------------
# Prefixes: who printed the line, and when.

# "[rank3]:[E1218 ...]"   torch's own prefix: a global rank
# "[default0]:..."        torchrun --tee: role name + LOCAL rank
# "[1,3]<stdout>:..."     mpirun --tag-output: job, rank
# "3: ..."                srun --label: the task id
# "node-7: ..."           pdsh (DeepSpeed's multi-node launcher): the host
_LEAD = re.compile(
    r"\s*(?:\[(?P<tag>[A-Za-z_]+?)(?P<tagn>\d+)\]:"
    r"|\[\d+,(?P<mpi>\d+)\]<std(?:out|err)>:"
    r"|(?P<label>\d{1,5}): (?=\S)"
    r"|(?P<host>[a-z][\w.-]*?\d[\w.-]*): (?=\S))")
_NOT_HOSTS = ("rank", "step", "epoch", "iter", "batch", "layer", "loss", "cuda", "gpu")
# "[Rank 0] Watchdog ..."  "[PG ID 2 PG GUID 9 Rank 7] ..."  "[PG 0 (default_pg) Rank 1] ..."
_RANK_BRACKET = re.compile(r"\[(?:PG [^\]]{0,80}?)?Rank (\d+)\]")
# "[rank=3] ..." "[RANK 3]" "rank: 3 |"
_RANK_LOOSE = re.compile(r"\[rank[=: ]?(\d+)\]", re.IGNORECASE)
# a per-rank log's file name: "rank3.log"  "train_rank_03.out"  "log.rank-12"
_RANK_IN_PATH = re.compile(r"(?<![a-z])rank[_.-]?(\d{1,6})(?!\d)", re.IGNORECASE)
# "node5:240:240 [6] NCCL INFO ..."  host:pid:tid [cudaDev]
_NCCL_PREFIX = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]")
# "2023-11-05_06:21:10"  "[2026-03-18 11:13:09]"  "2024-05-01T10:00:00.123Z"  "... 10:00:00,123"
# or glog's "[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629]"  "W0729 03:35:32.842631 1400
# x.py:779]"
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
                   r"|(?<![\w])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")


@dataclass
class _Line:
    """One line with its launcher prefixes peeled off and what they said."""

    n: int
    raw: str
    body: str
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    time: float | None = None
    year: int | None = None  # when the line's own timestamp states one


def _epoch(year: int, mon: int, day: int, hh: int, mm: int, ss: int, frac: str | None) -> float:
    if not (1 <= mon <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 61):
        raise ValueError("not a time")
    return _whole_seconds(year, mon, day, hh, mm, ss) + (float("0." + frac) if frac else 0.0)


@functools.lru_cache(maxsize=4096)
def _whole_seconds(year: int, mon: int, day: int, hh: int, mm: int, ss: int) -> int:
    # consecutive lines share their second: timegm is the costly part of a timestamp
    return calendar.timegm((year, mon, day, hh, mm, ss, 0, 0, 0))


def parse_time(text: str, year: int = 2000) -> float | None:
    """Seconds since the epoch (as if UTC) of the first timestamp near the start of text;
    glog stamps carry no year, so ``year`` stands in."""
    return _parse_time(text, year)[0]


def _parse_time(text: str, year: int) -> tuple[float | None, int | None]:
    """(time, the year the stamp states or None)."""
    m = _TIME.search(text, 0, _ANY_TIME_WINDOW)
    if not m:
        return None, None
    g = m.groups()
    try:
        if g[0]:
            y, mo, d, hh, mi, ss = map(int, g[:6])
            return _epoch(y, mo, d, hh, mi, ss, g[6]), y
        mo, d, hh, mi, ss = map(int, g[7:12])
        return _epoch(year, mo, d, hh, mi, ss, g[12]), None
    except (ValueError, OverflowError):
        return None, None


def _peel(line: _Line) -> None:
    """Strip launcher prefixes (up to three, they nest: ``node1: [rank3]: ...``)."""
    for _ in range(3):
        m = _LEAD.match(line.body)
        if not m:
            return
        if m.group("tag"):
            _tag(line, m.group("tag").lower(), int(m.group("tagn")))
        elif m.group("mpi"):
            line.rank = int(m.group("mpi"))
        elif m.group("label"):
            if line.local_rank is None:
                line.local_rank = int(m.group("label"))
        elif m.group("host").lower().startswith(_NOT_HOSTS):
            return
        else:
            line.host = m.group("host")
        line.body = line.body[m.end():]


def _tag(line: _Line, tag: str, n: int) -> None:
    # torch prints "[rankN]:" with the global rank; torchrun's tee prefix is role+local rank
    if tag == "rank":
        line.rank = n
    else:
        line.local_rank = n


def parse_line(n: int, raw: str, year: int = 2000) -> _Line:
    """The prefixes of one raw line: rank, host, pid and time where the line says so."""
    line = _Line(n, raw, raw[:MAX_LINE])
    _peel(line)
    body = line.body
    m = _NCCL_PREFIX.match(body) if ":" in body[:80] else None
    if m is None and body[:1] == "[" and body[5:6] == "-":  # "[2026-03-18 11:13:09] host:pid:tid"
        m = _NCCL_PREFIX.match(body, body.find("] ") + 2)
    if m:
        line.host, line.pid = line.host or m.group("host"), int(m.group("pid"))
        line.time, line.year = _parse_time(body[:m.start()], year) if m.start() else (None, None)
        return line  # NCCL's rank comes from its init lines, in the post-pass
    if ":" in body[:_ANY_TIME_WINDOW]:
        line.time, line.year = _parse_time(body, year)
    if line.rank is None and "Rank " in body:
        m = _RANK_BRACKET.search(body)
        line.rank = int(m.group(1)) if m else None
    if line.rank is None and "ank" in body[:80]:
        m = _RANK_LOOSE.search(body, 0, 80)
        line.rank = int(m.group(1)) if m else None
    return line


# ---------------------------------------------------------------------------------------
# The extractor: state shared by the multi-line parsers, and the post-pass.


@dataclass
class _Traceback:
    start: int
    frames: list = field(default_factory=list)
    tiny: bool = False  # a one-element tensor in the locals: a flag or barrier sync


@dataclass
class Extractor:
    """Walks one file's lines; ``signals`` grows as it goes, ``finish`` fills in ranks that
    only later lines reveal (NCCL init lines, torchelastic pids)."""

    file: str
    lines: list
    signals: list = field(default_factory=list)
    failures: int = 0
    year: int = 2000
    tracebacks: dict = field(default_factory=dict)
    elastic: dict | None = None
    elastic_section: str | None = None
    pid_rank: dict = field(default_factory=dict)  # (host, pid) -> (nranks, rank)
    seen_channels: set = field(default_factory=set)  # the processes' NET channels emitted

    def emit(self, kind: str, line: _Line, rank: int | None = None, **fields) -> Signal:
        if line.pid is not None:
            fields.setdefault("pid", line.pid)
        if line.local_rank is not None:
            fields.setdefault("local_rank", line.local_rank)
        sig = Signal(kind, self.file, line.n, line.raw[:2000], line.rank if rank is None else rank,
                     line.host, line.time, fields)
        self.signals.append(sig)
        return sig

    def next_bodies(self, line: _Line, count: int) -> str:
        """The bodies of the next ``count`` lines, joined: for messages torch or a paste
        wrapped over several lines."""
        nxt = self.lines[line.n:line.n + count]
        return " ".join(parse_line(line.n + 1 + i, s[:MAX_LINE]).body.strip() for i,
                        s in enumerate(nxt))

    def feed(self, n: int, raw: str) -> None:
        line = parse_line(n, raw, self.year)
        self.year = line.year or self.year
        # NCCL INFO chatter is most of a big job's log, and only NCCL's parsers can use it
        families = _NCCL_ONLY if line.pid is not None and "NCCL INFO" in line.body else FAMILIES
        for family in families:
            try:
                family(self, line)
            except Exception:  # noqa: BLE001 - one parser's bug must not hide the others' facts
                self.failures += 1

    def finish(self) -> list[Signal]:
        _elastic_flush(self)
        self.signals = _fill_ranks(self.signals, self.pid_rank, rank_of_path(self.file))
        return self.signals


def rank_of_path(path: str) -> int | None:
    """The rank a per-rank log file's name gives (``rank3.log``, ``train_rank_03.out``,
    ``log.rank-12``); None for a shared console log."""
    m = _RANK_IN_PATH.search(path.replace("\\", "/").rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def _fill_ranks(signals: list[Signal], pid_rank: dict, file_rank: int | None) -> list[Signal]:
    """Give a rank to lines that carry only a pid (NCCL), a local rank (torchrun tee; the
    global one only when the whole log is from one host) or nothing in a per-rank file."""
    hosts = {s.host for s in signals if s.host}
    multi = len(hosts) > 1 or any(s.kind == "nnodes" and s.fields.get("n", 1) > 1 for s in signals)
    out = []
    for sig in signals:
        if sig.rank is None:
            rank = _rank_from_pid(sig, pid_rank)
            if rank is None and not multi:
                rank = sig.fields.get("local_rank")
            rank = file_rank if rank is None else rank
            sig = replace(sig, rank=rank) if rank is not None else sig
        out.append(sig)
    return out


def _rank_from_pid(sig: Signal, pid_rank: dict) -> int | None:
    pid = sig.fields.get("pid")
    if pid is None:
        return None
    hit = pid_rank.get((sig.host, pid)) or pid_rank.get((None, pid))
    return hit[1] if hit else None


def _learn_pid(ex: Extractor, host: str | None, pid: int | None, rank: int, nranks: int) -> None:
    # the comm with the most ranks is the world comm: its rank is the global rank
    if pid is None:
        return
    for key in ((host, pid), (None, pid)):
        old = ex.pid_rank.get(key)
        if old is None or nranks > old[0]:
            ex.pid_rank[key] = (nranks, rank)


# ---------------------------------------------------------------------------------------
# NCCL (NCCL_DEBUG=INFO/WARN, and NCCL's words inside torch errors)

# "NCCL version 2.18.5+cuda12.2"   "..., NCCL version 2.14.3"   "sglang is using nccl==2.21.5"
_NCCL_VERSION = re.compile(r"(?:NCCL version:?\s*|nccl==)(?P<v>\d+\.\d+\.\d+)"
                           r"(?:\+cuda(?P<cuda>[\d.]+))?")
# "NCCL_SOCKET_IFNAME set by environment to lo"
_ENV_SET = re.compile(r"(?P<var>[A-Z][A-Z0-9_]+) set by environment to (?P<value>\S*?)\.?\s*$")
# "NET/IB : No device found."   "NET/IB : No IB device found"
_IB_NONE = re.compile(r"NET/IB\s*:\s*No (?:IB )?devices? found", re.IGNORECASE)
# "Using network Socket"   "Using network IB"   "Using network AWS Libfabric"
_USING_NET = re.compile(r"Using network (?P<net>\w+)")
# "NET/Socket : Using [0]eth0:10.0.0.3<0> [1]eth1:10.1.0.3<0>"   "NET/IB : Using [0]mlx5_0:1/RoCE"
_NET_USING = re.compile(r"NET/(?P<net>Socket|IB)\s*:\s*Using (?P<rest>.*)")
# one "[0]eth0:10.0.0.3<0>" item of the list above (IPv6 addresses hold colons too)
_IFACE_ITEM = re.compile(r"\[\d+\](?P<iface>[^:\s\[]+):(?P<addr>[^<\s]+)<\d+>")
# "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"  (a channel that crosses nodes)
_VIA_NET = re.compile(r"via NET/(?P<net>[A-Za-z]+)")
# "Bootstrap : Using eth0:10.0.0.3<0>"
_BOOTSTRAP = re.compile(r"Bootstrap\s*:\s*Using (?:\[\d+\])?"
                        r"(?P<iface>[^:\s]+):(?P<addr>[^<\s]+)<\d+>")
# "Bootstrap : no socket interface found"  "NET/Socket : No interface found in the same subnet ..."
# "No usable listening interface found"   "Unable to find address for interface eth9"
_NO_IFACE = re.compile(
    r"no (?:socket |usable |ipv4 |ipv6 |usable listening )?interfaces? (?:found|available)"
    r"|unable to find (?:address for|interface)|could not find (?:any )?interface", re.IGNORECASE)
# "Socket creation failed : Address family not supported by protocol"
# "ncclSocketInit: connecting to address  with family 1 is neither AF_INET(2) nor AF_INET6(10)"
_SOCK_FAMILY = re.compile(r"Socket creation failed|Address family not supported|neither AF_INET")
# "socketPollConnect: Connect to 10.0.0.4<56849> returned 113(No route to host) errno 115(...)"
# "Connect to 10.1.1.1<43215> failed : No route to host"
_CONNECT = re.compile(
    r"[Cc]onnect(?:ing)? to (?P<addr>[\w.:\[\]%-]+?)<(?P<port>\d+)>"
    r"(?:.*?returned (?P<errno>\d+)\((?P<r1>[^)]*)\)|.*?failed\s*:\s*(?P<r2>[^,;]+))")
# "Call to connect returned Connection refused, retrying"
# "socketPollConnect: connect returned Connection refused, exceeded error retry count (35)"
_CONNECT_CALL = re.compile(r"connect returned (?P<r>[A-Za-z ]+?)(?:,|$)")
# "transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'"  "Cuda failure 2 'out of
# memory'"
_CUDA_FAIL = re.compile(r"Cuda failure (?:\d+ )?'(?P<err>[^']*)'")
# "transport/nvls.cc:165" - the NCCL source file that reported it
_SRC = re.compile(r"(?P<src>[\w/.-]+\.(?:cc|cu|h|c)):(?P<line>\d+)")
# "ncclCommInitRank comm 0x55eb22a04a50 rank 0 nranks 2 cudaDev 0 ..."
# "comm 0x7f rank 3 nRanks 8 nNodes 2 localRanks 4 localRank 3 MNNVL 0"
_INIT = re.compile(r"\brank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)(?: nNodes (?P<nnodes>\d+))?")
# "NET/IB : Got completion from peer 10.0.0.2<39421> with status=12 opcode=0 len=0 vendor err 129"
_IB_COMPLETION = re.compile(r"Got completion from peer (?P<peer>\S+?)(?:<\d+>)? "
                            r"with (?:error |status=?)(?P<status>\d+)")
# "NCCL WARN NET/Socket : peer 10.0.0.2<33421> message truncated : receiving 1048576 bytes instead
# of 65536"
_TRUNCATED = re.compile(r"message truncated\s*:\s*receiving (?P<got>\d+) bytes "
                        r"instead of (?P<want>\d+)")
# "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"
_DUP_GPU = re.compile(r"Duplicate GPU detected\s*:\s*rank (?P<a>\d+) and rank (?P<b>\d+) "
                      r"both on CUDA device (?P<dev>\w+)")
# "cudaDriverVersion 12080"
_CUDA_DRIVER = re.compile(r"cudaDriverVersion (?P<v>\d+)")
# c10d's rendering of NCCL's result codes: "..., unhandled system error (run with NCCL_DEBUG=INFO
# ...)"
_NCCL_CODES = (("unhandled system error", "system"), ("ncclSystemError", "system"),
               ("unhandled cuda error", "cuda"), ("ncclUnhandledCudaError", "cuda"),
               ("internal error", "internal"), ("ncclInternalError", "internal"),
               ("remote process exited", "remote"), ("ncclRemoteError", "remote"),
               ("invalid usage", "invalid_usage"), ("ncclInvalidUsage", "invalid_usage"),
               ("ncclInvalidArgument", "invalid_argument"))
# "... misc/socket.cc:484 NCCL WARN socketStartConnect: ..." -> what follows the level
_LEVEL_WORD = re.compile(r"\bWARN\b|\bERROR\b")
# "NCCL WARN NET/IB : ibv_modify_qp failed with 110 Connection timed out" -> "modify_qp"
_IBV_CALL = re.compile(r"ibv_(?P<call>\w+)")
_REASON_ERRNO = {"no route to host": 113, "connection refused": 111, "connection timed out": 110,
                 "network is unreachable": 101, "connection reset by peer": 104,
                 "software caused connection abort": 103, "cannot assign requested address": 99}


def _nccl_level(body: str) -> str | None:
    for level in ("WARN", "INFO", "ERROR", "TRACE"):
        if f" {level} " in body or body.startswith(level + " ") or f"NCCL {level}" in body:
            return level
    return None


def nccl_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "NCCL" not in body and "nccl" not in body and line.pid is None:
        return
    level = _nccl_level(body)
    if "NCCL version" in body or "nccl==" in body:
        _nccl_version(ex, line)
    if level is None and "NCCL" not in body:
        return
    for check in _NCCL_CHECKS:
        check(ex, line, level)


def _nccl_version(ex: Extractor, line: _Line) -> None:
    m = _NCCL_VERSION.search(line.body)
    if m:
        ex.emit("version", line, component="nccl", version=m.group("v"), cuda=m.group("cuda"))


def _nccl_env(ex: Extractor, line: _Line, level: str | None) -> None:
    if "set by environment to" in line.body:
        m = _ENV_SET.search(line.body)
        if m:
            ex.emit("env", line, var=m.group("var"), value=m.group("value"), source="nccl")


def _nccl_net(ex: Extractor, line: _Line, level: str | None) -> None:
    body = line.body
    if "NET/IB" in body and _IB_NONE.search(body):
        ex.emit("nccl_ib_no_device", line)
    elif "libibverbs" in body and ("Failed" in body or "failed" in body):
        ex.emit("nccl_ib_no_device", line, reason="libibverbs")
    if "Using network" in body:
        m = _USING_NET.search(body)
        if m:
            ex.emit("nccl_net", line, transport=m.group("net"), ifaces=[])
    elif "Using [" in body and "NET/" in body:
        m = _NET_USING.search(body)
        if m:
            ifaces = [(i.group("iface"), i.group("addr"))
                      for i in _IFACE_ITEM.finditer(m.group("rest"))]
            ex.emit("nccl_net", line, transport=m.group("net"), ifaces=ifaces)
    if "via NET/" in body:
        _nccl_channel_net(ex, line)
    if "IB is not used" in body or "not using IB" in body:
        ex.emit("nccl_net", line, transport="Socket", ifaces=[], ib_unused=True)


def _nccl_channel_net(ex: Extractor, line: _Line) -> None:
    # a channel over NET/* links ranks on different nodes; once per process is enough
    key = ("via", line.host, line.pid, line.body.partition("via NET/")[2][:6])
    if key in ex.seen_channels:
        return
    ex.seen_channels.add(key)
    m = _VIA_NET.search(line.body)
    if m:
        ex.emit("nccl_channel_net", line, transport=m.group("net"))


def _nccl_bootstrap(ex: Extractor, line: _Line, level: str | None) -> None:
    body = line.body
    if "Bootstrap" in body and "Using" in body:
        m = _BOOTSTRAP.search(body)
        if m:
            ex.emit("nccl_bootstrap", line, iface=m.group("iface"), addr=m.group("addr"))
    if "nterface" in body and _NO_IFACE.search(body):
        ex.emit("nccl_no_interface", line, message=body.strip()[:300])
    if ("Socket" in body or "AF_INET" in body or "family" in body) and _SOCK_FAMILY.search(body):
        ex.emit("nccl_socket_family", line, message=body.strip()[:300])


def _nccl_connect(ex: Extractor, line: _Line, level: str | None) -> None:
    body = line.body
    if "onnect" not in body:
        return
    m = _CONNECT.search(body)
    if m:
        reason = (m.group("r1") or m.group("r2") or "").strip()
        errno = int(m.group("errno")) if m.group("errno") else _REASON_ERRNO.get(reason.lower())
        ex.emit("nccl_connect_failed", line, addr=m.group("addr").strip("[]"),
                port=int(m.group("port")), errno=errno, reason=reason)
        return
    m = _CONNECT_CALL.search(body)
    if m:
        reason = m.group("r").strip()
        ex.emit("nccl_connect_failed", line, addr=None, port=None,
                errno=_REASON_ERRNO.get(reason.lower()), reason=reason)


def _nccl_errors(ex: Extractor, line: _Line, level: str | None) -> None:
    body = line.body
    if "Cuda failure" in body:
        m = _CUDA_FAIL.search(body)
        src = _SRC.search(body)
        ex.emit("nccl_cuda_failure", line, error=m.group("err") if m else "",
                src=src.group("src") if src else None)
    if "rror" in body or "invalid" in body or "remote process" in body:
        for needle, code in _NCCL_CODES:
            if needle in body:
                ex.emit("nccl_error", line, code=code, message=body.strip()[:300])
                break


def _nccl_init(ex: Extractor, line: _Line, level: str | None) -> None:
    body = line.body
    if "anks " not in body:
        return
    m = _INIT.search(body)
    if m:
        rank, nranks = int(m.group("rank")), int(m.group("nranks"))
        _learn_pid(ex, line.host, line.pid, rank, nranks)
        nnodes = int(m.group("nnodes")) if m.group("nnodes") else None
        ex.emit("nccl_init", line, rank=rank, nranks=nranks, nnodes=nnodes)
        if nnodes:
            ex.emit("nnodes", line, n=nnodes)


def _nccl_misc(ex: Extractor, line: _Line, level: str | None) -> None:
    body = line.body
    if "cudaDriverVersion" in body:
        m = _CUDA_DRIVER.search(body)
        if m:
            v = int(m.group("v"))
            ex.emit("version", line, component="cuda_driver",
                    version=f"{v // 1000}.{v % 1000 // 10}")
    if "completion" in body and (m := _IB_COMPLETION.search(body)):
        ex.emit("nccl_ib_error", line, peer=m.group("peer"), status=int(m.group("status")),
                op="completion")
    if "ibv_" in body and "failed" in body and (m := _IBV_CALL.search(body)):
        ex.emit("nccl_ib_error", line, peer=None, status=None, op=m.group("call"),
                gid="GID" in body or "gid" in body)
    if "truncated" in body and (m := _TRUNCATED.search(body)):
        ex.emit("nccl_truncated", line, got=int(m.group("got")), want=int(m.group("want")))
    if "Duplicate GPU" in body and (m := _DUP_GPU.search(body)):
        ex.emit("nccl_duplicate_gpu", line, ranks=[int(m.group("a")), int(m.group("b"))],
                device=m.group("dev"))
    if "shared memory" in body or "/dev/shm" in body:
        if "rror" in body or "ailed" in body or "nable" in body:
            ex.emit("shm_error", line, message=body.strip()[:300])


def _nccl_warn(ex: Extractor, line: _Line, level: str | None) -> None:
    if level == "WARN" or level == "ERROR":
        message = _LEVEL_WORD.split(line.body, maxsplit=1)[-1]
        ex.emit("nccl_warn", line, message=message.strip()[:300])


_NCCL_CHECKS = (_nccl_env, _nccl_net, _nccl_bootstrap, _nccl_connect, _nccl_errors, _nccl_init,
                _nccl_misc, _nccl_warn)

# ---------------------------------------------------------------------------------------
# PyTorch c10d: watchdog, desync debug, DETAIL-mode fingerprints, monitoredBarrier

# "Work WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000,
# Timeout(ms)=600000)"
# old: "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000)"; the name varies: WorkNCCL, WorkGloo,
# WorkXCCL
_WORK = re.compile(r"Work[A-Z]*\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)")
# one "Key=value" of the above: "SeqNum=1", "Timeout(ms)=600000", "TensorShape=[8, 4]"
_KV = re.compile(r"(?P<k>\w+(?:\(ms\))?)=(?P<v>\[[^\]]*\]|[^,)\s]+)")
# "... ran for 600081 milliseconds before timing out."
_RAN_FOR = re.compile(r"ran for (?P<ms>\d+) milliseconds")
# "[PG ID 2 PG GUID 9 Rank 7]"  "[PG 0 (default_pg) Rank 1]"
_PG = re.compile(r"\[PG (?:ID )?(?P<pg>\d+)")
# "... detected by watchdog at work: 4486, last enqueued NCCL work: 4489, last completed NCCL work:
# 4485."
# "... at work sequence id: 1 PG status: last enqueued work: 547, last completed work: -1"
# "Timeout at NCCL work: 12, last enqueued NCCL work: 12, last completed NCCL work: 11."
_AT_WORK = re.compile(r"at (?:NCCL )?work(?: sequence id)?:?\s*(?P<v>-?\d+)")
_LAST_ENQ = re.compile(r"last enqueued (?:NCCL )?work:?\s*(?P<v>-?\d+)", re.IGNORECASE)
_LAST_DONE = re.compile(r"last completed (?:NCCL )?work:?\s*(?P<v>-?\d+)", re.IGNORECASE)
# desync debug: "ranks [3] are the lagging ranks that caused this timeout"
# "[1, 2] joined but didn't finish collective #5"   "[3] finished collective #5, but didn't join
# collective #6"
_LAGGING = re.compile(r"\[?(?P<ranks>\d+(?:\s*,\s*\d+)*)\]? (?:are|is) the lagging ranks?")
_JOINED = re.compile(r"\[?(?P<ranks>\d+(?:\s*,\s*\d+)*)\]? joined but didn'?t finish "
                     r"collective #(?P<seq>\d+)")
_NOT_JOINED = re.compile(r"\[?(?P<ranks>\d+(?:\s*,\s*\d+)*)\]? finished collective #(?P<seq>\d+), "
                         r"but didn'?t join")
# "Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=2373, OpType=_ALLGATHER_BASE,
# ..."
# old: "Rank 0 is running inconsistent collective: CollectiveFingerPrint(OpType=ALLREDUCE,
# TensorShape=[20, 10], ..."
_FP_SIDE = re.compile(r"Rank (?P<rank>\d+) is running (?:inconsistent )?collective: "
                      r"CollectiveFingerPrint\(")
# inside one fingerprint: "SequenceNumber=2373", "OpType=ALLREDUCE", "TensorShape=[256]",
# "TensorDtypes=BFloat16"
_FP_SEQ = re.compile(r"SequenceNumber=(?P<v>\d+)")
_FP_OP = re.compile(r"OpType=(?P<v>\w+)")
_FP_SHAPE = re.compile(r"TensorShape=(?P<v>\[(?:[^\[\]]|\[[^\]]*\])*\])")
_FP_DTYPE = re.compile(r"TensorDtypes=(?P<v>[\w\[\], ]+?)(?:, Tensor|\)|$)")
# "Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms"   "Rank 1 failed to pass monitoredBarrier
# in 30000 ms"
_MONITORED = re.compile(r"Ranks? (?P<ranks>\d+(?:\s*,\s*\d+)*) failed to pass monitoredBarrier "
                        r"in (?P<ms>\d+) ?ms")
# "`Trainer.fit` stopped: `max_epochs=10` reached."  "Training completed"  "Finished training"
_TRAIN_END = re.compile(
    r"fit` stopped|max_(?:epochs|steps)=\S+`? reached"
    r"|[Tt]raining (?:is )?(?:completed?|finished|done)\b|[Ff]inished training|[Tt]raining ended")


# torch's Flight Recorder analyzer (fr_trace): "Not all ranks joining collective, sequence number:
# 10"
# followed by "missing ranks: {3}"
_FR_MISSING = re.compile(r"missing ranks:?\s*[\[{](?P<ranks>[\d, ]+)[\]}]")
# ranks torch names as the one to blame:
# "... retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0')
#  got error: Socket Timeout"
# "Rank 2 successfully reached monitoredBarrier, but received errors while waiting for send/recv
#  from rank 0. Please check rank 0 logs for faulty rank."
_BLAMED = re.compile(r"ncclUniqueId from \[(?P<uid>\d+)\]"
                     r"|check rank (?P<faulty>\d+) logs for faulty")
# What a rank says it is doing, for "legitimately busy": "Saving checkpoint to /ckpt/step_5000"
_ACTIVITY = re.compile(r"\b(?P<verb>[Ss]aving|[Ww]riting|[Uu]ploading|[Dd]ownloading"
                       r"|[Pp]reprocessing|[Pp]reparing|[Tt]okeniz(?:ing|e)|[Cc]aching|[Bb]uilding"
                       r"|[Cc]ompiling|[Ee]valuating|[Vv]alidating|[Gg]enerating|[Cc]onverting"
                       r"|[Ee]xtracting|[Ii]ndexing|[Cc]onsolidating|[Gg]athering)\b")


def _ranks_list(text: str) -> list[int]:
    return [int(r) for r in re.findall(r"\d+", text)]


def c10d_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "Watchdog caught" in body or "timed out in blocking wait" in body or (
            "WorkNCCL(" in body and "timed out" in body) or "operation timeout: Work" in body:
        _watchdog(ex, line)
    if "ast enqueued" in body or "ast completed" in body:
        _watchdog_status(ex, line)
    if "lagging" in body or "didn't finish collective" in body or "but didn't join" in body:
        _desync(ex, line)
    if "mismatch between collectives" in body:  # the continuation lines are read with their header
        _fingerprint(ex, line)
    if "monitoredBarrier" in body and (m := _MONITORED.search(body)):
        ex.emit("monitored_barrier_failed", line, ranks=_ranks_list(m.group("ranks")),
                timeout_ms=int(m.group("ms")))
    if ("stopped" in body or "raining" in body) and _TRAIN_END.search(body):
        ex.emit("training_end", line)
    if "missing ranks" in body and (m := _FR_MISSING.search(body)):
        ex.emit("fr_missing_ranks", line, ranks=_ranks_list(m.group("ranks")))
    if ("ncclUniqueId" in body or "faulty rank" in body) and (m := _BLAMED.search(body)):
        ex.emit("blamed_rank", line, ranks=[int(m.group("uid") or m.group("faulty"))])
    if "ing" in body and line.pid is None and "Watchdog" not in body:
        m = _ACTIVITY.search(body, 0, 200)
        if m:
            ex.emit("activity", line, verb=m.group("verb").lower())


def _watchdog(ex: Extractor, line: _Line) -> None:
    text = line.body
    if "Work" not in text.split("Watchdog caught", 1)[-1]:
        text = text + " " + ex.next_bodies(line, 2)  # torch (or a paste) wrapped the message
    work = _WORK.search(text)
    args = {kv.group("k"): kv.group("v") for kv in _KV.finditer(work.group("args"))} if work else {}
    ran = _RAN_FOR.search(text)
    pg = _PG.search(line.body)
    ex.emit("watchdog_timeout", line, seq=_int(args.get("SeqNum")), op=args.get("OpType"),
            numel_in=_int(args.get("NumelIn")), numel_out=_int(args.get("NumelOut")),
            timeout_ms=_int(args.get("Timeout(ms)")), ran_ms=int(ran.group("ms")) if ran else None,
            pg=int(pg.group("pg")) if pg else None, blocking="blocking wait" in text,
            backend="gloo" if "WorkGloo" in text else "nccl")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _watchdog_status(ex: Extractor, line: _Line) -> None:
    body = line.body
    at, enq, done = _AT_WORK.search(body), _LAST_ENQ.search(body), _LAST_DONE.search(body)
    if not (enq or done):
        return
    pg = _PG.search(body)
    ex.emit("watchdog_status", line, at=int(at.group("v")) if at else None,
            last_enqueued=int(enq.group("v")) if enq else None,
            last_completed=int(done.group("v")) if done else None,
            pg=int(pg.group("pg")) if pg else None)


def _desync(ex: Extractor, line: _Line) -> None:
    body = line.body
    for regex, state in ((_LAGGING, "never_joined"), (_JOINED, "joined_not_finished"),
                         (_NOT_JOINED, "finished_not_joined")):
        m = regex.search(body)
        if m:
            seq = m.groupdict().get("seq")
            ex.emit("desync_report", line, ranks=_ranks_list(m.group("ranks")), state=state,
                    seq=int(seq) if seq else None)
            return


def _fingerprint(ex: Extractor, line: _Line) -> None:
    text = line.body
    if "mismatch between collectives" in text and "but Rank" not in text:
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
        m = regex.search(segment)
        return m.group("v").strip() if m else None
    seq = one(_FP_SEQ)
    return {"rank": rank, "seq": int(seq) if seq else None, "op": one(_FP_OP),
            "shape": one(_FP_SHAPE), "dtype": one(_FP_DTYPE)}


# ---------------------------------------------------------------------------------------
# c10d store / rendezvous sockets

# "The client socket has timed out after 60000ms while trying to connect to (10.0.0.1, 29500)."
# old: "The client socket has timed out after 1800s while trying to connect to (gpu-1, 29500)."
_STORE_TIMEOUT = re.compile(
    r"client socket has timed out after (?P<t>\d+)\s*(?P<unit>ms|s)\b.*?connect to "
    r"\((?P<host>[^,()]+), (?P<port>\d+)\)")
# "The client socket has failed to connect to [::ffff:255.255.0.0]:29500 (errno: 110 - Connection
# timed out)."
# "The client socket has failed to connect to any network address of (node1, 29500)."
# "The client socket cannot be initialized to connect to [localhost]:29500 (errno: 97 - Address
# family ...)"
_STORE_FAIL = re.compile(
    r"client socket (?:has failed to connect|cannot be initialized to connect) to "
    r"(?:any network address of \((?P<h1>[^,()]+), (?P<p1>\d+)\)|\[(?P<h2>[^\]]+)\]:(?P<p2>\d+))"
    r"(?:.*?errno: (?P<errno>\d+) - (?P<reason>[^).]*))?")
# "The IPv4 network addresses of (badhost, 29500) cannot be retrieved (gai error: -2 - Name or
# service not known)."
_GAI = re.compile(r"IPv4 network addresses of \((?P<host>[^,()]+), (?P<port>\d+)\) "
                  r"cannot be retrieved"
                  r"(?: \(gai error: (?P<code>-?\d+) - (?P<reason>[^)]*))?")
# "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)."
# "The server socket has failed to listen on any local network address. ... name: EADDRINUSE"
_BIND = re.compile(r"failed to bind to (?:\[[^\]]*\]|[\w.:]+?):(?P<port>\d+)"
                   r"|EADDRINUSE|Address already in use")
# "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients
# joined."
_WAIT_CLIENTS = re.compile(r"waiting for clients\. (?P<joined>\d+)/(?P<total>\d+) clients joined")
# "Timed out initializing process group in store based barrier on rank: 0, for key:
# store_based_barrier_key:1
#  (world_size=2, worker_count=1, timeout=0:30:00)"
_STORE_BARRIER = re.compile(r"store based barrier.*?world_size=(?P<world>\d+), "
                            r"worker_count=(?P<joined>\d+)")
# "environment variable MASTER_ADDR expected, but not set"
_ENV_MISSING = re.compile(r"environment variable (?P<var>\w+) expected, but not set")
# "socket.gaierror: [Errno -2] Name or service not known"  "Temporary failure in name resolution"
_NAME_FAIL = re.compile(r"Name or service not known|Temporary failure in name resolution"
                        r"|nodename nor servname|getaddrinfo failed"
                        r"|No address associated with hostname")
# "RuntimeError: connect() timed out. Original timeout was 1800000 ms."
_CONNECT_TIMEOUT_OLD = re.compile(r"connect\(\) timed out\. Original timeout was (?P<ms>\d+) ms")


def store_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "socket" in body or "Socket" in body:
        _store_socket(ex, line)
    if "network addresses of" in body and (m := _GAI.search(body)):
        ex.emit("name_resolution_failed", line, host=m.group("host"), port=int(m.group("port")),
                reason=m.group("reason"))
    elif ("ame" in body or "getaddrinfo" in body or "resolution" in body) and "IPv6" not in body \
            and _NAME_FAIL.search(body):  # hosts without IPv6 warn about it harmlessly
        ex.emit("name_resolution_failed", line, host=None, port=None, reason=body.strip()[:200])
    if ("bind" in body or "ADDRINUSE" in body
        or "already in use" in body) and (m := _BIND.search(body)):
        ex.emit("store_bind_failed", line, port=_int(m.group("port")))
    if "clients joined" in body and (m := _WAIT_CLIENTS.search(body)):
        ex.emit("store_wait_clients", line, joined=int(m.group("joined")),
                total=int(m.group("total")))
    if "store based barrier" in body and (m := _STORE_BARRIER.search(body)):
        ex.emit("store_wait_clients", line, joined=int(m.group("joined")),
                total=int(m.group("world")))
        ex.emit("world_size", line, n=int(m.group("world")), source="store_barrier")
    if "expected, but not set" in body and (m := _ENV_MISSING.search(body)):
        ex.emit("env_missing", line, var=m.group("var"))
    if "connect() timed out" in body and (m := _CONNECT_TIMEOUT_OLD.search(body)):
        ex.emit("store_connect_timeout", line, host=None, port=None, timeout_ms=int(m.group("ms")))
    if "Socket Timeout" in body or "wait timeout after" in body:
        ex.emit("store_wait_timeout", line, message=body.strip()[:300])


def _store_socket(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "has timed out after" in body and (m := _STORE_TIMEOUT.search(body)):
        scale = 1 if m.group("unit") == "ms" else 1000
        ex.emit("store_connect_timeout", line, host=m.group("host").strip(),
                port=int(m.group("port")),
                timeout_ms=int(m.group("t")) * scale)
    elif "connect to" in body and (m := _STORE_FAIL.search(body)):
        host = (m.group("h1") or m.group("h2") or "").strip()
        ex.emit("store_connect_failed", line, host=host, port=int(m.group("p1") or m.group("p2")),
                errno=_int(m.group("errno")), reason=(m.group("reason") or "").strip())
    if "hostname of the client socket cannot be retrieved" in body:
        ex.emit("hostname_unresolvable", line)


# ---------------------------------------------------------------------------------------
# Gloo

# "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:5432"
# "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:45767: Connection
# refused"
_GLOO_PEER = re.compile(r"\[(?P<addr>[\d.:a-fA-F]+)\]:(?P<port>\d+)")
# "[enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to
# find address for: eth9"
_GLOO_IFACE = re.compile(r"Unable to find address for:?\s*(?P<iface>[\w.:-]+)")
# "[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3"
_GLOO_PEERS = re.compile(r"\[Gloo\] Rank (?P<rank>\d+) is connected to (?P<peers>\d+) peer ranks")
# "op.preamble.length <= op.nbytes. 8 vs 4"
_GLOO_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\.? (?P<a>\d+) vs (?P<b>\d+)")
_GLOO_KINDS = (("connectFullMesh", "connect_full_mesh"), ("closed by peer", "closed_by_peer"),
               ("reset by peer", "reset_by_peer"), ("Connection refused", "refused"),
               ("Timed out waiting", "timeout"), ("Unable to find address", "no_iface"),
               ("op.preamble.length", "size_mismatch"), ("Connection timed out", "connect_timeout"))


def gloo_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "[Gloo]" in body and (m := _GLOO_PEERS.search(body)):
        ex.emit("world_size", line, rank=int(m.group("rank")), n=int(m.group("peers")) + 1,
                source="gloo")
    named = "gloo" in body or "Gloo" in body
    if not named and ("by peer" not in body or line.pid is not None or "NCCL" in body):
        return  # NCCL's own "reset by peer" is parsed with NCCL's lines
    kind = next((k for needle, k in _GLOO_KINDS if needle in body), "other")
    if kind == "other" and "gloo/transport" not in body and "Gloo" not in body:
        return
    peer = _GLOO_PEER.search(body)
    iface = _GLOO_IFACE.search(body)
    size = _GLOO_SIZE.search(body)
    ex.emit("gloo_error", line, what=kind, named=named, peer=peer.group("addr") if peer else None,
            port=int(peer.group("port")) if peer else None,
            iface=iface.group("iface") if iface else None,
            sizes=[int(size.group("a")), int(size.group("b"))] if size else None)


# ---------------------------------------------------------------------------------------
# torchelastic (torchrun) failure summaries and agent lines

# "  rank      : 1 (local_rank: 1)"   "  exitcode  : -9 (pid: 11642)"   "  host      : gpu-12"
_ELASTIC_KEY = re.compile(r"^\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:"
                          r"\s*(?P<value>.*?)\s*$")
_ELASTIC_RANK = re.compile(r"(?P<rank>-?\d+)(?: \(local_rank: (?P<local>-?\d+)\))?")
_ELASTIC_EXIT = re.compile(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
# "2023-11-05_06:21:10": the time format of these blocks, which tells an entry's start
_ELASTIC_TIME = re.compile(r"^\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d$")
# "  traceback : Signal 9 (SIGKILL) received by PID 1234"
_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)")
# "failed (exitcode: -9) local_rank: 0 (pid: 1234) of binary: /usr/bin/python3"
_AGENT_FAIL = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) "
                         r"\(pid: (?P<pid>\d+)\)")
# "Sending process 1235 closing signal SIGTERM"
_CLOSING = re.compile(r"Sending process (?P<pid>\d+) closing signal (?P<sig>SIG\w+)")
_ELASTIC_KEYS = ("time", "host", "rank", "exit", "erro", "trac")


def elastic_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    stripped = body.strip()
    if stripped.startswith("Root Cause"):
        _elastic_flush(ex)
        ex.elastic_section = "root"
    elif stripped.startswith("Failures:"):
        _elastic_flush(ex)
        ex.elastic_section = "failures"
    elif stripped.startswith("==="):
        _elastic_flush(ex)
        ex.elastic_section = None
    elif stripped.startswith("---") or (stripped[:1] == "[" and stripped[-2:] == "]:"
                                        and stripped[1:-2].isdigit()):
        _elastic_flush(ex)
    elif stripped[:4] in _ELASTIC_KEYS:
        _elastic_key(ex, line)
    if "exitcode:" in body and (m := _AGENT_FAIL.search(body)):
        ex.emit("elastic_worker_failed", line, exitcode=int(m.group("code")),
                local_rank=int(m.group("local")), pid=int(m.group("pid")))
    if "closing signal" in body and (m := _CLOSING.search(body)):
        ex.emit("elastic_closing", line, pid=int(m.group("pid")), signal=m.group("sig"))


def _elastic_key(ex: Extractor, line: _Line) -> None:
    m = _ELASTIC_KEY.match(line.body)
    if not m:
        return
    key, value = m.group("key"), m.group("value")
    if ex.elastic is None:
        if not (key == "time" and _ELASTIC_TIME.match(value)) and ex.elastic_section is None:
            return  # "rank : 3" outside a torchrun summary is someone else's format
        ex.elastic = {"section": ex.elastic_section or "failures", "start": line}
    elif key == "time" and "time" in ex.elastic:
        _elastic_flush(ex)  # a pasted excerpt lost the "[N]:" header between two entries
        return _elastic_key(ex, line)
    ex.elastic[key] = value
    if key == "rank":
        ex.elastic["rank_line"] = line


def _elastic_flush(ex: Extractor) -> None:
    entry, ex.elastic = ex.elastic, None
    if not entry or "rank" not in entry:
        return
    rank_m = _ELASTIC_RANK.match(entry["rank"])
    exit_m = _ELASTIC_EXIT.match(entry.get("exitcode", ""))
    sig = _SIGNAL.search(entry.get("traceback", ""))
    if not rank_m:
        return
    rank = int(rank_m.group("rank"))
    pid = int(exit_m.group("pid")) if exit_m and exit_m.group("pid") else None
    host = entry.get("host")
    if pid is not None:
        _learn_pid(ex, host, pid, rank, 1 << 30)
    at = entry.get("rank_line", entry["start"])
    sig_out = ex.emit("elastic_failure", at, rank=rank, local_rank=_int(rank_m.group("local")),
                      exitcode=int(exit_m.group("code")) if exit_m else None, pid=pid,
                      signal=sig.group("name") if sig else None, root=entry["section"] == "root",
                      failure_time=parse_time(entry.get("time", "").replace("_", " ")))
    ex.signals[-1] = replace(sig_out, host=host or sig_out.host,
                             time=sig_out.fields["failure_time"] or sig_out.time)


# ---------------------------------------------------------------------------------------
# Python tracebacks and exceptions

# '  File "/x/torch/distributed/distributed_c10d.py", line 1707, in all_reduce'
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')
# "RuntimeError: CUDA out of memory."  "torch.distributed.DistBackendError: ..."  "ValueError"
_EXC = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*"
                  r"(?:Error|Exception|Interrupt|Exit|Failure|Timeout))(?::\s?(?P<msg>.*))?$")
# a one-element tensor in printed locals: "tensor([1], dtype=torch.int8)"
_TINY_TENSOR = re.compile(r"tensor\(\[\s*-?[\d.]+\s*\]")
COLLECTIVE_FUNCS = frozenset({
    "all_reduce", "allreduce", "broadcast", "all_gather", "_all_gather_base",
    "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "barrier", "monitored_barrier", "all_to_all", "all_to_all_single", "broadcast_object_list",
    "all_gather_object", "gather_object", "scatter_object_list", "gather", "scatter", "reduce",
    "send", "recv", "isend", "irecv", "new_group", "init_process_group", "_store_based_barrier",
    "broadcast_multigpu"})


def python_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    key = (line.rank, line.local_rank, line.host)
    if "Traceback (most recent call last)" in body:
        ex.tracebacks[key] = _Traceback(line.n)
        return
    if 'File "' in body and (m := _FRAME.match(body)):
        tb = _open_traceback(ex, key, line)  # a pasted excerpt often starts mid-traceback
        if len(tb.frames) < 200:
            tb.frames.append(m.group("func"))
        return
    if "tensor([" in body and _TINY_TENSOR.search(body):
        _open_traceback(ex, key, line).tiny = True
    if "Error" in body or "Exception" in body or "Interrupt" in body or "Exit" in body \
            or "Timeout" in body:
        _exception(ex, line, key)


def _open_traceback(ex: Extractor, key: tuple, line: _Line) -> _Traceback:
    if key not in ex.tracebacks:
        ex.tracebacks[key] = _Traceback(line.n)
    return ex.tracebacks[key]


def _exception(ex: Extractor, line: _Line, key: tuple) -> None:
    m = _EXC.match(line.body.strip())
    if not m:
        return
    tb = ex.tracebacks.pop(key, None)
    qualname = m.group("type")
    frames = tb.frames[-15:] if tb else []
    ex.emit("exception", line, type=qualname.rsplit(".", 1)[-1], qualname=qualname,
            message=(m.group("msg") or "")[:600], frames=frames,
            in_collective=bool(COLLECTIVE_FUNCS.intersection(frames)),
            tiny_tensor=bool(tb and tb.tiny), traceback_line=tb.start if tb else None)


# ---------------------------------------------------------------------------------------
# Memory, NaN/Inf, progress, DDP, versions, Slurm, hardware, world size, env

# "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 79.15 GiB total
# capacity ...)"
# "RuntimeError: CUDA error: out of memory"   "HIP out of memory"
_GPU_OOM = re.compile(r"(?:CUDA|HIP|XPU|MPS|cuda)(?: error:)? out of memory"
                      r"(?:\. Tried to allocate (?P<tried>[\d.]+ ?[KMGT]i?B))?"
                      r"(?:[^;]*?GPU (?P<gpu>\d+))?")
# "DefaultCPUAllocator: can't allocate memory: you tried to allocate 123456 bytes."
# "Out of memory: Killed process 1234 (python)"  "Detected 1 oom-kill event(s) in StepId=12.0"
_HOST_OOM = re.compile(r"DefaultCPUAllocator: can't allocate memory"
                       r"|Out of memory: Kill(?:ed)? process|oom-kill event|oom_kill"
                       r"|invoked oom-killer|Cannot allocate memory"
                       r"|std::bad_alloc|^MemoryError\b|is killed by signal: Killed")
_GPU_OOM_WORDS = ("OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation")


def memory_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "shared memory" in body and ("insufficient" in body or "No space left" in body):
        ex.emit("shm_error", line, message=body.strip()[:300])  # DataLoader workers' /dev/shm
    if body.strip() == "Killed":  # the shell's word for a SIGKILL, most often the OOM killer
        ex.emit("oom", line, device="host", weak=True, tried=None, gpu=None)
        return
    if not ("emory" in body or "oom" in body or "Kill" in body or "alloc" in body or "ALLOC" in body
            or "OutOfMemory" in body):
        return
    m = _GPU_OOM.search(body)
    if m or any(word in body for word in _GPU_OOM_WORDS):
        ex.emit("oom", line, device="gpu", weak=False, tried=m.group("tried") if m else None,
                gpu=_int(m.group("gpu")) if m else None)
    elif _HOST_OOM.search(body.strip()):
        ex.emit("oom", line, device="host", weak=False, tried=None, gpu=None)


# "step 1200 | loss nan"  "loss=nan"  "'loss': nan"  "train/loss: inf"  "grad_norm: nan"
_NAN_METRIC = re.compile(
    r"(?P<metric>\b[\w/.]*(?:loss|grad[_ ]?norm|total[_ ]norm|ppl|perplexity))"
    r"['\"]?\s*(?:[:=]|is|of)?\s*['\"]?(?:tensor\()?(?P<value>[-+]?(?:nan|inf(?:inity)?))\b",
    re.IGNORECASE)
# "Loss is NaN"  "NaN loss detected"  "Found NaN in gradients"  "returned nan values in its 0th
# output"
_NAN_PHRASE = re.compile(
    r"\b(?:nan|non-finite|inf) (?:loss|gradients?|grads?|values?)\b"
    r"|(?:found|detected|encountered) (?:a )?(?:nan|inf)\b|\bnans? (?:detected|found|encountered)"
    r"|contains? (?:nan|inf)\b|returned nan values|\bis (?:nan|non-finite)\b"
    r"|minimum loss scale reached|loss scale already at minimum|nan or inf", re.IGNORECASE)
# "[... step=(?P<step>)]" a step number near the NaN
_STEP_NO = re.compile(r"\b(?:step|iter(?:ation)?|global_step)\b\s*[:=]?\s*(?P<n>\d+)",
                      re.IGNORECASE)


def nan_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if not ("nan" in body or "NaN" in body or "NAN" in body or "inf" in body or "Inf" in body
            or "finite" in body or "loss scale" in body):
        return
    low = body.lower()
    metric = any(w in low for w in ("loss", "norm", "ppl", "perplexity"))
    m = _NAN_METRIC.search(body) if metric else None
    if m or _NAN_PHRASE.search(body):
        step = _STEP_NO.search(body)
        ex.emit("nan_loss", line, metric=m.group("metric") if m else None,
                value=m.group("value").lower() if m else None,
                step=int(step.group("n")) if step else None)


# "Preparing test set...:  36%|███▌      | 24/67 [23:16<30:00, 41.87s/it]"
_TQDM = re.compile(r"(?P<desc>[^|\r]*?):?\s*(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)"
                   r"\s*\[(?P<elapsed>(?:\d+:)?\d+:\d+)")
# " iteration      100/  500000 | consumed samples: ..."  "Step 120/1000 loss=2.31"  "Epoch 1
# [120/500]"
_STEP_PROGRESS = re.compile(r"\b(?P<desc>iteration|iter|step|batch|global_step)\b"
                            r"\s*[:=]?\s*\[?\s*(?P<n>\d+)\s*/\s*(?P<total>\d+)", re.IGNORECASE)


def progress_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "%|" in body:
        # anchored after the last "|" before the bar: a lazy prefix searched from every
        # column would be quadratic in the line's length
        start = body.rfind("|", 0, body.find("%|")) + 1
        m = _TQDM.match(body, start)
        if m:
            ex.emit("progress", line, desc=m.group("desc").strip(" .:")[-80:], n=int(m.group("n")),
                    total=int(m.group("total")), elapsed_s=_clock(m.group("elapsed")), style="bar")
            return
    if "/" in body and ("ter" in body or "tep" in body or "atch" in body or "TER" in body
                        or "TEP" in body):
        m = _STEP_PROGRESS.search(body)
        if m:
            ex.emit("progress", line, desc=m.group("desc").lower(), n=int(m.group("n")),
                    total=int(m.group("total")), elapsed_s=None, style="step")


def _clock(text: str) -> int:
    seconds = 0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


# "Parameter indices which did not receive grad for rank 1: 12 13"
# "Parameters which did not receive grad for rank 0: head.weight, head.bias"
_UNUSED_FOR_RANK = re.compile(r"did not receive grad for rank (?P<rank>\d+):\s*(?P<params>.*)")


def ddp_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "finished reduction in the prior iteration" in body or "not used in producing" in body:
        ex.emit("ddp_unused_params", line, named_rank=None, params=None)
    elif "did not receive grad" in body and (m := _UNUSED_FOR_RANK.search(body)):
        ex.emit("ddp_unused_params", line, named_rank=int(m.group("rank")),
                params=m.group("params").strip()[:300])


# "PyTorch version: 2.1.0+cu121"  "torch==2.1.0"  "torch 2.1.0"  "torch.__version__ = 2.3.1"
_TORCH_VER = re.compile(r"\b(?:py)?torch(?:\.__version__)?(?: version)?\s*(?:==|:|=|\s)\s*"
                        r"v?(?P<v>\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)
# nvidia-smi: "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |"
_SMI_DRIVER = re.compile(r"Driver Version:\s*(?P<v>[\d.]+)")
# "CUDA driver version is insufficient for CUDA runtime version"  "no kernel image is available ..."
_CUDA_VERSION_ERR = ("driver version is insufficient", "no kernel image is available",
                     "compiled with a newer CUDA", "ersion mismatch", "ismatched NCCL version",
                     "does not match the version torch was compiled",
                     "mismatches the version that was used to compile",
                     "is not compatible with the current PyTorch", "undefined symbol: nccl",
                     "too old")


def version_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if ("orch" in body or "ORCH" in body) and (m := _TORCH_VER.search(body)):
        ex.emit("version", line, component="torch", version=m.group("v"))
    if "Driver Version" in body and (m := _SMI_DRIVER.search(body)):
        ex.emit("version", line, component="nvidia_driver", version=m.group("v"))
    if "ersion" in body or "kernel image" in body or "undefined symbol" in body \
            or "is not compatible" in body:
        for needle in _CUDA_VERSION_ERR:
            if needle in body:
                ex.emit("version_error", line, what=needle, message=body.strip()[:300])
                break


# "srun: error: node3: task 5: Exited with exit code 1"   "srun: error: node3: tasks 0-3: Killed"
_SRUN_TASK = re.compile(r"srun: error: (?P<host>[\w.-]+): tasks? (?P<tasks>[\d,-]+): "
                        r"(?P<status>.+)")
# "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2024-01-01T10:00:00 DUE TO TIME LIMIT ***"
_SLURM_CANCEL = re.compile(r"\*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<host>\S+) "
                           r"CANCELLED AT (?P<at>\S+)"
                           r"(?: DUE TO (?P<reason>[A-Z ]+?))?(?: \*\*\*|$)")
# "srun: error: Node failure on node07"
_NODE_FAIL = re.compile(r"[Nn]ode failure on (?P<host>[\w.-]+)")


def slurm_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if "srun:" not in body and "slurm" not in body and "CANCELLED" not in body \
            and "ode failure" not in body:
        return
    if (m := _SRUN_TASK.search(body)):
        ex.emit("slurm_task_exit", line, node=m.group("host"), tasks=m.group("tasks"),
                status=m.group("status").strip())
    elif (m := _SLURM_CANCEL.search(body)):
        reason = (m.group("reason") or "").strip()
        ex.emit("slurm_cancelled", line, node=m.group("host"), reason=reason)
    elif (m := _NODE_FAIL.search(body)):
        ex.emit("slurm_node_failure", line, node=m.group("host"))


# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
_XID = re.compile(r"\bXid\b[^:]*?(?:\(PCI:(?P<pci>[^)]+)\))?:\s*(?P<code>\d+)")
# "RuntimeError: CUDA error: an illegal memory access was encountered"
_CUDA_ERROR = re.compile(r"CUDA error: (?P<msg>[^\n]+?)"
                         r"(?:\s*$|\.?\s+(?:CUDA kernel|Compile with|For debugging))")
_HW_NEEDLES = (("uncorrectable ECC", "ecc"), ("ECC error", "ecc"),
               ("fallen off the bus", "fell_off_bus"), ("abric manager", "fabric_manager"),
               ("abricmanager", "fabric_manager"),
               ("system not yet initialized", "system_not_ready"),
               ("cudaErrorSystemNotReady", "system_not_ready"), ("NVLink", "nvlink_error"))
_DEVICE_MAPPING = ("only supported with GPUs", "invalid device ordinal",
                   "No CUDA GPUs are available")


def hardware_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if not ("Xid" in body or "ECC" in body or "bus" in body or "abric" in body or "ystem" in body
            or "NVLink" in body or "CUDA error" in body or "device ordinal" in body
            or "GPUs" in body):
        return
    if "Xid" in body and (m := _XID.search(body)):
        ex.emit("xid", line, code=int(m.group("code")), pci=m.group("pci"))
    for needle, what in _HW_NEEDLES:
        if needle in body and (what != "nvlink_error" or "rror" in body):
            ex.emit("hardware_error", line, what=what, message=body.strip()[:300])
            break
    if "CUDA error" in body and "out of memory" not in body:
        m = _CUDA_ERROR.search(body)
        message = m.group("msg") if m else body.split("CUDA error", 1)[1]
        ex.emit("cuda_error", line, message=message.strip(" :")[:200])
    if any(words in body for words in _DEVICE_MAPPING):
        ex.emit("device_mapping_error", line, message=body.strip()[:300])


# "world_size=4"  "WORLD_SIZE: 8"  "world size 16"
_WORLD = re.compile(r"\bworld[_ ]?size\b['\"]?\s*[:=]?\s*(?P<n>\d+)", re.IGNORECASE)
# Lightning: "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/3"
_MEMBER = re.compile(r"GLOBAL_RANK: (?P<rank>\d+), MEMBER: (?P<m>\d+)/(?P<n>\d+)")
# "--nnodes=2"  "nnodes: 2"  "NNODES=2"
_NNODES = re.compile(r"\bn_?nodes\b['\"]?\s*[:=]?\s*(?P<n>\d+)", re.IGNORECASE)
# "export NCCL_IB_DISABLE=0"  "NCCL_SOCKET_IFNAME=eth0"  "MASTER_ADDR=10.0.0.1"
_ENV_ASSIGN = re.compile(r"^(?:export\s+)?(?P<var>(?:NCCL|GLOO|TORCH|MASTER|CUDA|NVIDIA|UCX|FI)"
                         r"_[A-Z0-9_]+|WORLD_SIZE|RANK|LOCAL_RANK|NODE_RANK)"
                         r"\s*=\s*['\"]?(?P<value>[^'\"\s]*)")
# torchrun flags: "--master_addr=10.0.0.1"  "--master-port 29500"
_CLI_MASTER = re.compile(r"--master[_-](?P<what>addr|port)[= ](?P<value>[^\s'\"]+)")
# Megatron straggler detector: "MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0"
_MEGATRON_RTT = re.compile(r"MnRtt/Rnk: (?P<min_ms>[\d.]+)ms/(?P<min_rank>\d+) \| "
                           r"MxRtt/Rnk: (?P<max_ms>[\d.]+)ms/(?P<max_rank>\d+)")
# DeepSpeed comms logger: "rank=0 | comm op: reduce_scatter_base | time (ms): 9.46 | ... | busbw
# (Gbps): 1129.23"
_DS_COMM = re.compile(r"rank=(?P<rank>\d+) \| comm op: (?P<op>\w+) \| time \(ms\): (?P<ms>[\d.]+)"
                      r".*?busbw \(Gbps\): (?P<busbw>[\d.]+)")


def topology_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if ("orld" in body or "ORLD" in body) and (m := _WORLD.search(body)) \
            and 0 < int(m.group("n")) <= MAX_WORLD_SIZE:
        ex.emit("world_size", line, n=int(m.group("n")), source="text")
    if "MEMBER:" in body and (m := _MEMBER.search(body)):
        ex.emit("world_size", line, rank=int(m.group("rank")), n=int(m.group("n")),
                source="lightning")
    if ("nodes" in body or "NODES" in body) and (m := _NNODES.search(body)):
        ex.emit("nnodes", line, n=int(m.group("n")))
    if "=" in body and (m := _ENV_ASSIGN.match(body.strip())):
        ex.emit("env", line, var=m.group("var"), value=m.group("value"), source="shell")
    if "--master" in body:
        for m in _CLI_MASTER.finditer(body):
            ex.emit("env", line, var="MASTER_" + m.group("what").upper(), value=m.group("value"),
                    source="cli")
    if "MxRtt" in body and (m := _MEGATRON_RTT.search(body)):
        ex.emit("straggler_report", line, min_ms=float(m.group("min_ms")),
                min_rank=int(m.group("min_rank")),
                max_ms=float(m.group("max_ms")), max_rank=int(m.group("max_rank")))
    if "comm op:" in body and (m := _DS_COMM.search(body)):
        ex.emit("comm_timing", line, rank=int(m.group("rank")), op=m.group("op"),
                ms=float(m.group("ms")),
                busbw_gbps=float(m.group("busbw")))


_NCCL_ONLY = (nccl_family,)
FAMILIES = (nccl_family, c10d_family, store_family, gloo_family, elastic_family, python_family,
            memory_family, nan_family, progress_family, ddp_family, version_family, slurm_family,
            hardware_family, topology_family)


def extract(log) -> list[Signal]:
    """Every signal in one text log, in line order; never raises on any input."""
    ex = Extractor(str(log.path), log.lines)
    for n, raw in enumerate(log.lines, 1):
        try:
            ex.feed(n, raw if isinstance(raw, str) else str(raw))
        except Exception:  # noqa: BLE001 - a line that breaks a parser is skipped and counted
            ex.failures += 1
    try:
        signals = ex.finish()
    except Exception:  # noqa: BLE001 - the post-pass is a nicety; the raw signals stand
        ex.failures += 1
        signals = ex.signals
    if ex.failures:
        signals.append(Signal("extract_errors", ex.file, 0,
                              f"{ex.failures} lines could not be parsed",
                              fields={"count": ex.failures}))
    return signals
