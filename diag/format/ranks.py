"""Sets of ranks as (first, last) ranges: a world of 2**20 ranks with two logs is one range
of missing ranks, never a million numbers."""

from __future__ import annotations

from typing import Iterable

# How many missing ranks a JSON document lists one by one; the ranges hold them all.
MAX_LISTED_RANKS = 1024


def missing_ranges(world: int | None, present: Iterable[int]) -> list[tuple[int, int]]:
    """The ranks in [0, world) not in ``present``, as (first, last) pairs. Linear in the
    ranks present, whatever ``world`` is."""
    if not world:
        return []
    ranges, start = [], 0
    for rank in sorted({r for r in present if 0 <= r < world}):
        if rank > start:
            ranges.append((start, rank - 1))
        start = rank + 1
    if start < world:
        ranges.append((start, world - 1))
    return ranges


def as_ranges(ranks: Iterable[int]) -> list[tuple[int, int]]:
    """Ranks as (first, last) pairs of consecutive ranks."""
    ranges: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if ranges and rank == ranges[-1][1] + 1:
            ranges[-1][1] = rank
        else:
            ranges.append([rank, rank])
    return [(a, b) for a, b in ranges]


def first_ranks(ranges: list[tuple[int, int]], limit: int = MAX_LISTED_RANKS) -> list[int]:
    """The first ``limit`` ranks the ranges hold, one by one."""
    listed: list[int] = []
    for first, last in ranges:
        listed += range(first, min(last, first + limit - len(listed) - 1) + 1)
        if len(listed) >= limit:
            break
    return listed


def ranges_text(ranges: list[tuple[int, int]]) -> str:
    """``0, 2-6, 8-1048575``."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
