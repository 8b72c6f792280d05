"""What a loaded document would cost whoever walks it, measured without walking it out.

A pickle can share one list from two places, and that list can share another: 200 bytes
make 2**26 nested lists for anything that walks them (``json.dumps``, ``str``, a loop).
``expanded_size`` counts the nodes such a walk meets, visiting each distinct container
once, so a document is refused in microseconds instead of unfolded for minutes.
"""

from __future__ import annotations

CONTAINERS = frozenset({dict, list, tuple, set, frozenset})


class DocumentTooLarge(ValueError):
    """The document would unfold past the node budget or nest past the depth limit."""


def expanded_size(doc: object, max_nodes: int, max_depth: int) -> int:
    """The nodes a full walk of ``doc`` meets, a shared container counted at each place it
    appears. Raises DocumentTooLarge past ``max_nodes`` or ``max_depth`` levels."""
    return _size(doc, 0, {}, max_nodes, max_depth) if type(doc) in CONTAINERS else 1


def _size(value, depth: int, seen: dict[int, int], max_nodes: int, max_depth: int) -> int:
    key = id(value)  # the document is alive throughout, so ids are not reused
    if key in seen:
        return seen[key]
    if depth >= max_depth:
        raise DocumentTooLarge(f"nested deeper than {max_depth} levels")
    total = 1 + len(value)
    parts = (value.keys(), value.values()) if type(value) is dict else (value,)
    for part in parts:
        if not CONTAINERS.isdisjoint(map(type, part)):  # scalars only: counted by len
            total += sum(_size(c, depth + 1, seen, max_nodes, max_depth) - 1
                         for c in part if type(c) in CONTAINERS)
        if total > max_nodes:
            break
    seen[key] = total
    if total > max_nodes:
        raise DocumentTooLarge(f"unfolds into more than {max_nodes} nodes (a pickle that "
                               "shares its own lists)")
    return total
