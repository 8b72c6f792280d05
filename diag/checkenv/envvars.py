"""Every environment variable NCCL, c10d, gloo and torch.distributed read, and in which versions.

Loads ``envvars.tsv`` (beside this module): one row per (owner, name) with the file:line that
reads it, its default, the NCCL or torch minor versions that read it and the reader's parser.
The catalog (``catalog.py``) says what a variable means; this inventory says whether anything
reads it at all, so that a name no supported version reads is reported instead of ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from diag.checkenv.catalog import Values, Var

PATH = Path(__file__).with_name("envvars.tsv")
SCHEMA = "ddiag.envvars"
MAJOR = 1
SUPPORTED = {"nccl": ((2, 20), (2, 28)), "torch": ((2, 8), (2, 13))}
"""The minor versions ddiag supports (pyproject's torch floor; NCCL that those torch ship)."""
SUPPORTED_TEXT = "NCCL 2.20-2.28 / torch 2.8-2.13"

Minor = tuple[int, int]


@dataclass(frozen=True)
class Read:
    """One reader of one variable, as envvars.tsv records it."""

    owner: str
    name: str
    read_by: str
    where: str
    default: str
    component: str | None
    """``nccl`` or ``torch``: whose versions ``spans`` counts; None where not established."""
    spans: tuple[tuple[Minor, Minor], ...]
    """Inclusive (first, last) minor versions that read it; empty where not established."""
    accepts: str

    def reads_at(self, component: str, minor: Minor) -> bool | None:
        """Whether ``component`` at ``minor`` reads it; None when this row cannot say."""
        if self.component != component or not self.spans:
            return None
        return any(lo <= minor <= hi for lo, hi in self.spans)

    def supported(self) -> bool:
        """Read by some version ddiag supports (or by versions not established)."""
        if not self.component or not self.spans:
            return True
        lo, hi = SUPPORTED[self.component]
        return any(a <= hi and b >= lo for a, b in self.spans)

    def versions_text(self) -> str:
        shown = ",".join(f"{_dot(a)}" if a == b else f"{_dot(a)}-{_dot(b)}"
                         for a, b in self.spans)
        return f"{'NCCL' if self.component == 'nccl' else 'torch'} {shown}" if shown else "?"


def _dot(minor: Minor) -> str:
    return f"{minor[0]}.{minor[1]}"


def minor_of(version: str | None) -> Minor | None:
    """``(2, 21)`` from "2.21.5", "2.13.0+cu128" or "2.8"; None for None or junk."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _spans(text: str) -> tuple[str | None, tuple[tuple[Minor, Minor], ...]]:
    if not text.strip():
        return None, ()
    component, _, ranges = text.strip().partition(" ")
    spans = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        spans.append((minor_of(lo), minor_of(hi or lo)))
    if any(a is None or b is None for a, b in spans):
        raise ValueError(f"versions {text!r} is not 'component M.m[-M.m],...'")
    return component, tuple(spans)


def parse(text: str, source: str = str(PATH)) -> dict[str, tuple[Read, ...]]:
    """Rows by name. Rejects a file of another schema or major version, naming it."""
    lines = text.splitlines()
    head = lines[0].split() if lines else []
    if head[:2] != ["#", SCHEMA] or len(head) < 3 or head[2].split(".")[0] != str(MAJOR):
        raise ValueError(f"{source}: first line {lines[0] if lines else ''!r} is not "
                         f"'# {SCHEMA} {MAJOR}'; regenerate it with this ddiag's version")
    body = [ln for ln in lines[1:] if ln and not ln.startswith("#")]
    columns, out = body[0].split("\t"), {}
    for n, line in enumerate(body[1:], 2):
        row = dict(zip(columns, line.split("\t")))
        try:
            component, spans = _spans(row.get("versions", ""))
        except ValueError as exc:
            raise ValueError(f"{source}: row {n} ({row.get('name')}): {exc}") from None
        read = Read(row["owner"], row["name"], row["read_by"], row["where"],
                    row.get("default", ""), component, spans, row.get("accepts", ""))
        out[read.name] = out.get(read.name, ()) + (read,)
    return out


@lru_cache(maxsize=1)
def inventory() -> dict[str, tuple[Read, ...]]:
    return parse(PATH.read_text(encoding="utf-8"))


def reads(name: str) -> tuple[Read, ...]:
    return inventory().get(name, ())


def supported(name: str) -> bool:
    """Some version ddiag supports reads ``name``."""
    return any(r.supported() for r in reads(name))


def read_at(name: str, versions: dict[str, Minor | None]) -> bool | None:
    """Whether the rank's own NCCL/torch read ``name``; None when that cannot be told."""
    said = [r.reads_at(c, m) for r in reads(name) for c, m in versions.items() if m]
    known = [s for s in said if s is not None]
    return any(known) if known else None


# --- the readers' parsers ------------------------------------------------------------

def _matches(pattern: str) -> Callable[[str], bool]:
    return lambda v: re.fullmatch(pattern, v) is not None


PARSERS: dict[str, tuple[Values, str | None]] = {
    # NCCL's ncclLoadParam: strtoll(value, NULL, 0); an empty value keeps the default.
    "nccl_int": (Values("an integer (NCCL parses it with strtoll, so other text reads as 0)",
                        _matches(r"(\s*[+-]?(0[xX][0-9a-fA-F]+|\d+))?")), None),
    # c10d's getCvarBool: TORCH_CHECK(false, "Invalid value for environment variable").
    "torch_bool": (Values("1 | 0 | true | false | yes | no | y | n | t | f (any case)",
                          lambda v: v.lower() in ("1", "0", "true", "false", "yes", "no",
                                                  "y", "n", "t", "f")), None),
    # c10d's getCvarInt: std::stoi, TORCH_CHECK(false, ...) when it throws.
    "torch_int": (Values("an integer", _matches(r"\s*[+-]?\d+\s*")), None),
    # c10::utils::check_env: "0" or "1"; anything else is ignored with a warning.
    "c10_flag": (Values("0 | 1", lambda v: v in ("0", "1")),
                 "torch ignores it (warns 'Ignoring invalid value for boolean flag')"),
}


def value_spec(name: str) -> Var | None:
    """A Var for a variable only the inventory knows, when its reader's parser is known."""
    for read in reads(name):
        if read.accepts in PARSERS:
            values, if_invalid = PARSERS[read.accepts]
            return Var(name, f"read by {read.owner} ({read.where})", values,
                       if_invalid=if_invalid)
    return None


__all__ = ["PARSERS", "Read", "SUPPORTED", "SUPPORTED_TEXT", "inventory", "minor_of",
           "parse", "read_at", "reads", "supported", "value_spec"]
