"""Slow links from ``ddiag probe links`` results found in the input.

The probe already judged the matrix (a link below half the median, or below a twentieth
of its interfaces' speed, is slow; a node all of whose links are slow is the culprit, since its own NIC, cable or port is the common
factor). This turns its verdict into findings with the measured rates as evidence.
"""

from __future__ import annotations

from diag.format import schema
from diag.analyze.inputs import Inputs
from diag.verdict import Category, Culprit, Evidence, Finding, Severity


def detect(inputs: Inputs) -> list[Finding]:
    findings = []
    for doc in inputs.docs_of(schema.PROBE_LINKS):
        report = doc.doc if isinstance(doc.doc, dict) else {}
        links = [_typed(link) for link in _list(report.get("links")) if isinstance(link, dict)]
        slow = [link for link in links if link["slow"]]
        if not slow:
            continue
        median = _rate_of(report.get("median_gbit_per_s")) or 0.0
        nodes = [n for n in _list(report.get("slow_nodes")) if isinstance(n, str)
                 and any(n in (link["src"], link["dst"]) for link in slow)]
        findings += ([_node_finding(doc.path, n, slow, median) for n in nodes] or
                     [_link_finding(doc.path, link, median) for link in slow])
    return findings


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _rate_of(value) -> float | None:
    """A rate in Gbit/s as the probe writes it (a finite float >= 0), else None: the
    document may come from anywhere."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < float("inf") else None


def _typed(link: dict) -> dict:
    """One link with the types the findings need: node names as strings, rates as
    floats or None."""
    return {"src": str(link.get("src")), "dst": str(link.get("dst")),
            "gbit_per_s": _rate_of(link.get("gbit_per_s")),
            "nominal_gbit_per_s": _rate_of(link.get("nominal_gbit_per_s")),
            "below_nominal": link.get("below_nominal") is True, "slow": link.get("slow") is True}


def _rate(link: dict) -> str:
    gbit = link.get("gbit_per_s") or 0.0
    return f"{gbit * 1000:.0f} Mbit/s" if gbit < 1 else f"{gbit:.2f} Gbit/s"


def _evidence(path: str, links: list[dict]) -> tuple[Evidence, ...]:
    return tuple(Evidence(path, None, f"{link.get('src')} -> {link.get('dst')}: {_rate(link)}")
                 for link in links[:8])


def _node_finding(path: str, node: str, slow: list[dict], median: float) -> Finding:
    mine = [link for link in slow if node in (link.get("src"), link.get("dst"))]
    worst = max(mine, key=lambda link: link.get("gbit_per_s") or 0.0)
    peer = worst.get("dst") if worst.get("src") == node else worst.get("src")
    return Finding(
        category=Category.SLOW_LINK, severity=Severity.ERROR, confidence=0.9,
        title=(f"every link of {node} is slow: about {_rate(worst)} against a median of "
               f"{median:.2f} Gbit/s ({len(mine)} directions measured)"),
        culprit=Culprit(hosts=(node,), link=(node, str(peer))), evidence=_evidence(path, mine),
        fix=(f"check {node}'s network path: NIC speed and errors (ethtool {node}'s "
             "interface, `ip -s link`), its switch port and cable, and any traffic shaping "
             "(`tc qdisc show`)"),
        detector="probe_links", details={"node": node, "median_gbit_per_s": median})


def _link_finding(path: str, link: dict, median: float) -> Finding:
    src, dst = str(link.get("src")), str(link.get("dst"))
    nominal = link.get("nominal_gbit_per_s")
    against = (f"{(link.get('gbit_per_s') or 0) / nominal:.0%} of its {nominal:g} Gbit/s "
               "interfaces" if link.get("below_nominal") and nominal
               else f"median {median:.2f} Gbit/s")
    return Finding(
        category=Category.SLOW_LINK, severity=Severity.ERROR, confidence=0.8,
        title=f"link {src} -> {dst} runs at {_rate(link)}, {against}",
        culprit=Culprit(hosts=(src, dst), link=(src, dst)), evidence=_evidence(path, [link]),
        fix=f"check the path between {src} and {dst}: both NICs, the switch ports between "
            "them, and routing (`ip route get`)",
        detector="probe_links", details={"median_gbit_per_s": median})
