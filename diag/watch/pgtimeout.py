"""The process-group timeout of a job that imports nothing of ddiag, where it is visible
from outside: the ``timeout=`` its script passes to ``init_process_group``, a literal
(``timedelta(seconds=40)``) or an argparse option given on its command line or left at
its default (``timedelta(seconds=args.timeout_s)`` with ``--timeout-s 40``).

Pure but for ``of_rank``, which reads the rank's command line and script. None when the
script says nothing readable: then torch's default applies, which nobody can see (30 min
for gloo, 10 for NCCL), and watch says it cannot tell.
"""

from __future__ import annotations

import re
from pathlib import Path

MAX_SCRIPT_BYTES = 1 << 20
_INIT = re.compile(r"init_process_group\s*\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)", re.S)
_TIMEDELTA = re.compile(r"timeout\s*=\s*(?:datetime\s*\.\s*)?timedelta\s*\((?P<args>[^()]*)\)")
_UNIT_S = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "milliseconds": 0.001}
_NUMBER = re.compile(r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?\Z")


def of_rank(cmdline: str, cwd: str | Path) -> tuple[float, str] | None:
    """(seconds, where it was read) for the rank whose ``cmdline`` (space-joined argv) and
    working directory are given; None when not visible."""
    argv = cmdline.split()
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    if script is None:
        return None
    path = Path(cwd) / script
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            source = fh.read(MAX_SCRIPT_BYTES)
    except OSError:
        return None
    seconds = from_source(source, argv[argv.index(script) + 1:])
    return (seconds, f"{script}'s init_process_group(timeout=...)") if seconds else None


def from_source(source: str, args: list[str]) -> float | None:
    """The timeout in seconds that ``source`` passes to init_process_group when run with
    ``args``; None when it passes none, or one this cannot evaluate."""
    for call in _INIT.finditer(source):
        delta = _TIMEDELTA.search(call["args"])
        if delta is None:
            continue
        total = 0.0
        for part in delta["args"].split(","):
            unit, _, value = (s.strip() for s in part.partition("="))
            number = _value(value, source, args)
            if unit not in _UNIT_S or number is None:
                return None
            total += number * _UNIT_S[unit]
        return total or None
    return None


def _value(expr: str, source: str, args: list[str]) -> float | None:
    if _NUMBER.match(expr):
        return float(expr)
    m = re.fullmatch(r"\w+\.(\w+)", expr)  # args.timeout_s: an argparse option
    if m is None:
        return None
    dest = m[1]
    given = _given(dest, args)
    return given if given is not None else _default(dest, source)


def _given(dest: str, args: list[str]) -> float | None:
    flags = {f"--{dest}", f"--{dest.replace('_', '-')}"}
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in flags:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            return float(value) if _NUMBER.match(value) else None
    return None


def _default(dest: str, source: str) -> float | None:
    flag = re.escape(dest).replace("_", "[-_]")
    m = re.search(rf"add_argument\(\s*['\"]--{flag}['\"][^)]*default\s*=\s*([\d.eE+-]+)",
                  source)
    return float(m[1]) if m and _NUMBER.match(m[1]) else None
