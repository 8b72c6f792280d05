"""The verdict vocabulary every command shares: a finding's category, severity, culprit,
evidence and fix.

analyze's detectors are pure functions ``(Inputs) -> list[Finding]``; check-env's checks
return results in the same words (a ``Status`` of the check, mapped to a ``Severity``), watch
and scale-test report them, and the renderers turn them into reports. Fix texts that more
than one command gives live in ``diag.fixes``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any


class Category(str, enum.Enum):
    """The root-cause vocabulary (shared/corpus/README.md)."""

    ENV_MISCONFIG = "env_misconfig"
    NETWORK_UNREACHABLE = "network_unreachable"
    WRONG_INTERFACE = "wrong_interface"
    COLLECTIVE_MISMATCH = "collective_mismatch"
    RANK_HANG = "rank_hang"
    STRAGGLER = "straggler"
    SLOW_LINK = "slow_link"
    SHAPE_MISMATCH = "shape_mismatch"
    NAN_INF = "nan_inf"
    OOM = "oom"
    UNUSED_PARAMETERS = "unused_parameters"
    VERSION_MISMATCH = "version_mismatch"
    TIMEOUT_TOO_SHORT = "timeout_too_short"
    OTHER = "other"


def graded(basis: Basis) -> dict[str, Any]:
    """A finding's ``confidence`` and ``basis`` keywords for ``basis``."""
    return {"confidence": CONFIDENCE[basis], "basis": basis}


class Severity(enum.IntEnum):
    """How bad the finding is for the job. Only findings above INFO count as problems."""

    INFO = 0
    WARN = 1
    ERROR = 2
    CRITICAL = 3


class Status(str, enum.Enum):
    """Outcome of one check (check-env): did it apply, and did it pass.

    ``skip`` means it does not apply here (no GPUs, no job). A check that passed or did
    not apply is no problem: its severity is INFO, as for an informational finding; a
    warning is WARN and a failure ERROR (``severity``). No check result is CRITICAL: that
    is left to analyze, which sees what the job did.
    """

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    @property
    def severity(self) -> Severity:
        return STATUS_SEVERITY[self]


STATUS_SEVERITY = {Status.OK: Severity.INFO, Status.SKIP: Severity.INFO,
                   Status.WARN: Severity.WARN, Status.FAIL: Severity.ERROR}


class Basis(enum.IntEnum):
    """How a finding knows its cause, weakest first. A finding's confidence is its
    basis's (``CONFIDENCE``), never a number a rule picked: two rules that know a cause
    the same way are equally sure, and the selector prefers the stronger basis."""

    FALLBACK = 0  # errors nobody catalogued: the first failure, quoted
    HEURISTIC = 1  # a pattern that often means this: silence, a cascade's wording, a guess
    LINE = 2  # one message read in its context: what the line says failed, not why
    MINORITY = 3  # the odd one out across ranks or hosts (sequences, stacks, timings)
    SETTING = 4  # a configured value and a failure in what it governs
    EMITTER = 5  # the emitter's message names the cause (Duplicate GPU, CUDA OOM)


# Calibrated on labelled verdicts the rules were not written from: the fault matrix's
# injected faults and real incidents scored before they were looked at
# (benchmarks/calibration.py prints accuracy by basis; docs/accuracy.md).
CONFIDENCE: dict[Basis, float] = {
    Basis.FALLBACK: 0.2, Basis.HEURISTIC: 0.4, Basis.LINE: 0.6, Basis.MINORITY: 0.8,
    Basis.SETTING: 0.85, Basis.EMITTER: 0.9,
}


@dataclass(frozen=True)
class Evidence:
    """One quoted line from the user's inputs: where it is and what it says."""

    file: str
    line: int | None
    text: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.text}" if where else self.text

    @classmethod
    def from_text(cls, text: str) -> "Evidence":
        """The inverse of ``str()`` for a source without ``": "`` in its name: check-env's
        JSON keeps its evidence as these strings. A string with no source is all text."""
        m = _WHERE.match(text)
        if not m:
            return cls("", None, text)
        line = m["line"]
        return cls(m["file"], int(line) if line else None, m["text"])


# "file:12: text", "file: text"; the source has no ": " of its own.
_WHERE = re.compile(r"(?P<file>[^:\s][^:]*?)(?::(?P<line>\d+))?: (?P<text>.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class Culprit:
    """Who or what caused it; any field may be empty when it does not apply."""

    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    link: tuple[str, str] | None = None
    env_var: str | None = None


@dataclass(frozen=True)
class Finding:
    """One diagnosed cause or symptom.

    ``confidence`` is in [0, 1]: how sure the detector is that the category and culprit
    are right, read off its ``basis`` (``CONFIDENCE``). ``root_cause`` is false for
    findings that are consequences of another (the ranks that time out waiting for a hung one). ``first_seen`` is the wall-clock
    time of the earliest evidence when known, used to order failures in time.
    """

    category: Category
    severity: Severity
    confidence: float
    title: str
    culprit: Culprit
    evidence: tuple[Evidence, ...]
    fix: str
    detector: str
    root_cause: bool = True
    first_seen: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    basis: Basis | None = None

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["basis"] = self.basis.name.lower() if self.basis is not None else None
        doc["category"] = self.category.value
        doc["severity"] = self.severity.name.lower()
        doc["culprit"]["ranks"] = list(self.culprit.ranks)
        doc["culprit"]["hosts"] = list(self.culprit.hosts)
        doc["evidence"] = [asdict(e) for e in self.evidence]
        return doc
