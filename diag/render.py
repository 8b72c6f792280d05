"""Rich terminal rendering of ddiag's result values. The only module that prints tables."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from diag.summary import RunSummary


def _fmt(value, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec and isinstance(value, (int, float)) else str(value)


def render_summary(summary: RunSummary, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"{summary.run_dir}  run_id={summary.run_id}  "
                        f"world_size={summary.world_size}")
    for col in ("rank", "host", "steps", "step p50 (ms)", "collectives", "last seq",
                "last loss", "grad norm", "exceptions", "dropped"):
        table.add_column(col, justify="right" if col not in ("host", "last seq") else "left")
    for r in summary.ranks:
        seqs = ", ".join(f"{g or 'world'}:{s}" for g, s in r.last_seq.items())
        table.add_row(str(r.rank), _fmt(r.host), str(r.steps),
                      _fmt(r.step_p50_s and r.step_p50_s * 1000, ".1f"), str(r.collectives),
                      seqs or "-", _fmt(r.last_loss, ".4f"), _fmt(r.last_grad_norm, ".4f"),
                      str(r.exceptions), _fmt(r.dropped))
    console.print(table)
    if summary.missing_ranks:
        console.print(f"[yellow]missing ranks (no event log): {summary.missing_ranks}")
    for p in summary.problems:
        console.print(f"[yellow]{p.file}:{p.line}: {p.message}")
