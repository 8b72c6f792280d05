"""What an NVIDIA Xid means (``xid.tsv``, from NVIDIA's Xid catalog) and the parser of the
kernel log's ``NVRM: Xid`` lines.

Pure: the collector (``gpufacts``) reads the kernel log and hands its text here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from diag.checkenv.facts import XidEvent

PATH = Path(__file__).with_name("xid.tsv")
SCHEMA = "ddiag.xid"
MAJOR = 1
CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/"
MAX_EVENTS = 100
"""The newest Xid lines kept: a GPU in trouble repeats one Xid thousands of times."""

# "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen
# off the bus." The monotonic stamp is dmesg's (and journalctl -o short-monotonic's); the
# PCI tag is "PCI:domain:bus:device" or, on newer drivers, with ".function".
XID_LINE = re.compile(r"(?:\[\s*(?P<stamp>\d+\.\d+)\]\s*)?(?:.*?\s)?NVRM: Xid "
                      r"\((?P<pci>[^)]*)\): (?P<xid>\d+),\s*(?P<text>.*)$")


@dataclass(frozen=True)
class XidInfo:
    """One row of xid.tsv."""

    xid: int
    status: str
    """fail or warn: what a recent one means for the next job."""
    meaning: str
    action: str
    source: str


def parse_table(text: str, source: str = str(PATH)) -> dict[int, XidInfo]:
    """Rows by Xid. Rejects a file of another schema or major version, naming it."""
    lines = text.splitlines()
    head = lines[0].split() if lines else []
    if head[:2] != ["#", SCHEMA] or len(head) < 3 or head[2].split(".")[0] != str(MAJOR):
        raise ValueError(f"{source}: first line {lines[0] if lines else ''!r} is not "
                         f"'# {SCHEMA} {MAJOR}'; use the xid.tsv of this ddiag's version")
    body = [ln for ln in lines[1:] if ln and not ln.startswith("#")]
    columns = body[0].split("\t")
    rows = [dict(zip(columns, line.split("\t"))) for line in body[1:]]
    return {int(r["xid"]): XidInfo(int(r["xid"]), r["status"], r["meaning"], r["action"],
                                   r["source"]) for r in rows}


@lru_cache(maxsize=1)
def table() -> dict[int, XidInfo]:
    return parse_table(PATH.read_text(encoding="utf-8"))


def lookup(xid: int) -> XidInfo | None:
    return table().get(xid)


def bus_id(pci: str) -> str:
    """One spelling for a GPU's PCI address, "0000:3b:00": the kernel log's "PCI:0000:3b:00"
    and NVML's busId "00000000:3B:00.0" both become it, so an Xid finds its GPU."""
    parts = pci.removeprefix("PCI:").strip().split(".")[0].split(":")
    try:
        domain, bus, dev = (int(p, 16) for p in parts[-3:]) if len(parts) >= 3 else (
            0, *(int(p, 16) for p in parts[-2:]))
    except ValueError:
        return pci.strip().lower()
    return f"{domain:04x}:{bus:02x}:{dev:02x}"


def parse_log(text: str, uptime_s: float | None) -> tuple[XidEvent, ...]:
    """The Xid lines of a kernel log, newest ``MAX_EVENTS``; ``uptime_s`` (seconds since
    boot when the log was read) turns the monotonic stamps into ages."""
    events = []
    for line in text.splitlines():
        m = XID_LINE.search(line) if "NVRM: Xid" in line else None
        if not m:
            continue
        stamp = float(m["stamp"]) if m["stamp"] else None
        age = uptime_s - stamp if stamp is not None and uptime_s is not None else None
        events.append(XidEvent(int(m["xid"]), bus_id(m["pci"]), m["text"].strip()[:300],
                               None if age is None else max(age, 0.0)))
    return tuple(events[-MAX_EVENTS:])


__all__ = ["CATALOG_URL", "XidInfo", "bus_id", "lookup", "parse_log", "parse_table", "table"]
