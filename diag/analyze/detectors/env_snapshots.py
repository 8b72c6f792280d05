"""check-env snapshots into findings: every failed or warned check is one, and the
across-rank checks are run again over the snapshots that are there (a run directory may
hold snapshots that were never merged, when the job died before rank 0 reported).
"""

from __future__ import annotations

from diag.format import schema
from diag.analyze.inputs import Inputs
from diag.verdict import Category, Culprit, Evidence, Finding, Severity
from diag.checkenv.rendezvous import check_rendezvous
from diag.checkenv.report import build_report
from diag.checkenv.snapshot import Snapshot, snapshot_from_json
from diag.checkenv.types import CheckResult, Status

SEVERITY = {Status.FAIL: Severity.ERROR, Status.WARN: Severity.WARN}
CONFIDENCE = {Status.FAIL: 0.9, Status.WARN: 0.5}
# Consequences of another failure: the group does not form because an interface is wrong,
# or no rank ran because the rendezvous was unreachable.
SYMPTOMS = {"cross.group", "cross.ranks"}


def load(inputs: Inputs) -> tuple[list[Snapshot], dict[int, str]]:
    """Readable snapshots, and each rank's file for evidence; unreadable ones are skipped
    (a schema from a newer ddiag, a truncated write)."""
    snaps, paths = [], {}
    for doc in inputs.docs_of(schema.ENV_SNAPSHOT):
        try:
            snap = snapshot_from_json(doc.doc, doc.path)
        except (ValueError, KeyError, TypeError):
            continue
        snaps.append(snap)
        paths[snap.rank] = doc.path
    return latest_launch(snaps), paths


def latest_launch(snaps: list[Snapshot]) -> list[Snapshot]:
    """Only the newest launch's snapshots: a reused run directory keeps older ones."""
    if not snaps:
        return snaps
    newest = max(snaps, key=lambda s: s.facts.time).launch
    return [s for s in snaps if s.launch == newest]


def detect(inputs: Inputs) -> list[Finding]:
    snaps, paths = load(inputs)
    launch, launch_paths = _rendezvous(inputs)
    if not snaps and not launch:
        return []
    world = max((s.world_size or 0 for s in snaps), default=0) or None
    report = build_report(snaps, world, launch=launch)
    paths = {**launch_paths, **paths}
    bad = [r for r in report.results if r.status in SEVERITY]
    causes = any(r.status is Status.FAIL and r.check not in SYMPTOMS for r in bad)
    return [finding(r, paths, root_cause=not (causes and r.check in SYMPTOMS)
                    and not _restates(r, bad)) for r in bad]


def _restates(result: CheckResult, bad: list[CheckResult]) -> bool:
    """A variable that differs across nodes because it is wrong on one of them: the
    failed check on those nodes is the cause, the difference says it again."""
    return result.check == "cross.env" and any(
        other.status is Status.FAIL and other.check != "cross.env"
        and other.env_var == result.env_var and set(other.nodes) & set(result.nodes)
        for other in bad)


def _rendezvous(inputs: Inputs) -> tuple[list[CheckResult], dict[int, str]]:
    """The newest rendezvous pre-flight's results (check-env writes one per launch)."""
    docs = inputs.docs_of(schema.RENDEZVOUS)
    if not docs:
        return [], {}
    doc = docs[-1]
    try:
        schema.check(doc.doc, schema.RENDEZVOUS, doc.path)
        return check_rendezvous(doc.doc), {-1: doc.path}
    except (ValueError, KeyError, TypeError, AttributeError):
        return [], {}


def finding(result: CheckResult, paths: dict[int, str], root_cause: bool) -> Finding:
    files = [paths[r] for r in result.ranks if r in paths][:4] or (
        [paths[-1]] if -1 in paths else list(paths.values())[:1])  # -1: the pre-flight
    where = f" on {', '.join(result.nodes)}" if result.nodes else ""
    return Finding(
        category=Category(result.category), severity=SEVERITY[result.status],
        confidence=CONFIDENCE[result.status], title=f"{result.summary}{where}",
        culprit=Culprit(ranks=result.ranks, hosts=result.nodes, env_var=result.env_var),
        evidence=tuple(Evidence(f, None, f"check-env {result.check}: {result.summary}")
                       for f in files),
        fix=result.fix, detector="env_snapshots", root_cause=root_cause,
        details={"check": result.check})
