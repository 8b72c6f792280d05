"""Per-rank summaries the plots need, computed from the inputs (pure)."""

from __future__ import annotations

import statistics

from diag.analyze.inputs import Inputs
from diag.analyze.progress import groups_of


def step_times(inputs: Inputs) -> dict[int, dict[int, float]]:
    """rank -> step -> seconds of the decorated step."""
    out: dict[int, dict[int, float]] = {}
    for rank, log in inputs.events.items():
        for rec in log.of_kind("step"):
            dur, step = rec.get("dur_s"), rec.get("step")
            if isinstance(dur, (int, float)) and isinstance(step, int):
                out.setdefault(rank, {})[step] = float(dur)
    return out


def binned_matrix(times: dict[int, dict[int, float]], max_rows: int = 256, max_cols: int = 120
                  ) -> tuple[list[int], list[int], list[list[float | None]]]:
    """Mean step time per (rank bin, step bin), so 512 x 500 stays a readable picture."""
    ranks = sorted(times)
    steps = sorted({s for per in times.values() for s in per})
    if not ranks or not steps:
        return [], [], []
    row_of = _bins(len(ranks), max_rows)
    col_of = _bins(len(steps), max_cols)
    sums: dict[tuple[int, int], list[float]] = {}
    for i, rank in enumerate(ranks):
        for j, step in enumerate(steps):
            if step in times[rank]:
                sums.setdefault((row_of[i], col_of[j]), []).append(times[rank][step])
    n_rows, n_cols = row_of[-1] + 1, col_of[-1] + 1
    grid = [[statistics.fmean(sums[(r, c)]) if (r, c) in sums else None for c in range(n_cols)]
            for r in range(n_rows)]
    return [ranks[row_of.index(r)] for r in range(n_rows)], \
        [steps[col_of.index(c)] for c in range(n_cols)], grid


def _bins(n: int, most: int) -> list[int]:
    return [i * most // n if n > most else i for i in range(n)]


def collective_progress(inputs: Inputs) -> dict[str, dict[int, int]]:
    """group -> rank -> last seq issued (finished or pending)."""
    return {group: {rank: seqs.last for rank, seqs in ranks.items()}
            for group, ranks in groups_of(inputs, "events").items()}
