"""Thread stacks pasted as text: ``py-spy dump`` and Python's faulthandler.

A dump shows where every thread of one process is *now*, not an exception: the frames a
hung rank sits in. Two printers:

- py-spy (benfred/py-spy src/dump.rs ``write_traces``/``write_trace``): ``Process <pid>:
  <cmdline>``, ``Python v<version> (<exe>)``, then per thread ``Thread <tid> (idle|active|
  active+gil): "<name>"`` and frames ``    <func> (<file>:<line>)``, innermost first;
  ``--locals`` adds deeper-indented ``Arguments:``/``Locals:`` lines.
- faulthandler (CPython Python/traceback.c ``_Py_DumpTracebackThreads``, ``dump_frame``):
  ``Thread 0x<hex> (most recent call first):`` or ``Current thread 0x<hex> ...``, one
  blank line between threads, ``Stack (most recent call first):`` for one thread, and
  frames ``  File "<file>", line <n> in <func>`` (no comma before ``in``, unlike a
  traceback), innermost first; ``  <no Python frame>`` and ``  ...`` past 100 frames.

Each thread becomes one ``thread_stack`` signal at its header line, with its frames
innermost first (each frame's own line number in the log, ``at``, for evidence) and a
``dump`` number: the threads of one dump belong to one process. The Extractor
(textlog.py) calls ``stack_family`` for every line and ``flush`` at the end. Cheap: a line
is looked at only when a dump is open or it holds ``hread ``, ``Process ``, ``Stack (`` or
``File "`` without a traceback's ``, in``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# "Process 4101: /usr/bin/python3 -u train.py --config a.yaml"
_PYSPY_PROCESS = re.compile(r"^Process (?P<pid>\d+): (?P<cmd>.*)$")
# 'Thread 4101 (idle): "MainThread"'  'Thread 0x7000A1B2C (active+gil): "pt_autograd_0"'
_PYSPY_THREAD = re.compile(r'^Thread (?P<tid>0[xX][0-9A-Fa-f]+|\d+)'
                           r'(?: \((?P<status>idle|active\+gil|active|gil)\))?'
                           r'(?:: "(?P<name>[^"]*)")?\s*$')
# "    all_reduce (torch/distributed/distributed_c10d.py:2050)"  "    ncclAllReduce (libnccl.so.2)"
_PYSPY_FRAME = re.compile(r"^ {4}(?P<func>\S[^()]*?(?:\([^()]*\))?) "
                          r"\((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")
# "Thread 0x00007f57caf71740 (most recent call first):"  "Current thread 0x... [name] (...):"
_FH_THREAD = re.compile(r"^(?P<current>Current thread|Thread) 0x(?P<tid>[0-9a-fA-F]+)"
                        r"(?: \[(?P<name>[^\]]*)\])? \(most recent call first\):")
_FH_STACK = "Stack (most recent call first):"
# '  File "/x/deepspeed/runtime/zero/stage3.py", line 490 in _synchronize_communication'
_FH_FRAME = re.compile(r'^\s*File (?:"(?P<file>[^"]*)"|\?\?\?), line (?P<line>\d+|\?\?\?) '
                       r'in (?P<func>\S+)\s*$')
_FH_QUIET = ("<no Python frame>", "...", "Garbage-collecting", "<tstate is freed>")
_MAX_FRAMES = 100  # faulthandler's own limit


@dataclass
class _Thread:
    at: int  # the header's line number (or the first frame's, when the header was cut)
    line: object  # the textlog _Line of the header, for emit
    fmt: str  # "py-spy" or "faulthandler"
    tid: str | None = None
    name: str | None = None
    status: str | None = None
    current: bool = False
    frames: list = field(default_factory=list)


@dataclass
class _Dump:
    number: int
    pid: int | None = None  # py-spy's "Process <pid>"
    cmd: str | None = None
    thread: _Thread | None = None
    tids: set = field(default_factory=set)  # a thread id seen twice starts another dump


def _key(line) -> tuple:
    return (line.rank, line.local_rank, line.host, line.proc)


def stack_family(ex, line) -> None:
    """One line of a possible dump; see the module docstring."""
    body = line.body
    key = _key(line)
    dump = ex.stacks.get(key)
    if dump is None and not ("hread " in body or "Process " in body or "Stack (" in body
                             or ('File "' in body and ", in " not in body)):
        return
    if dump is not None and dump.thread is not None and _frame(dump.thread, line):
        return
    if _header(ex, key, line):
        return
    if dump is None:
        if 'File "' in body and _FH_FRAME.match(body):  # an excerpt that lost its header
            dump = _open(ex, key)
            dump.thread = _Thread(line.n, line, "faulthandler")
            _frame(dump.thread, line)
        return
    _continue(ex, key, dump, line)


def _continue(ex, key: tuple, dump: _Dump, line) -> None:
    """A line inside an open dump that is neither a header nor a frame."""
    text = line.body.strip()
    pyspy = dump.pid is not None or (dump.thread is not None and dump.thread.fmt == "py-spy")
    if not text:
        _end_thread(ex, dump)  # faulthandler: a blank line between threads
    elif text.startswith(_FH_QUIET) or (pyspy and (
            text.startswith(("Python v", "Parent Process")) or line.body.startswith(" " * 8))):
        return  # py-spy's version line, --locals lines; faulthandler's placeholders
    else:
        close(ex, key)


def _header(ex, key: tuple, line) -> bool:
    body = line.body
    if body.startswith("Process ") and (m := _PYSPY_PROCESS.match(body)):
        close(ex, key)
        dump = _open(ex, key)
        dump.pid, dump.cmd = int(m.group("pid")), m.group("cmd")[:300]
        return True
    if body.startswith(("Thread ", "Current thread ")):
        return _thread_header(ex, key, line)
    if body.strip() == _FH_STACK:
        _begin_thread(ex, key, _Thread(line.n, line, "faulthandler", current=True))
        return True
    return False


def _thread_header(ex, key: tuple, line) -> bool:
    body = line.body
    m = _FH_THREAD.match(body)
    if m:
        thread = _Thread(line.n, line, "faulthandler", tid="0x" + m.group("tid"),
                         name=m.group("name"), current=m.group("current") != "Thread")
    elif (m := _PYSPY_THREAD.match(body)):
        thread = _Thread(line.n, line, "py-spy", tid=m.group("tid"), name=m.group("name"),
                         status=m.group("status"))
    else:
        return False
    _begin_thread(ex, key, thread)
    return True


def _begin_thread(ex, key: tuple, thread: _Thread) -> None:
    dump = ex.stacks.get(key)
    if dump is None or thread.tid in dump.tids or (thread.fmt == "faulthandler"
                                                   and dump.pid is not None):
        dump = _open(ex, key)
    _end_thread(ex, dump)
    dump.thread = thread
    if thread.tid is not None:
        dump.tids.add(thread.tid)


def _frame(thread: _Thread, line) -> bool:
    body = line.body
    if thread.fmt == "py-spy":
        m = _PYSPY_FRAME.match(body) if body.startswith("    ") else None
    else:
        m = _FH_FRAME.match(body) if 'File ' in body else None
    if m is None:
        return False
    if len(thread.frames) < _MAX_FRAMES:
        lineno = m.group("line")
        thread.frames.append({"func": m.group("func"), "file": m.group("file") or "???",
                              "line": int(lineno) if lineno and lineno.isdigit() else None,
                              "at": line.n})
    return True


def _open(ex, key: tuple) -> _Dump:
    close(ex, key)
    ex.dumps += 1
    dump = ex.stacks[key] = _Dump(ex.dumps)
    return dump


def _end_thread(ex, dump: _Dump) -> None:
    thread, dump.thread = dump.thread, None
    if thread is None or (not thread.frames and thread.tid is None):
        return
    fields = {"format": thread.fmt, "dump": dump.number, "tid": thread.tid,
              "thread": thread.name, "status": thread.status, "current": thread.current,
              "frames": thread.frames, "cmd": dump.cmd}
    if dump.pid is not None:
        fields["pid"] = dump.pid
    ex.emit("thread_stack", thread.line, **fields)


def close(ex, key: tuple) -> None:
    dump = ex.stacks.pop(key, None)
    if dump is not None:
        _end_thread(ex, dump)


def flush(ex) -> None:
    """End every dump still open at the end of the file."""
    for key in list(ex.stacks):
        close(ex, key)
