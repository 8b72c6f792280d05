"""The verdict vocabulary every command shares: a finding's category, severity, culprit,
evidence and fix.

analyze's detectors are pure functions ``(Inputs) -> list[Finding]``; check-env, watch and
scale-test speak the same words, and the renderers turn them into reports.
"""

from __future__ import annotations

import enum
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


class Severity(enum.IntEnum):
    """How bad the finding is for the job. Only findings above INFO count as problems."""

    INFO = 0
    WARN = 1
    ERROR = 2
    CRITICAL = 3


@dataclass(frozen=True)
class Evidence:
    """One quoted line from the user's inputs: where it is and what it says."""

    file: str
    line: int | None
    text: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.text}"


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
    are right. ``root_cause`` is false for findings that are consequences of another
    (the ranks that time out waiting for a hung one). ``first_seen`` is the wall-clock
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

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["category"] = self.category.value
        doc["severity"] = self.severity.name.lower()
        doc["culprit"]["ranks"] = list(self.culprit.ranks)
        doc["culprit"]["hosts"] = list(self.culprit.hosts)
        doc["evidence"] = [asdict(e) for e in self.evidence]
        return doc
