"""What a line signature is: the dataclasses a catalog entry is made of, and the small
field readers its ``fields`` are written with.

A signature is keyed to the stable core of the format string that prints the message,
read in the emitter's source code, so it matches every log that code ever printed rather
than one sample's wording. ``source`` says where that format string is.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from diag.verdict import Basis, Category

SCOPES = ("any", "nccl_any", "nccl", "nccl_warn", "gloo", "cuda", "error")
"""Which lines an entry is tried on (computed once per line by the engine):

- ``any``: every line but NCCL's INFO chatter (``host:pid:tid [dev] NCCL INFO ...``);
- ``nccl_any``: lines that name NCCL (``NCCL``/``nccl``) or carry NCCL's prefix, chatter too;
- ``nccl``: those of them at an NCCL level (INFO/WARN/ERROR/TRACE) or saying ``NCCL``;
- ``nccl_warn``: those at level WARN or ERROR;
- ``gloo``: lines that name gloo, or a bare "... by peer" that neither NCCL nor its prefix
  claims;
- ``cuda``: lines that name CUDA (an error string of the CUDA runtime is only that there);
- ``error``: lines with an error word (``Error``, ``Exception``) or at NCCL's WARN level.

The line after torch's ``Last error:`` is NCCL's message quoted: it counts as NCCL's.
"""


@dataclass(frozen=True)
class Source:
    """Where the message is printed: the format string's repository, file and function."""

    repo: str  # "NVIDIA/nccl"
    path: str  # "src/misc/socket.cc"
    function: str  # "socketPollConnect"
    note: str = ""  # versions, or how the text reaches the log (e.g. via torch's exception)

    def __str__(self) -> str:
        return f"{self.repo} {self.path} {self.function}"


@dataclass(frozen=True)
class Example:
    """A line the entry must match, and fields its signal must carry (a subset; ``rank``
    is the signal's rank)."""

    line: str
    fields: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Implies:
    """The finding the signal maps to on its own."""

    category: Category
    basis: Basis  # how directly the message names the cause (its confidence: CONFIDENCE)
    fix: str


Reader = Callable[[re.Match], Any]


@dataclass(frozen=True)
class Field:
    """Reads one signal field off a match (``fields`` values that are not plain converters)."""

    read: Reader

    def __call__(self, m: re.Match) -> Any:
        return self.read(m)


def group(name: str, conv: Callable[[str], Any] = str, default: Any = None) -> Field:
    """The converted text of another group (``default`` when it took no part)."""
    def read(m: re.Match) -> Any:
        value = m.group(name)
        return default if value is None else conv(value)
    return Field(read)


def const(value: Any) -> Field:
    return Field(lambda m: value)


def body(limit: int = 300) -> Field:
    """The whole line (launcher prefixes peeled), stripped and cut to ``limit``."""
    return Field(lambda m: m.string.strip()[:limit])


def has(*words: str) -> Field:
    """Whether the line holds any of ``words``."""
    return Field(lambda m: any(w in m.string for w in words))


def search(pattern: str, conv: Callable[[str], Any] = str, flags: int = 0) -> Field:
    """A field the emitter prints in varying places: its own search over the line, group 1
    converted; None when absent."""
    regex = re.compile(pattern, flags)

    def read(m: re.Match) -> Any:
        found = regex.search(m.string)
        return conv(found.group(1)) if found else None
    return Field(read)


def compute(fn: Callable[[re.Match], Any]) -> Field:
    """A field made of several groups (a value and its unit, a count plus one)."""
    return Field(fn)


# converters for a group of the field's own name
def ranks(text: str) -> list[int]:
    """"1, 3" or "[1, 3]" or "1 and rank 3" -> [1, 3]."""
    return [int(r) for r in re.findall(r"\d+", text)]


def lower(text: str) -> str:
    return text.lower()


def stripped(text: str) -> str:
    return text.strip()


@dataclass(frozen=True)
class Signature:
    """One line signature: the message of one emitter, as data."""

    id: str  # "<emitter>.<what>", e.g. "nccl.connect_returned"
    signal: str  # the Signal kind it emits
    pattern: str  # regex over the stable core; named groups are the fields
    prefilter: tuple  # plain substrings that must all be in the line; a tuple item: any of
    source: Source
    examples: tuple[Example, ...]
    also: tuple[Source, ...] = ()  # other places that print the same text
    near_misses: tuple[str, ...] = ()
    fields: dict = field(default_factory=dict)  # name -> converter (of that group) or Field
    unless: tuple[str, ...] = ()  # substrings that veto the line
    scope: str = "any"  # see SCOPES
    oneof: str | None = None  # of the entries sharing it, the first that matches a line wins
    once_per_process: bool = False  # one signal per (host, pid, matched text)
    parse: Callable | None = None  # code for what a regex cannot say: parse(ex, line, match)
    implies: Implies | None = None
    flags: int = 0
    word: str | None = None  # the prefilter's needle is a whole word (\w+) of every match

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"{self.id}: scope must be one of {SCOPES}, got: {self.scope!r}")
        if not self.prefilter:
            raise ValueError(f"{self.id}: prefilter is empty: give the plain substrings the "
                             "pattern needs, so common lines cost a few `in` tests")

    @functools.cached_property
    def regex(self) -> re.Pattern:
        # compiled on first use: most of the ~1,600 entries never pass their prefilter in a
        # given log, and compiling them all costs a quarter second at every start
        return re.compile(self.pattern, self.flags)

    def passes(self, text: str) -> bool:
        """The cheap test: every prefilter item (any of a tuple's) in ``text``, no veto."""
        for need in self.prefilter:
            if isinstance(need, tuple):
                if not any(n in text for n in need):
                    return False
            elif need not in text:
                return False
        return not any(word in text for word in self.unless)

    def match(self, text: str) -> re.Match | None:
        return self.regex.search(text) if self.passes(text) else None

    def read_fields(self, m: re.Match) -> dict:
        out = {}
        for name, spec in self.fields.items():
            if isinstance(spec, Field):
                out[name] = spec(m)
            else:
                value = m.group(name)
                out[name] = None if value is None else spec(value)
        return out
