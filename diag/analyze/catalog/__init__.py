"""The signature catalog: every single-line message ddiag reads, as data.

One entry per message (``spec.Signature``): an id, a cheap prefilter, the regex over the
stable core of the emitter's format string with typed fields, examples and near-misses,
and the place in NCCL, PyTorch, gloo, the driver or the launcher that prints it. The
modules group entries by emitter; ``CATALOG`` runs them in this order (it decides which of
a ``oneof`` group wins). ``engine.scan`` runs them; ``python -m diag.analyze.catalog
--markdown`` prints the table in docs/analyze.md.
"""

from __future__ import annotations

from diag.analyze.catalog import cuda, elastic, frameworks, gloo, host, nccl, slurm, torch
from diag.analyze.catalog import nccl_coll
from diag.analyze.catalog import python
from diag.analyze.catalog.spec import Example, Implies, Signature, Source

CATALOG: tuple[Signature, ...] = (nccl.ENTRIES + nccl_coll.ENTRIES + torch.ENTRIES
                                  + gloo.ENTRIES + elastic.ENTRIES
                                  + cuda.ENTRIES + host.ENTRIES + slurm.ENTRIES
                                  + frameworks.ENTRIES + python.ENTRIES)

BY_ID: dict[str, Signature] = {entry.id: entry for entry in CATALOG}


def implied(signal: str) -> Implies:
    """The finding a signal kind maps to on its own (every entry emitting it agrees; the
    catalog test checks that)."""
    found = {e.implies for e in CATALOG if e.signal == signal and e.implies is not None}
    if len(found) != 1:
        raise LookupError(f"signal {signal!r}: {len(found)} distinct implies in the catalog, "
                          "expected exactly 1")
    return found.pop()


__all__ = ["BY_ID", "CATALOG", "Example", "Implies", "Signature", "Source", "implied"]
