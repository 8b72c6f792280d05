"""The signature catalog: every single-line message ddiag reads, as data.

One entry per message (``spec.Signature``): an id, a cheap prefilter, the regex over the
stable core of the emitter's format string with typed fields, examples and near-misses,
and the place in NCCL, PyTorch, gloo, the driver or the launcher that prints it. The
modules group entries by emitter; ``CATALOG`` (``entries()``) runs them in this order (it decides which of
a ``oneof`` group wins). ``engine.scan`` runs them; ``python -m diag.analyze.catalog
--markdown`` prints the table in docs/analyze.md.
"""

from __future__ import annotations

import functools

from diag.analyze.catalog import cuda, elastic, frameworks, gloo, host, nccl, slurm, torch
from diag.analyze.catalog import nccl_coll
from diag.analyze.catalog import python
from diag.analyze.catalog import emitted, mpi
from diag.analyze.catalog.spec import Example, Implies, Signature, Source

# The hand-written entries (messages of several lines, state across lines, cross-rank
# signals the detectors reason over), then one entry per emitter template (emitted.py).
HAND: tuple[Signature, ...] = (nccl.ENTRIES + nccl_coll.ENTRIES + torch.ENTRIES
                               + gloo.ENTRIES + elastic.ENTRIES
                               + cuda.ENTRIES + host.ENTRIES + slurm.ENTRIES
                               + frameworks.ENTRIES + python.ENTRIES + mpi.ENTRIES)


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Signature, ...]:
    """Every entry, in the order the engine runs them: built on first use, since a run
    without text logs never needs the ~1,500 template entries."""
    return HAND + emitted.entries()


@functools.lru_cache(maxsize=1)
def by_id() -> dict[str, Signature]:
    return {entry.id: entry for entry in entries()}


def __getattr__(name: str):
    # CATALOG and BY_ID stay importable names, built when first asked for
    if name == "CATALOG":
        return entries()
    if name == "BY_ID":
        return by_id()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def implied(signal: str) -> Implies:
    """The finding a signal kind maps to on its own (every entry emitting it agrees; the
    catalog test checks that)."""
    found = {e.implies for e in HAND if e.signal == signal and e.implies is not None}
    if len(found) != 1:
        raise LookupError(f"signal {signal!r}: {len(found)} distinct implies in the catalog, "
                          "expected exactly 1")
    return found.pop()


__all__ = ["BY_ID", "CATALOG", "HAND", "by_id", "entries", "Example", "Implies", "Signature", "Source", "implied"]
