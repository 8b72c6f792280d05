"""What a check returns: a status, who it is about, the evidence and the fix."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Status(str, enum.Enum):
    """Outcome of one check; ``skip`` means it does not apply here (no GPUs, no job)."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


# The analyze categories a check result maps to (diag.verdict.Category values).
ENV = "env_misconfig"
IFACE = "wrong_interface"
VERSION = "version_mismatch"
UNREACHABLE = "network_unreachable"


@dataclass(frozen=True)
class CheckResult:
    """One finding of one check.

    ``summary`` states what was found with the values seen; it names no rank or node, so
    identical results of many ranks merge into one row whose ``ranks``/``nodes`` list them.
    """

    check: str
    status: Status
    summary: str
    fix: str = ""
    evidence: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    nodes: tuple[str, ...] = ()
    env_var: str | None = None
    category: str = ENV

    def to_json(self) -> dict:
        return {"check": self.check, "status": self.status.value, "summary": self.summary,
                "fix": self.fix, "evidence": list(self.evidence), "ranks": list(self.ranks),
                "nodes": list(self.nodes), "env_var": self.env_var, "category": self.category}

    @classmethod
    def from_json(cls, doc: dict) -> "CheckResult":
        return cls(check=doc["check"], status=Status(doc["status"]), summary=doc["summary"],
                   fix=doc.get("fix", ""), evidence=tuple(doc.get("evidence", ())),
                   ranks=tuple(doc.get("ranks", ())), nodes=tuple(doc.get("nodes", ())),
                   env_var=doc.get("env_var"), category=doc.get("category", ENV))


def ok(check: str, summary: str, **kw) -> CheckResult:
    return CheckResult(check, Status.OK, summary, **kw)


def warn(check: str, summary: str, fix: str, **kw) -> CheckResult:
    return CheckResult(check, Status.WARN, summary, fix, **kw)


def fail(check: str, summary: str, fix: str, **kw) -> CheckResult:
    return CheckResult(check, Status.FAIL, summary, fix, **kw)


def skip(check: str, summary: str, **kw) -> CheckResult:
    return CheckResult(check, Status.SKIP, summary, **kw)
