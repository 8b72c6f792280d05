"""``ddiag analyze``: load everything under a path, run every detector, rank the findings.

    from diag.analyze import analyze
    result = analyze("runs/job-123")     # an Analysis value; nothing is printed
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

from diag.analyze.inputs import Inputs, load
from diag.analyze.types import Category, Finding, Severity
from diag.events import Problem

ANALYSIS_FORMAT = "ddiag.analysis"
ANALYSIS_SCHEMA = 1


@dataclass
class Analysis:
    """Findings ordered root cause first, plus what was read and what was wrong with it."""

    root: str
    findings: list[Finding]
    problems: list[Problem]
    sources: dict
    missing_ranks: list[int]
    seconds: float
    detector_errors: list[str] = field(default_factory=list)
    inputs: Inputs | None = field(default=None, repr=False)  # for the trace and HTML renderers

    @property
    def problems_found(self) -> list[Finding]:
        return [f for f in self.findings if f.severity > Severity.INFO]

    def to_json(self) -> dict:
        return {
            "schema": ANALYSIS_SCHEMA, "format": ANALYSIS_FORMAT, "root": self.root,
            "findings": [f.to_json() for f in self.findings],
            "problems": [asdict(p) for p in self.problems], "sources": self.sources,
            "missing_ranks": self.missing_ranks, "seconds": round(self.seconds, 3),
            "detector_errors": self.detector_errors,
        }


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Root causes before their symptoms; then the worst, the surest, the earliest."""
    far_future = float("inf")
    return sorted(findings, key=lambda f: (not f.root_cause, -f.severity, -f.confidence,
                                           f.first_seen if f.first_seen else far_future))


def after_mismatch(findings: list[Finding]) -> list[Finding]:
    """Once ranks disagree on a collective (its op or its sizes), the group is broken:
    gloo reads past the buffer or waits forever, so every hang after it follows from it.
    The hangs are kept as symptoms."""
    broken = any(f.root_cause and f.severity >= Severity.CRITICAL and f.category in (
        Category.SHAPE_MISMATCH, Category.COLLECTIVE_MISMATCH) for f in findings)
    if not broken:
        return findings
    return [replace(f, root_cause=False) if f.root_cause and f.category in (
        Category.RANK_HANG, Category.TIMEOUT_TOO_SHORT) else f for f in findings]


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


def missing_ranks(inputs: Inputs) -> list[int]:
    world = inputs.world_size
    if not world or not (inputs.events or inputs.fr):
        return []
    return sorted(set(range(world)) - set(inputs.events) - set(inputs.fr))


def analyze(path) -> Analysis:
    start = time.monotonic()
    inputs = load(path)
    findings, errors = run_detectors(inputs)
    return Analysis(str(path), rank_findings(after_mismatch(findings)), inputs.problems, sources_of(inputs),
                    missing_ranks(inputs), time.monotonic() - start, errors, inputs)
