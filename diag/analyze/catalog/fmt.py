"""Format strings into matchers: the regex of a message is compiled from the format string
that prints it (printf's ``%d``, fmt's ``{}``, a value streamed into a C++ ``<<`` chain or an
f-string, written ``<X>`` in the inventory), never written by hand.

Literals are escaped and their whitespace runs made flexible; each placeholder becomes a
group typed by its conversion (``%d`` digits, ``%lx`` hex; ``%s`` text: the rest of the line
when last, one token when first, otherwise up to the next literal, bounded and possessive so
a crafted line cannot make groups backtrack into each other). The engine's prefilter looks
for a whole literal word of the message (``whole_word``), else for the needle, the longest
run of literal text without whitespace.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# printf conversions (flags, width, precision, length), fmt's "{}" / "{:spec}", and the
# inventory's "<X>" / "<FILE>" for a value streamed in
PLACEHOLDER = re.compile(r"%%|%[-+ #0]*(?:\d+|\*)?(?:\.\d+|\.\*)?(?:hh|h|ll|l|z|j|t|L)?"
                         r"[diouxXeEfgGcspn]|\{(?::[^{}]*)?\}|<[A-Z]+>")

_INT = r"-?\d+"
_UINT = r"\d+"
_HEX = r"(?:0[xX])?[0-9a-fA-F]+"
_FLOAT = r"-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
_PTR = r"(?:0x[0-9a-fA-F]+|\(nil\)|nil|0)"


# How long a value inside a message may be: every start position of a search may scan this
# far, so the bound is what keeps a crafted 8 KB line linear (a value in a real message is
# an address, a name, a number, an error string; the last one may take the rest).
SPACE = r"\s"  # marks an ``until`` that begins with whitespace
VALUE_MAX = 256
TOKEN_MAX = 128
GLUED_MAX = 8  # the first of two values with nothing between them: a prefix ("^", "=")


def _typed(conv: str, last: bool, first: bool = False, until: str | None = "") -> str:
    """The regex of one placeholder's value; the last one of a message takes the rest, a
    text that opens it is one token (else it would take the carrier before it too), and a
    text between literals runs up to the next literal ``until`` (a regex) and never gives
    back what it took: a log line is hostile input, and lazy groups that backtrack into each
    other cost polynomial time on a crafted line."""
    kind = conv[-1] if conv.startswith("%") else "s"
    if kind in "di":
        return _INT
    if kind == "u":
        return _UINT
    if kind in "xX":
        return _HEX
    if kind in "eEfgG":
        return _FLOAT
    if kind == "p":
        return _PTR
    if kind == "c":
        return r"."
    if first:  # possessive when a space ends it: the token cannot give back its end
        return rf"\S{{0,{TOKEN_MAX}}}" + ("+" if until is not None and until.startswith(
            SPACE) else "")
    if last:
        return r".*"
    if until:
        return rf"(?:(?!\s*{until}).){{0,{VALUE_MAX}}}+"
    if until is None:  # another value follows with nothing between: the split is arbitrary
        return rf"\S{{0,{GLUED_MAX}}}?"
    return rf".{{0,{VALUE_MAX}}}?"


def placeholders(fmt: str) -> list[str]:
    """The placeholders of a format string, in order (``%%`` is a literal percent)."""
    return [p for p in PLACEHOLDER.findall(fmt) if p != "%%"]


def whole_word(piece: str) -> str | None:
    """The longest ``\\w+`` run of the literals that is a whole word of every line the
    piece matches: not glued to a placeholder (``%sfailed`` prints "xfailed")."""
    parts = PLACEHOLDER.split(piece)
    best = None
    for i, lit in enumerate(parts):
        for m in re.finditer(r"\w+", lit):
            glued = (m.start() == 0 and i > 0) or (m.end() == len(lit) and i < len(parts) - 1)
            if not glued and (best is None or len(m.group()) > len(best)):
                best = m.group()
    return best


@dataclass(frozen=True)
class Compiled:
    """A format string's matcher: ``pattern`` with groups ``f0``, ``f1``... in placeholder
    order (``offset`` of them skipped when only a later piece of the message is matched),
    ``needle`` its longest whitespace-free literal, ``literal`` how many literal
    characters it holds (short ones match too much to stand alone)."""

    pattern: str
    needle: str
    literal: int
    offset: int = 0


def _literal(text: str) -> str:
    # a run of spaces in the format may be one space or several (a paste, a wrap rejoined);
    # at either end of a piece, none at all (a line break printed there, or the line's end)
    core = r"\s+".join(re.escape(word) for word in text.split())
    lead = r"\s*" if text[:1].isspace() else ""
    trail = r"\s*" if text[-1:].isspace() else ""
    return lead + core + trail


@functools.lru_cache(maxsize=8192)
def compile_piece(piece: str, offset: int = 0) -> Compiled:
    """One line's worth of a format string into its matcher."""
    parts = PLACEHOLDER.split(piece)
    convs = PLACEHOLDER.findall(piece)
    out, n = [], offset
    for i, lit in enumerate(parts):
        out.append(_literal(lit) if lit.strip() else (r"\s*" if lit else ""))
        if i < len(convs):
            conv = convs[i]
            if conv == "%%":
                out.append("%")
                continue
            last = i == len(convs) - 1 and not parts[i + 1].strip()
            first = i == 0 and not lit.strip()
            nxt = parts[i + 1]
            until = _literal(nxt.strip()) if nxt.strip() else ("" if nxt else None)
            if first and nxt[:1].isspace():
                until = SPACE + (until or "")
            out.append(f"(?P<f{n}>{_typed(conv, last, first, until)})")
            n += 1
    words = [w for lit in parts for w in re.split(r"\s+", lit) if w]
    needle = max(words, key=len, default="")
    literal = sum(len(lit.strip()) for lit in parts)
    return Compiled("".join(out).strip(), needle, literal, offset)


# gloo's GLOO_ENFORCE prefix names the file the inventory writes "<FILE>"; in a log it is
# "[enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] " or, for GLOO_THROW,
# "[/pytorch/third_party/gloo/gloo/...:598] ": a carrier, like NCCL's prefix
_GLOO_ENFORCE = re.compile(r"^\[enforce fail at gloo/<FILE>\]\s*")


@functools.lru_cache(maxsize=4096)
def message_of(fmt: str) -> tuple[str, int]:
    """The part of a format string to match, and how many placeholders precede it: the
    message without its carrier prefix, and of a multi-line message (C's ``\\n``) the first
    line that can stand alone (later lines print on lines of their own)."""
    fmt = _GLOO_ENFORCE.sub("", fmt).replace("\\t", " ").strip()  # C's tab is whitespace
    pieces = fmt.split("\\n")
    skipped = 0
    for piece in pieces:
        if compile_piece(piece).literal >= MIN_LITERAL:
            return piece, skipped
        skipped += len(placeholders(piece))
    return pieces[0], 0


MIN_LITERAL = 12  # literal characters a message needs to be matched at all


@functools.lru_cache(maxsize=4096)
def compile_format(fmt: str) -> Compiled:
    piece, offset = message_of(fmt)
    return compile_piece(piece, offset)
