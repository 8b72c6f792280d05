"""What a check returns: its id and status, and the shared verdict words (diag.verdict):
category, culprit, evidence and fix."""

from __future__ import annotations

from dataclasses import dataclass

from diag.verdict import Category, Culprit, Evidence, Severity, Status


@dataclass(frozen=True)
class CheckResult:
    """One finding of one check.

    ``summary`` states what was found with the values seen; it names no rank or node, so
    identical results of many ranks merge into one row whose culprit lists them
    (``culprit.hosts`` are the nodes).
    """

    check: str
    status: Status
    summary: str
    fix: str = ""
    evidence: tuple[Evidence, ...] = ()
    culprit: Culprit = Culprit()
    category: Category = Category.ENV_MISCONFIG

    @property
    def severity(self) -> Severity:
        return self.status.severity

    def to_json(self) -> dict:
        """The ``results`` entry of ``ddiag.env_snapshot`` / ``ddiag.check_env`` (schema
        1): the culprit flat (ranks, nodes, env_var), evidence as "source: text" lines."""
        c = self.culprit
        return {"check": self.check, "status": self.status.value, "summary": self.summary,
                "fix": self.fix, "evidence": [str(e) for e in self.evidence],
                "ranks": list(c.ranks), "nodes": list(c.hosts), "env_var": c.env_var,
                "category": self.category.value}

    @classmethod
    def from_json(cls, doc: dict) -> "CheckResult":
        culprit = Culprit(ranks=tuple(doc.get("ranks", ())), hosts=tuple(doc.get("nodes", ())),
                          env_var=doc.get("env_var"))
        return cls(check=doc["check"], status=Status(doc["status"]), summary=doc["summary"],
                   fix=doc.get("fix", ""), culprit=culprit,
                   evidence=tuple(Evidence.from_text(e) for e in doc.get("evidence", ())),
                   category=_category(doc.get("category", Category.ENV_MISCONFIG.value)))


def _category(value: str) -> Category:
    """A category this ddiag does not know (a newer writer's) reads as OTHER."""
    try:
        return Category(value)
    except ValueError:
        return Category.OTHER


def result(check: str, status: Status, summary: str, fix: str = "", *,
           ranks: tuple[int, ...] = (), nodes: tuple[str, ...] = (), env_var: str | None = None,
           category: Category = Category.ENV_MISCONFIG, evidence: tuple[Evidence, ...] = ()
           ) -> CheckResult:
    """A result whose culprit is given flat, as checks know it: ranks, nodes, variable."""
    return CheckResult(check, status, summary, fix, evidence,
                       Culprit(ranks=ranks, hosts=nodes, env_var=env_var), category)


def ok(check: str, summary: str, **kw) -> CheckResult:
    return result(check, Status.OK, summary, **kw)


def warn(check: str, summary: str, fix: str, **kw) -> CheckResult:
    return result(check, Status.WARN, summary, fix, **kw)


def fail(check: str, summary: str, fix: str, **kw) -> CheckResult:
    return result(check, Status.FAIL, summary, fix, **kw)


def skip(check: str, summary: str, **kw) -> CheckResult:
    return result(check, Status.SKIP, summary, **kw)
