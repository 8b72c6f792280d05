"""Line parsing for text logs: launcher prefixes and timestamps peeled, then every line
through the signature catalog (diag/analyze/catalog) in one pass, plus the parsing that
spans lines or keeps state: tracebacks, thread-stack dumps (stacktext.py), torchrun
failure blocks, pid to rank, and the heuristics that no one emitter prints (progress bars,
NaN wording, world-size mentions).

Linear in the number of lines. Each catalog entry and each family first checks a few
plain substrings, so the common line costs a handful of ``in`` tests before it is
dropped. A line that makes a parser raise is counted and skipped: a log from a dying job
is exactly the input this must survive.
"""

from __future__ import annotations

import calendar
import functools
import re
import time
from dataclasses import dataclass, field, replace

from diag.analyze import catalog
from diag.analyze.catalog import collective_frames, engine
from diag.analyze import stacktext
from diag.analyze.signals import Signal
from diag.format.schema import MAX_WORLD_SIZE

MAX_LINE = 8192  # longer lines are cut before parsing: a regex over 1 MB of junk is a stall
_CLOCK_EVERY = 64  # lines between looks at the clock (a line costs at most ~0.15 s)
_ANY_TIME_WINDOW = 72  # timestamps sit near the start of a line

# ---------------------------------------------------------------------------------------
# Prefixes: who printed the line, and when.

# "[rank3]:[E1218 ...]"   torch's own prefix: a global rank
# "[default0]:..."        torchrun --tee: role name + LOCAL rank
# "[1,3]<stdout>:..."     mpirun --tag-output: job, rank
# "3: ..."                srun --label: the task id
# "node-7: ..."           pdsh (DeepSpeed's multi-node launcher): the host
# "2026-01-15 06:21:53 | ..."  a logger's stamp and separator (the time is kept)
# "(WorkerDict pid=4711, ip=10.0.0.2) ..."  Ray's log monitor: actor or task name, the
#                         worker's pid, and its node's address when not the driver's;
#                         vLLM's workers print "(VllmWorker rank=2 pid=4711) " the same way
_LEAD = re.compile(
    r"\s*(?:\[(?P<tag>[A-Za-z_]+?)(?P<tagn>\d+)\]:"
    r"|\[\d+,(?P<mpi>\d+)\]<std(?:out|err)>:"
    r"|\((?:[^\s()=,]+ (?:\w+=\w+ )?)?pid=(?P<raypid>\d+)(?:, ip=(?P<rayip>[^\s()]+))?\) ?"
    r"|(?P<label>\d{1,5}): (?=\s*\S)"
    r"|(?P<stamp>\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\]? \| )"
    r"|(?P<host>[a-z][\w.-]*?\d[\w.-]*): (?=\S))")
_NOT_HOSTS = ("rank", "step", "epoch", "iter", "batch", "layer", "loss", "cuda", "gpu")
# "[Rank 0] Watchdog ..."  "[PG ID 2 PG GUID 9 Rank 7] ..."  "[PG 0 (default_pg) Rank 1] ..."
_RANK_BRACKET = re.compile(r"\[(?:PG [^\]]{0,80}?)?Rank (\d+)\]")
# "[rank=3] ..." "[RANK 3]" "rank: 3 |"
_RANK_LOOSE = re.compile(r"\[rank[=: ]?(\d+)\]", re.IGNORECASE)
# a script's own per-rank print, its rank first: "rank 4, fetch sample 12", "Rank 3: loss"
_RANK_LEAD = re.compile(r"rank[=: ]{0,2}(\d{1,6})(?:,|:|\s+-?\s)", re.IGNORECASE)
# a per-rank log's file name: "rank3.log"  "train_rank_03.out"  "log.rank-12"
_RANK_IN_PATH = re.compile(r"(?<![a-z])rank[_.-]?(\d{1,6})(?!\d)", re.IGNORECASE)
# "node5:240:240 [6] NCCL INFO ..."  host:pid:tid [cudaDev]
_NCCL_PREFIX = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]")
# "2023-11-05_06:21:10"  "[2026-03-18 11:13:09]"  "2024-05-01T10:00:00.123Z"  "... 10:00:00,123"
# or glog's "[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629]"  "W0729 03:35:32.842631 1400
# x.py:779]"
# a launcher's or logger's timestamp in front of NCCL's own prefix
_STAMP = re.compile(r"\[?\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d[.,\d]*Z?\]?\s*(?:\|\s*)?")
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
    proc: int | None = None  # the pid a launcher prefix names (Ray); ``pid`` is NCCL's
    quoted: str | None = None  # "nccl": the line quotes NCCL's last error (torch's carrier)


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
        elif m.group("raypid"):
            line.proc = int(m.group("raypid"))
            line.host = line.host or m.group("rayip")
        elif m.group("label"):
            if line.local_rank is None:
                line.local_rank = int(m.group("label"))
        elif m.group("stamp"):
            line.time, line.year = _parse_time(m.group("stamp"), 2000)
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
    if m is None and body[4:5] == "-" or body[5:6] == "-":
        # "[2026-03-18 11:13:09] host:pid:tid", "2026-03-18 11:13:09 | host:pid:tid"
        stamp = _STAMP.match(body)
        m = _NCCL_PREFIX.match(body, stamp.end()) if stamp else None
    if m:
        line.host, line.pid = line.host or m.group("host"), int(m.group("pid"))
        if m.start():
            line.time, line.year = _parse_time(body[:m.start()], year)
        return line  # NCCL's rank comes from its init lines, in the post-pass
    if line.time is None and ":" in body[:_ANY_TIME_WINDOW]:
        line.time, line.year = _parse_time(body, year)
    if line.rank is None and "Rank " in body:
        m = _RANK_BRACKET.search(body)
        line.rank = int(m.group(1)) if m else None
    if line.rank is None and "ank" in body[:80]:
        m = _RANK_LOOSE.search(body, 0, 80) or _RANK_LEAD.match(body)
        line.rank = int(m.group(1)) if m else None
    return line


# ---------------------------------------------------------------------------------------
# The extractor: state shared by the multi-line parsers, and the post-pass.


@dataclass
class _Traceback:
    start: int
    frames: list = field(default_factory=list)  # function names, outermost first
    stack: list = field(default_factory=list)  # {"file", "line", "func", "code"} per frame
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
    stacks: dict = field(default_factory=dict)  # open thread-stack dumps (stacktext.py)
    dumps: int = 0  # thread-stack dumps seen: one per process and moment
    elastic: dict | None = None
    elastic_section: str | None = None
    pid_rank: dict = field(default_factory=dict)  # (host, pid) -> (nranks, rank)
    once: set = field(default_factory=set)  # keys of the once-per-process signals emitted
    last_error_next: bool = False  # the previous line ended with torch's "Last error:"
    printers: dict = field(default_factory=dict)  # rank -> [lines it printed, its first line]

    def emit(self, kind: str, line: _Line, rank: int | None = None, **fields) -> Signal:
        if line.pid is not None or line.proc is not None:
            fields.setdefault("pid", line.pid if line.pid is not None else line.proc)
        if line.local_rank is not None:
            fields.setdefault("local_rank", line.local_rank)
        sig = Signal(kind, self.file, line.n, line.raw[:2000], line.rank if rank is None else rank,
                     line.host, line.time, fields)
        self.signals.append(sig)
        return sig

    def react(self, sig: Signal, line: _Line) -> None:
        """State a catalog signal teaches: an NCCL init line maps its pid to a rank."""
        if sig.kind == "nccl_init":
            _learn_pid(self, line.host, line.pid, sig.rank, sig.fields["nranks"])
            if sig.fields.get("nnodes"):
                self.emit("nnodes", line, n=sig.fields["nnodes"])

    def next_bodies(self, line: _Line, count: int) -> str:
        """The bodies of the next ``count`` lines, joined: for messages torch or a paste
        wrapped over several lines."""
        return " ".join(self.bodies_after(line, count))

    def bodies_after(self, line: _Line, count: int) -> list[str]:
        """The next ``count`` lines with their launcher prefixes peeled, stripped."""
        nxt = self.lines[line.n:line.n + count]
        return [parse_line(line.n + 1 + i, str(s)[:MAX_LINE]).body.strip()
                for i, s in enumerate(nxt)]

    def feed(self, n: int, raw: str) -> None:
        line = parse_line(n, raw, self.year)
        self.year = line.year or self.year
        if line.rank is not None and 0 <= line.rank < MAX_WORLD_SIZE:
            self.printers.setdefault(line.rank, [0, n])[0] += 1
        if self.last_error_next:
            line.quoted = "nccl"
        # torch prints NCCL's message on the line after "Last error:" (NCCLUtils.cpp)
        self.last_error_next = line.body.rstrip().endswith("Last error:")
        engine.scan(self, line, catalog.entries())
        # NCCL INFO chatter is most of a big job's log, and only NCCL's parsers can use it
        families = _NCCL_ONLY if engine.is_chatter(line) else FAMILIES
        for family in families:
            try:
                family(self, line)
            except Exception:  # noqa: BLE001 - one parser's bug must not hide the others' facts
                self.failures += 1

    def finish(self) -> list[Signal]:
        _elastic_flush(self)
        stacktext.flush(self)
        self.signals = _fill_ranks(self.signals, self.pid_rank, rank_of_path(self.file))
        if self.printers:  # who spoke at all: the silent rank is the odd one out
            first = min(n for _, n in self.printers.values())
            self.signals.append(Signal("rank_lines", self.file, first, "", fields={
                "ranks": {r: count for r, (count, _) in self.printers.items()}}))
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
# What stays code: state across lines, and heuristics no single emitter prints.


def nccl_ib_unused(ex: Extractor, line: _Line) -> None:
    # ddiag's own wording for "IB is off, sockets carry the traffic"; no NCCL version found
    # to print it, so it is not a catalog entry
    body = line.body
    if ("IB is not used" in body or "not using IB" in body) and "nccl" in engine.scopes(line):
        ex.emit("nccl_net", line, transport="Socket", ifaces=[], ib_unused=True)


# What a rank says it is doing, for "legitimately busy": "Saving checkpoint to /ckpt/step_5000"
_ACTIVITY = re.compile(r"\b(?P<verb>[Ss]aving|[Ww]riting|[Uu]ploading|[Dd]ownloading"
                       r"|[Pp]reprocessing|[Pp]reparing|[Tt]okeniz(?:ing|e)|[Cc]aching|[Bb]uilding"
                       r"|[Cc]ompiling|[Ee]valuating|[Vv]alidating|[Gg]enerating|[Cc]onverting"
                       r"|[Ee]xtracting|[Ii]ndexing|[Cc]onsolidating|[Gg]athering"
                       r"|[Vv]alidation|[Ee]valuation)\b")


def activity_family(ex: Extractor, line: _Line) -> None:
    """What a rank says it is busy with ("Saving checkpoint ..."), for "legitimately busy"."""
    body = line.body
    if ("ing" in body or "tion" in body) and line.pid is None and "Watchdog" not in body:
        m = _ACTIVITY.search(body, 0, 200)
        if m:
            ex.emit("activity", line, verb=m.group("verb").lower())


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------
# torchelastic (torchrun) failure summaries (its agent lines are catalog entries)

# "  rank      : 1 (local_rank: 1)"   "  exitcode  : -9 (pid: 11642)"   "  host      : gpu-12"
_ELASTIC_KEY = re.compile(r"^\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:"
                          r"\s*(?P<value>.*?)\s*$")
_ELASTIC_RANK = re.compile(r"(?P<rank>-?\d+)(?: \(local_rank: (?P<local>-?\d+)\))?")
_ELASTIC_EXIT = re.compile(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
# "2023-11-05_06:21:10": the time format of these blocks, which tells an entry's start
_ELASTIC_TIME = re.compile(r"^\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d$")
# "  traceback : Signal 9 (SIGKILL) received by PID 1234"
_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)")
_ELASTIC_KEYS = ("time", "host", "rank", "exit", "erro", "trac")


def elastic_family(ex: Extractor, line: _Line) -> None:
    stripped = line.body.strip()
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

# '  File "/x/torch/distributed/distributed_c10d.py", line 1707, in all_reduce' (searched:
# a paste may glue a frame to the end of the line before)
_FRAME = re.compile(r'File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')
_MAX_FRAMES = 15  # kept per exception, innermost; 200 read at most
# "RuntimeError: CUDA out of memory."  "torch.distributed.DistBackendError: ..."  "ValueError"
_EXC = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*"
                  r"(?:Error|Exception|Interrupt|Exit|Failure|Timeout))(?::\s?(?P<msg>.*))?$")
# a one-element tensor in printed locals: "tensor([1], dtype=torch.int8)"
_TINY_TENSOR = re.compile(r"tensor\(\[\s*-?[\d.]+\s*\]")


def python_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    key = (line.rank, line.local_rank, line.host, line.proc)
    if "Traceback (most recent call last)" in body:
        ex.tracebacks[key] = _Traceback(line.n)
        return
    if 'File "' in body and (m := _FRAME.search(body, body.find('File "'))):
        tb = _open_traceback(ex, key, line)  # a pasted excerpt often starts mid-traceback
        if len(tb.frames) < 200:
            tb.frames.append(m.group("func"))
            tb.stack.append({"file": m.group("file"), "line": int(m.group("line")),
                             "func": m.group("func"), "code": None})
        return
    if "tensor([" in body and _TINY_TENSOR.search(body):
        _open_traceback(ex, key, line).tiny = True
    if ("Error" in body or "Exception" in body or "Interrupt" in body or "Exit" in body
            or "Timeout" in body) and _exception(ex, line, key):
        return
    tb = ex.tracebacks.get(key)
    if tb is not None and tb.stack and tb.stack[-1]["code"] is None:
        _source_line(tb, body.strip())


def _source_line(tb: _Traceback, text: str) -> None:
    # the frame's source line, which rules read (a device index, a rank used as a device);
    # 3.11+ underlines it with carets on the next line
    if text and not text.startswith(("^", "~")):
        tb.stack[-1]["code"] = text[:200]


def _open_traceback(ex: Extractor, key: tuple, line: _Line) -> _Traceback:
    if key not in ex.tracebacks:
        ex.tracebacks[key] = _Traceback(line.n)
    return ex.tracebacks[key]


def _exception(ex: Extractor, line: _Line, key: tuple) -> bool:
    m = _EXC.match(line.body.strip())
    if not m:
        return False
    tb = ex.tracebacks.pop(key, None)
    qualname = m.group("type")
    frames = tb.frames[-_MAX_FRAMES:] if tb else []
    stack = tb.stack[-_MAX_FRAMES:] if tb else []
    ex.emit("exception", line, type=qualname.rsplit(".", 1)[-1], qualname=qualname,
            message=(m.group("msg") or "")[:600], frames=frames, stack=stack,
            in_collective=bool(collective_frames.in_stack(stack)),
            tiny_tensor=bool(tb and tb.tiny), traceback_line=tb.start if tb else None)
    return True


# ---------------------------------------------------------------------------------------
# NaN/Inf, progress, versions, hardware words, world size, env: heuristics

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


_HW_NEEDLES = (("uncorrectable ECC", "ecc"), ("ECC error", "ecc"),
               ("fallen off the bus", "fell_off_bus"), ("abric manager", "fabric_manager"),
               ("abricmanager", "fabric_manager"),
               ("system not yet initialized", "system_not_ready"),
               ("cudaErrorSystemNotReady", "system_not_ready"), ("NVLink", "nvlink_error"))


def hardware_family(ex: Extractor, line: _Line) -> None:
    """Hardware words from several printers (CUDA's error strings, NVRM, NCCL's NVLS
    hints): the first that the line holds."""
    body = line.body
    if "NVLS) Multicast" in body:
        return  # NCCL's NVLS bind failure names the fabric manager: a catalog entry's (config)
    for needle, what in _HW_NEEDLES:
        if needle in body and (what != "nvlink_error" or "rror" in body):
            ex.emit("hardware_error", line, what=what, message=body.strip()[:300])
            break


# "world_size=4"  "WORLD_SIZE: 8"  "world size 16"
_WORLD = re.compile(r"\bworld[_ ]?size\b['\"]?\s*[:=]?\s*(?P<n>\d+)", re.IGNORECASE)
# "--nnodes=2"  "nnodes: 2"  "NNODES=2"
_NNODES = re.compile(r"\bn_?nodes\b['\"]?\s*[:=]?\s*(?P<n>\d+)", re.IGNORECASE)
# "export NCCL_IB_DISABLE=0"  "NCCL_SOCKET_IFNAME=eth0"  "MASTER_ADDR=10.0.0.1"
_ENV_ASSIGN = re.compile(r"^(?:export\s+)?(?P<var>(?:NCCL|GLOO|TORCH|MASTER|CUDA|NVIDIA|UCX|FI)"
                         r"_[A-Z0-9_]+|WORLD_SIZE|RANK|LOCAL_RANK|NODE_RANK)"
                         r"\s*=\s*['\"]?(?P<value>[^'\"\s]*)")
# torchrun flags: "--master_addr=10.0.0.1"  "--master-port 29500"
_CLI_MASTER = re.compile(r"--master[_-](?P<what>addr|port)[= ](?P<value>[^\s'\"]+)")


# a shell's trace or prompt before a command: "+ export X=1" (bash -x), "$ X=1 torchrun"
_PROMPT = re.compile(r"^(?:\++|\$|#|>)\s+")
# on a command line: "mpirun -x NCCL_IB_HCA=mlx5_0", "docker run -e NCCL_DEBUG=INFO",
# "srun --export=ALL,NCCL_SOCKET_IFNAME=eth0", "env NCCL_P2P_DISABLE=1 python ..."
_ENV_ON_COMMAND = re.compile(r"(?:^|[\s,=])(?P<var>(?:NCCL|GLOO|TORCH|MASTER|CUDA|NVIDIA|UCX|FI)"
                             r"_[A-Z0-9_]+)=['\"]?(?P<value>[^'\"\s,]*)")
_COMMANDS = ("mpirun", "srun", "torchrun", "docker", "python", "deepspeed", "accelerate",
             "env ", " -x ", "--env", "--export")


def _env_family(ex: Extractor, line: _Line, body: str) -> None:
    text = _PROMPT.sub("", body.strip(), count=1)
    m = _ENV_ASSIGN.match(text)
    if m and not any(c in text for c in _COMMANDS):
        ex.emit("env", line, var=m.group("var"), value=m.group("value"), source="shell")
        return
    if any(c in text for c in _COMMANDS):
        for m in _ENV_ON_COMMAND.finditer(text[:2000]):
            ex.emit("env", line, var=m.group("var"), value=m.group("value"), source="command")


def topology_family(ex: Extractor, line: _Line) -> None:
    body = line.body
    if ("orld" in body or "ORLD" in body) and (m := _WORLD.search(body)) \
            and 0 < int(m.group("n")) <= MAX_WORLD_SIZE:
        ex.emit("world_size", line, n=int(m.group("n")), source="text")
    if ("nodes" in body or "NODES" in body) and (m := _NNODES.search(body)):
        ex.emit("nnodes", line, n=int(m.group("n")))
    if "=" in body:
        _env_family(ex, line, body)
    if "--master" in body:
        for m in _CLI_MASTER.finditer(body):
            ex.emit("env", line, var="MASTER_" + m.group("what").upper(), value=m.group("value"),
                    source="cli")


_NCCL_ONLY = (nccl_ib_unused,)
FAMILIES = (nccl_ib_unused, activity_family, elastic_family, python_family,
            stacktext.stack_family, nan_family, progress_family, version_family,
            hardware_family, topology_family)


def extract(log, seconds: float | None = None) -> list[Signal]:
    """Every signal in one text log, in line order; never raises on any input. Past
    ``seconds`` of parsing it stops, and ``log.stopped_at`` holds the first line not read:
    each line costs bounded time, but a file of crafted lines could add up to hours."""
    ex = Extractor(str(log.path), log.lines)
    deadline = time.monotonic() + seconds if seconds is not None else None
    for n, raw in enumerate(log.lines, 1):
        if deadline is not None and n % _CLOCK_EVERY == 0 and time.monotonic() > deadline:
            log.stopped_at = n
            break
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

