"""The check-env report as a table for people: failures first, then warnings, then the rest."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from diag.checkenv.checks_cross import span
from diag.checkenv.report import Report
from diag.checkenv.types import CheckResult
from diag.report.terminal import quote, stdout_console
from diag.verdict import Status

STYLE = {Status.FAIL: "bold red", Status.WARN: "yellow", Status.OK: "green", Status.SKIP: "dim"}


def where(result: CheckResult, report: Report) -> str:
    all_ranks = sorted(r for ranks in report.nodes.values() for r in ranks)
    ranks, nodes = result.culprit.ranks, ", ".join(result.culprit.hosts)
    if not ranks and not nodes:
        return "job"
    if list(ranks) == all_ranks and len(report.nodes) > 1:
        return "all"
    return f"{nodes} [{span(ranks)}]" if ranks else nodes


def table(report: Report, statuses: tuple[Status, ...]) -> Table:
    t = Table(show_lines=False, expand=True)
    for name, kw in (("status", {"no_wrap": True}), ("check", {"no_wrap": True}),
                     ("where", {}), ("finding", {"ratio": 3}), ("fix", {"ratio": 2})):
        t.add_column(name, **kw)
    for r in report.results:
        if r.status in statuses:
            t.add_row(f"[{STYLE[r.status]}]{r.status.value}[/]", quote(r.check),
                      quote(where(r, report)), quote(r.summary), quote(r.fix))
    return t


def render(report: Report, verbose: bool = False, console: Console | None = None) -> None:
    console = console or stdout_console()
    shown = (Status.FAIL, Status.WARN, Status.OK) + ((Status.SKIP,) if verbose else ())
    console.print(table(report, shown))
    counts = ", ".join(f"{report.count(s)} {s.value}" for s in Status)
    nodes = quote(", ".join(f"{n} [{span(r)}]" for n, r in report.nodes.items()))
    console.print(f"[{STYLE[report.status]}]check-env: {report.status.value}[/] ({counts}) "
                  f"on {nodes or 'no ranks'}")
    if report.missing_ranks:
        console.print(f"[bold red]missing ranks: {span(report.missing_ranks)}[/]")
    for problem in report.problems:
        console.print(f"[yellow]{quote(problem)}[/]")
    if report.run_dir:
        run_dir = quote(report.run_dir)
        console.print(f"snapshots: {run_dir}/env/  (ddiag analyze {run_dir})")
