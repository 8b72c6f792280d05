"""``ddiag analyze``: load everything under a path, run every detector, rank the findings.

    from diag.analyze import analyze
    result = analyze("runs/job-123")     # an Analysis value; nothing is printed
    result.outcome                       # Outcome.FINDINGS, ... (the CLI's exit code)
"""

from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass, field

from diag.analyze import killed, unexplained
from diag.analyze.detectors import emitted
from diag.analyze.inputs import Inputs, Limits, load
from diag.analyze.runs import Run, one_job, refusal, runs_of
from diag.analyze.select import select
from diag.verdict import Category, Finding, Severity
from diag.format.events import Problem
from diag.format.ranks import first_ranks, missing_ranges

ANALYSIS_FORMAT = "ddiag.analysis"
ANALYSIS_SCHEMA = 1


class Outcome(str, enum.Enum):
    """What an analysis came to, worst first; the CLI's exit code is ``exit_code``."""

    NOTHING_TO_ANALYSE = "nothing_to_analyse"  # no input a detector reads was readable
    MIXED_RUNS = "mixed_runs"  # event logs of several runs: not analysed (see runs.py)
    DETECTOR_FAILED = "detector_failed"  # a detector raised: the findings may be incomplete
    FINDINGS = "findings"
    CLEAN = "clean"  # looked, and found nothing

    @property
    def exit_code(self) -> int:
        return {"nothing_to_analyse": 2, "mixed_runs": 2, "detector_failed": 3,
                "findings": 1, "clean": 0}[self.value]


@dataclass
class Analysis:
    """Findings ordered root cause first, plus what was read and what was wrong with it.

    ``missing_ranks`` lists the first ranks.MAX_LISTED_RANKS ranks of the world without
    any input; ``missing_rank_ranges`` holds them all as (first, last) pairs.
    """

    root: str
    findings: list[Finding]
    problems: list[Problem]
    sources: dict
    missing_ranks: list[int]
    seconds: float
    detector_errors: list[str] = field(default_factory=list)
    inputs: Inputs | None = field(default=None, repr=False)  # for the trace and HTML renderers
    missing_rank_ranges: list[tuple[int, int]] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    outcome: Outcome = Outcome.CLEAN
    refusal: str | None = None  # why nothing was analysed, and what to pass instead

    def to_json(self) -> dict:
        return {
            "schema": ANALYSIS_SCHEMA, "format": ANALYSIS_FORMAT, "root": self.root,
            "outcome": self.outcome.value, "refusal": self.refusal,
            "findings": [f.to_json() for f in self.findings],
            "problems": [asdict(p) for p in self.problems], "sources": self.sources,
            "runs": [r.to_json() for r in self.runs],
            "missing_ranks": self.missing_ranks,
            "missing_rank_ranges": [list(r) for r in self.missing_rank_ranges],
            "seconds": round(self.seconds, 3), "detector_errors": self.detector_errors,
        }


def run_detectors(inputs: Inputs) -> tuple[list[Finding], list[str]]:
    from diag.analyze.detectors import DETECTORS

    findings, errors = [], []
    for detect in DETECTORS:
        try:
            findings += detect(inputs)
        except Exception as exc:  # noqa: BLE001 - one broken detector must not hide the rest
            errors.append(f"{detect.__module__}.{detect.__name__}: {type(exc).__name__}: {exc}")
    return findings, errors


def sources_of(inputs: Inputs) -> dict:
    return {"event_logs": sorted(inputs.events), "fr_dumps": sorted(inputs.fr),
            "text_files": len(inputs.texts), "signals": len(inputs.signals),
            "documents": sorted({d.kind for d in inputs.docs})}


def missing_ranks(inputs: Inputs) -> list[tuple[int, int]]:
    """Ranks of the world with neither an event log nor a Flight Recorder dump."""
    if not (inputs.events or inputs.fr):
        return []
    return missing_ranges(inputs.world_size, [*inputs.events, *inputs.fr])


def analyze(path, limits: Limits = Limits(), progress=None) -> Analysis:
    """``progress(files read, files in all, bytes read)``: see ``inputs.load``."""
    start = time.monotonic()
    inputs = load(path, limits, progress)
    runs = runs_of(inputs.event_logs)
    findings, errors, outcome, why = [], [], Outcome.CLEAN, None
    if not inputs.analysable:
        outcome, why = Outcome.NOTHING_TO_ANALYSE, nothing_to_analyse(inputs)
    elif not one_job(runs):
        outcome, why = Outcome.MIXED_RUNS, refusal(str(path), runs)
    else:
        findings, errors = run_detectors(inputs)
        findings = emitted.prune(findings)
        kill, bad = killed.marker(inputs)
        inputs.problems += bad
        findings = killed.demote(findings, kill)
        findings += unexplained.detect(inputs, findings, kill is not None)
        problem = any(f.severity > Severity.INFO for f in findings)
        outcome = Outcome.DETECTOR_FAILED if errors else \
            Outcome.FINDINGS if problem else Outcome.CLEAN
    missing = missing_ranks(inputs) if outcome is not Outcome.MIXED_RUNS else []
    sources = sources_of(inputs)
    if limits.window is not None:
        sources["window"] = str(limits.window)
    return Analysis(str(path), select(findings), inputs.problems,
                    sources, first_ranks(missing), time.monotonic() - start,
                    errors, inputs, missing, runs, outcome, why)


def nothing_to_analyse(inputs: Inputs) -> str:
    found = "no regular file in it" if not inputs.files else (
        f"{inputs.files} file(s), none of them an event log, a Flight Recorder dump, a text "
        "log or a ddiag document that could be read")
    listed = f" ({len(inputs.problems)} problem(s) listed)" if inputs.problems else ""
    return (f"{inputs.root}: nothing to analyse: {found}{listed}; pass the run directory or "
            "the folder the job's logs were copied to")
