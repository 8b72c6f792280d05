"""Rich terminal rendering of ddiag's result values. The only module that prints tables."""

from __future__ import annotations

import os
import re
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn,
                           TimeElapsedColumn)
from rich.table import Table
from rich.text import Text

from diag.format.ranks import as_ranges, ranges_text
from diag.analyze.summary import RunSummary
from diag.report.text import plain

_SEVERITY_STYLE = {"critical": "bold red", "error": "red", "warn": "yellow", "info": "dim"}

def quote(value) -> str:
    """``plain`` text for a rich markup string or a table cell: its own brackets
    (``[red]``, ``[link=...]``) escaped, so they show as written instead of styling."""
    return escape(plain(value))


def stdout_console() -> Console:
    """The terminal's width on a terminal. Elsewhere (a pipe, a CI log) rich assumes 80
    columns, which folds the wider tables' headers into stubs ("sta…"); take 120 there
    unless COLUMNS says otherwise."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=120)
    return console


def _fmt(value, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec and isinstance(value, (int, float)) else quote(value)


def render_summary(summary: RunSummary, console: Console | None = None) -> None:
    console = console or stdout_console()
    table = Table(title=f"{quote(summary.run_dir)}  run_id={quote(summary.run_id)}  "
                        f"world_size={quote(summary.world_size)}")
    for col in ("rank", "host", "steps", "p50 ms", "colls", "last seq", "loss", "|grad|",
                "exc", "drop"):
        table.add_column(col, justify="left" if col in ("host", "last seq") else "right")
    for r in summary.ranks:
        seqs = quote(", ".join(f"{g or 'world'}:{s}" for g, s in r.last_seq.items()))
        table.add_row(quote(r.rank), _fmt(r.host), quote(r.steps),
                      _fmt(r.step_p50_s and r.step_p50_s * 1000, ".1f"), str(r.collectives),
                      seqs or "-", _fmt(r.last_loss, ".4g"), _fmt(r.last_grad_norm, ".4g"),
                      quote(r.exceptions), _fmt(r.dropped))
    console.print(table)
    if summary.missing_rank_ranges:
        console.print(f"[yellow]missing ranks (no event log): "
                      f"{ranges_text(summary.missing_rank_ranges)}")
    for p in summary.problems:
        console.print(Text(plain(p), style="yellow"))


def render_analysis(analysis, console: Console | None = None) -> None:
    """Top finding first, each with its culprit, evidence and fix."""
    console = console or stdout_console()
    roots = [f for f in analysis.findings if f.root_cause]
    console.print(f"[bold]ddiag analyze[/] {quote(analysis.root)}: {len(roots)} root cause(s), "
                  f"{len(analysis.findings) - len(roots)} symptom(s) "
                  f"in {analysis.seconds:.2f} s")
    if analysis.refusal:  # the CLI prints why on stderr; watch shows this line alone
        console.print(f"[yellow]not analysed: {analysis.outcome.value.replace('_', ' ')}")
    elif not analysis.findings and not analysis.detector_errors:
        console.print("[green]no findings")
    for i, f in enumerate(analysis.findings, 1):
        sev = f.severity.name.lower()
        role = "" if f.root_cause else " [dim](symptom)[/]"
        console.print(f"\n[{_SEVERITY_STYLE[sev]}]{i}. {f.category.value}[/] "
                      f"[dim]{sev}, confidence {f.confidence:.2f}[/]{role}\n   {quote(f.title)}")
        culprit = _culprit_text(f.culprit)
        if culprit:
            console.print(f"   [bold]culprit:[/] {quote(culprit)}")
        for ev in f.evidence[:6]:
            console.print(Text(f"   {plain(ev)}", style="dim"))
        console.print(f"   [bold]fix:[/] {quote(f.fix)}")
    for error in analysis.detector_errors:
        console.print(Text(plain(f"detector failed, the findings may be incomplete: {error}"),
                           style="bold red"))
    if analysis.missing_rank_ranges:
        console.print(f"\n[yellow]no input from ranks "
                      f"{ranges_text(analysis.missing_rank_ranges)}")
    for p in analysis.problems[:20]:
        console.print(Text(plain(p), style="yellow"))


def _culprit_text(c) -> str:
    parts = []
    if c.ranks:
        parts.append("rank " + ", ".join(map(str, c.ranks)))
    if c.hosts:
        parts.append("host " + ", ".join(c.hosts))
    if c.link:
        parts.append(f"link {c.link[0]}<->{c.link[1]}")
    if c.env_var:
        parts.append(f"env {c.env_var}")
    return "; ".join(parts)


def render_watch(result, console: Console | None = None) -> None:
    console = console or stdout_console()
    if result.alarm is None:
        console.print(f"ddiag watch: no hang ({quote(result.ended)})")
        return
    a = result.alarm
    console.print(f"[bold red]hang[/] ({quote(a.reason)}): ranks {quote(list(a.laggards))} "
                  f"lag; ranks {quote(list(a.waiting))} wait")
    for c in result.captures:
        console.print(Text(plain(f"  stack of rank {c.rank}: {c.path or c.error}"), style="dim"))
    if result.analysis is not None:
        render_analysis(result.analysis, console)
    if result.killed:
        console.print(f"ended ranks {quote(result.killed)}")


def render_sampled_watch(result, console: Console | None = None) -> None:
    """``ddiag watch --pid`` / ``--slurm-job``: how it ended; on a hang, the odd ones out and the analysis."""
    console = console or stdout_console()
    straggler = getattr(result, "straggler", None)
    if result.alarm is None:
        console.print(f"ddiag watch: no hang ({quote(result.ended)}; {result.samples} samples "
                      f"of {len(result.ranks)} rank(s))")
        if straggler is not None:
            console.print(Text(plain(f"straggler: {straggler.title}"), style="yellow"))
        return
    head = "job ended in a stall" if result.ended == "job ended in a stall" else "hang"
    console.print(Text(plain(f"{head}: {result.alarm.reason}"), style="bold red"))
    for c in result.captures:
        console.print(Text(plain(f"  stack of rank {c.process.rank} (pid {c.process.pid}): "
                                 f"{c.path or c.error}"), style="dim"))
    if result.analysis is not None:
        render_analysis(result.analysis, console)
    if result.killed:
        console.print(f"ended ranks {quote(result.killed)}")


def render_stacks(result, console: Console | None = None) -> None:
    """``ddiag stacks``: the groups of identical stacks, largest first, then the finding."""
    console = console or stdout_console()
    for g in result.groups:
        who = ranges_text(as_ranges(g.ranks)) if g.ranks else f"{len(g.stacks)} process(es)"
        console.print(Text(plain(f"{len(g.stacks)} rank(s) [{who}]: {g.state} in "
                                 f"{g.at or '?'}"), style="bold"))
        for frame in g.frames[:6]:
            console.print(Text(plain(f"    {frame}"), style="dim"))
    for c in result.captures:
        if c.error:
            who = (f"rank {c.process.rank} (pid {c.process.pid})" if c.process.rank is not None
                   else str(c.process.host))
            console.print(Text(plain(f"{who}: {c.error}"), style="yellow"))
    finding = result.finding
    if finding is not None and result.names_a_cause:
        who = ", ".join(map(str, finding.culprit.ranks)) or "not decided"
        console.print(Text(plain(f"{finding.category.value} (culprit rank: {who}, confidence "
                                 f"{finding.confidence:.2f}): {finding.title}"),
                           style="bold red"))
        console.print(Text(plain(f"fix: {finding.fix}")))
    elif finding is not None:
        console.print(Text(plain(f"note: {finding.title}"), style="bold"))
        console.print(Text(plain(f"next: {finding.fix}")))
    elif len(result.groups) == 1:
        console.print(f"all {result.captured} captured ranks are in the same place")
    console.print(f"dumps: {quote(str(result.run_dir / 'stacks'))} (ddiag analyze reads them)")


def render_scale_test(result, console: Console | None = None) -> None:
    console = console or stdout_console()
    cfg, own = result.config, bool(result.config.command)
    table = Table(title=f"ddiag scale-test: {cfg.job}, {cfg.launcher} launcher, "
                        f"{'strong' if cfg.strong else 'weak'} scaling",
                  caption="TFLOP/s: compute probe, median rank; host eff: eff against what "
                          "the host's probes allow (compute rate, small all_reduce time); a "
                          "fall the host predicts, with no finding, is no cliff")
    cols = ("stage", "ranks", "status", *(("source", "rate") if own else ("samp/s",)),
            "p50 ms", "p95 ms", "comm", "data", "TFLOP/s", "eff", "host eff")
    for col in cols:
        table.add_column(col, justify="left" if col in ("status", "source") else "right")
    for run, m, tflops, eff, norm in zip(result.stages, result.metrics, result.compute_tflops,
                                         result.efficiency, result.efficiency_normalised):
        mark = " <- cliff" if run.stage == result.cliff_stage else ""
        rate = _fmt(m and m.samples_per_s, ".1f")
        table.add_row(str(run.stage), str(run.world_size), quote(run.status.value) + mark,
                      *((_fmt(m and m.source), rate) if own else (rate,)),
                      _fmt(m and m.step_p50_s and m.step_p50_s * 1000, ".1f"),
                      _fmt(m and m.step_p95_s and m.step_p95_s * 1000, ".1f"),
                      _fmt(m and m.comm_share, ".0%"), _fmt(m and m.data_share, ".0%"),
                      _fmt(tflops, ".3f"), _fmt(eff, ".2f"), _fmt(norm, ".2f"))
    console.print(table)
    for note in result.throughput_notes if own else ():
        console.print(f"rate from {quote(note)}")
    _command_notes(result, console)
    console.print(Text(f"verdict: {plain(result.verdict)}", style="bold"))
    console.print(f"run directory: {quote(result.config.out)}")


def _command_notes(result, console: Console) -> None:
    """How a command's stages were kept apart, what --steps meant, what each stage wrote,
    and the warnings that bear on the numbers."""
    if not result.config.command:
        return
    console.print(f"working directory: {quote(result.isolation['how'])}")
    if result.steps_meaning:
        console.print(f"steps: {quote(result.steps_meaning)}")
    for note in result.file_notes[0]:
        console.print(quote(note))
    for warning in result.warnings:
        console.print(Text(f"warning: {plain(warning)}", style="yellow"))


_STAGE_LINE = re.compile(r"stage (\d+): (.*)")


@contextmanager
def scale_test_status(cfg, live: bool, console: Console | None = None
                      ) -> Iterator[Callable[[str], None]]:
    """The status callback scale_test() reports to. ``live`` (a terminal): one live line
    with the stage (i/N), its current step and the time elapsed, each finished step kept
    above it with its duration. Otherwise the plain ``ddiag scale-test: ...`` lines on
    stderr that tests and CI read."""
    if not live:
        yield lambda line: print(f"ddiag scale-test: {line}", file=sys.stderr, flush=True)
        return
    display = _StageProgress(cfg, console or Console(stderr=True))
    with display.progress:
        try:
            yield display.update
        finally:
            display.finish_step()


class _StepElapsed(ProgressColumn):
    def render(self, task) -> Text:
        return Text(f"{time.monotonic() - task.fields['since']:4.0f} s", style="dim")


class _StageProgress:
    def __init__(self, cfg, console: Console):
        self.cfg, self.step, self.since = cfg, None, time.monotonic()
        self.progress = Progress(
            SpinnerColumn(), TextColumn("[bold]stage {task.fields[at]}"), BarColumn(bar_width=16),
            TextColumn("{task.description}"), _StepElapsed(), TextColumn("[dim]total"),
            TimeElapsedColumn(), console=console, transient=True)
        self.task = self.progress.add_task("starting", total=len(cfg.stages),
                                           at=f"-/{len(cfg.stages)}", since=self.since)

    def update(self, line: str) -> None:
        match = _STAGE_LINE.fullmatch(line)
        if match is None or int(match.group(1)) not in self.cfg.stages:
            # A hang or an interrupt: news, not a step with a duration.
            self.progress.console.print(Text(f"  {plain(line)}", style="yellow"))
            return
        self.finish_step()
        self.step, self.since = line, time.monotonic()
        stage = int(match.group(1))
        i, world = self.cfg.stages.index(stage), self.cfg.world_size(stage)
        self.progress.update(
            self.task, completed=i, description=quote(match.group(2)), since=self.since,
            at=f"{i + 1}/{len(self.cfg.stages)} ({world} rank{'s' if world > 1 else ''})")

    def finish_step(self) -> None:
        """Keep the step that just ended above the live line, with how long it took."""
        if self.step is not None:
            self.progress.console.print(
                Text(f"  {plain(self.step)}  ({time.monotonic() - self.since:.1f} s)", style="dim"))
            self.step = None
