"""The one engine: every catalog entry against one line, in catalog order.

A line first gets its scopes (is it NCCL's, at which level; does it name gloo), computed
once. The entries of those scopes are indexed by the first item of their prefilter, and
those needles by a few short gates they share: the common line costs one pass of ``in``
tests over the gates and stops there; the few entries whose needle is present run the rest
of their prefilter, then their regex. The Extractor (textlog.py) calls ``scan`` for every
line and keeps the multi-line state; this module holds none but the plans' cache.
"""

from __future__ import annotations

import heapq
import itertools
import re
from dataclasses import dataclass

from diag.analyze.catalog.spec import Signature

_LEVELS = ("WARN", "INFO", "ERROR", "TRACE")


def nccl_level(body: str) -> str | None:
    """NCCL_DEBUG's level word of a line (the first of WARN, INFO, ERROR, TRACE present)."""
    for level in _LEVELS:
        if f" {level} " in body or body.startswith(level + " ") or f"NCCL {level}" in body:
            return level
    return None


def glog_level(body: str) -> str | None:
    """The level letter of a glog/c10 prefix ("[E1204 10:00:00.0 12 x.cpp:1]", "W0729 ..."),
    also behind a timestamp of the launcher's."""
    m = _GLOG.search(body, 0, 48)
    return m.group(1) if m else None


_GLOG = re.compile(r"(?:^|[\s\]:])\[?([IWEF])\d{4} \d\d:\d\d:\d\d")
# NCCL's WARN names its source file and line ("include/socket.h:344 WARN ..."): what is
# left of an NCCL line when a paste drops the host:pid:tid prefix (and, before 2.5, NCCL)
_NCCL_WHERE = re.compile(r"(?:^|\s)[\w/.-]+\.(?:cc|h|c|cpp|cu):\d+ (?:NCCL )?WARN ")


def is_chatter(line) -> bool:
    """NCCL INFO lines with NCCL's prefix: most of a big job's log; only NCCL's own entries
    (and no multi-line parser) can use them."""
    return line.pid is not None and "NCCL INFO" in line.body


def scopes(line) -> frozenset[str]:
    """The scopes (spec.SCOPES) whose entries may run on this line."""
    body = line.body
    chatter = is_chatter(line)
    # NCCL's message quoted by torch: on the line after "Last error:", or after it on the
    # same line where a paste or a JSON error file joined the lines
    quoted = getattr(line, "quoted", None) == "nccl" or "Last error:" in body
    named = ("NCCL" in body or "nccl" in body or line.pid is not None or quoted
             or "NET/Socket" in body or "NET/IB" in body  # NCCL's own subsystem tags
             or (" WARN " in body and _NCCL_WHERE.search(body, 0, 120) is not None))
    level = nccl_level(body) if named else None
    nccl = named and (level is not None or "NCCL" in body or quoted)
    gloo = not chatter and ("gloo" in body or "Gloo" in body or (
        "by peer" in body and line.pid is None and "NCCL" not in body))  # NCCL's own is NCCL's
    cuda = not chatter and ("CUDA" in body or "cuda" in body or "Cuda" in body)
    error = not chatter and ("rror" in body or "xception" in body or "RROR" in body
                             or "ailed" in body or glog_level(body) in ("E", "W", "F")
                             or (nccl and level in ("WARN", "ERROR")))
    return _SCOPE_SETS[(not chatter, named, nccl, nccl and level in ("WARN", "ERROR"), gloo,
                        cuda, error)]


_SCOPE_NAMES = ("any", "nccl_any", "nccl", "nccl_warn", "gloo", "cuda", "error")
_SCOPE_SETS = {flags: frozenset(s for s, on in zip(_SCOPE_NAMES, flags) if on)
               for flags in itertools.product((False, True), repeat=len(_SCOPE_NAMES))}
_PLANS: dict = {}


@dataclass(frozen=True)
class _Plan:
    """The entries a line with these scopes can reach, indexed by the alternatives of their
    first prefilter item, and those needles by shorter gates that several share: one
    C-level pass over the gates finds the few needles, and entries, worth a look."""

    entries: tuple  # in catalog order
    gates: tuple[str, ...]
    needles_of: dict  # gate -> needles holding it
    by_needle: dict  # needle -> indices into entries
    by_word: dict  # whole word -> indices of the entries keyed by it (emitter templates)


_WORD = re.compile(r"\w+")  # a line's words, for the entries keyed by a whole word
_GATE = 4  # gate length: short enough to be shared, long enough to be rare in plain text


def _gates(needles: list[str]) -> dict[str, list[str]]:
    """A small set of substrings such that every needle holds one (greedy set cover, with
    the lazy heap: a gate's count is only recomputed when it reaches the top)."""
    cover: dict[str, set] = {}
    for needle in needles:
        for i in range(max(1, len(needle) - _GATE + 1)):
            cover.setdefault(needle[i:i + _GATE], set()).add(needle)
    heap = [(-len(held), gate) for gate, held in cover.items()]
    heapq.heapify(heap)
    left, out = set(needles), {}
    while left and heap:
        count, gate = heapq.heappop(heap)
        held = cover[gate] & left
        if len(held) < -count:  # stale: others took some of its needles
            if held:
                heapq.heappush(heap, (-len(held), gate))
            continue
        out[gate] = sorted(held)
        left -= held
    return out


def _all_gates(entries: tuple[Signature, ...]) -> dict[str, list[str]]:
    """The gates of every needle of ``entries``, computed once: a scope's plan keeps
    those that hold one of its needles (a worker process computes this at its start)."""
    cached = _GATES.get(id(entries))
    if cached is None or cached[0] is not entries:
        cached = _GATES[id(entries)] = (entries, _gates(sorted(
            {n for e in entries if not e.word for n in _needles(e)})))
    return cached[1]


def _needles(entry: Signature) -> tuple[str, ...]:
    first = entry.prefilter[0]
    return first if isinstance(first, tuple) else (first,)


_GATES: dict = {}


def _plan(entries: tuple[Signature, ...], allowed: frozenset) -> _Plan:
    key = (id(entries), allowed)
    cached = _PLANS.get(key)
    if cached is None or cached[0] is not entries:
        if len(_PLANS) > 256:  # callers that pass many entry tuples (tests, one entry each)
            _PLANS.clear()
        if len(_GATES) > 256:
            _GATES.clear()
        reach = tuple(e for e in entries if e.scope in allowed)
        by_needle: dict[str, list[int]] = {}
        by_word: dict[str, list[int]] = {}
        for i, entry in enumerate(reach):
            if entry.word:
                by_word.setdefault(entry.word, []).append(i)
                continue
            for needle in _needles(entry):
                by_needle.setdefault(needle, []).append(i)
        gates = {gate: held for gate, needles in _all_gates(entries).items()
                 if (held := [n for n in needles if n in by_needle])}
        cached = _PLANS[key] = (entries, _Plan(reach, tuple(gates), gates, by_needle,
                                                by_word))
    return cached[1]


def scan(ex, line, entries: tuple[Signature, ...]) -> None:
    """Run ``entries`` over one line; each match emits through ``ex`` (the Extractor). An
    entry that raises is counted in ``ex.failures`` and the others still run."""
    body = line.body
    plan = _plan(entries, scopes(line))
    gates = list(filter(body.__contains__, plan.gates))
    hits = [n for gate in gates for n in plan.needles_of[gate] if n in body]
    found = {i for needle in hits for i in plan.by_needle[needle]}
    for word in plan.by_word.keys() & set(_WORD.findall(body)):
        found.update(plan.by_word[word])
    fired: set[str] = set()
    for i in sorted(found):
        entry = plan.entries[i]
        if entry.oneof and entry.oneof in fired:
            continue
        m = entry.match(body)
        if m is None:
            continue
        if entry.oneof:
            fired.add(entry.oneof)
        try:
            emit(ex, line, entry, m)
        except Exception:  # noqa: BLE001 - one entry's bug must not hide the others' facts
            ex.failures += 1


def emit(ex, line, entry: Signature, m) -> None:
    if entry.parse is not None:
        entry.parse(ex, line, m)
        return
    if entry.once_per_process:
        key = (entry.id, line.host, line.pid, m.group(0))
        if key in ex.once:
            return
        ex.once.add(key)
    sig = ex.emit(entry.signal, line, **entry.read_fields(m))
    ex.react(sig, line)
