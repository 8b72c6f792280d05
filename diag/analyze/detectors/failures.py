"""First failures: the rank that raised first is the culprit; later errors are victims.

When one rank dies, its peers' next collective fails too ("Connection closed by peer",
NCCL errors, timeouts). Those are consequences. The earliest exception that is not a
communication failure is the root cause; only when every exception is a communication
failure is the earliest one named.
"""

from __future__ import annotations

import re

from diag.analyze.inputs import Inputs
from diag.verdict import Category, Culprit, Evidence, Finding, Severity

# Messages of exceptions that a rank raises because a *peer* failed or vanished.
COMM_FAILURE = re.compile(
    r"connection (closed|reset)|broken pipe|timed out|timeout|DistBackendError|NCCL error|"
    r"ProcessGroup\w* .*(abort|terminat)|Gloo|socket|peer", re.IGNORECASE)
OOM = re.compile(r"out of memory|OutOfMemoryError|can't allocate memory|"
                 r"cannot allocate memory|std::bad_alloc|MemoryError", re.IGNORECASE)


def detect(inputs: Inputs) -> list[Finding]:
    failures = sorted(_exceptions(inputs), key=lambda f: (f["t"] or 0.0, f["rank"]))
    if not failures:
        return []
    own = [f for f in failures if not COMM_FAILURE.search(f["type"] + ": " + f["message"])]
    root = (own or failures)[0]
    # Only communication failures: they follow from something else (a hang, a dead or
    # unreachable peer) that another detector names; report them as its symptom.
    findings = [_finding(root, root_cause=bool(own))]
    victims = [f for f in failures if f["rank"] != root["rank"]]
    if victims:
        findings.append(_victims(root, victims))
    return findings


def _exceptions(inputs: Inputs) -> list[dict]:
    out = []
    for rank, log in inputs.events.items():
        for rec, line in zip(log.records, log.lines):
            if rec.get("kind") == "exception":
                out.append({"rank": rank, "t": rec.get("t"), "step": rec.get("step"),
                            "type": str(rec.get("type", "")), "message": str(rec.get("message", "")),
                            "host": (log.header or {}).get("host"),
                            "evidence": Evidence(log.path, line, _head(rec))})
                break  # the first exception of a rank is the one that matters
    return out


def _head(rec: dict) -> str:
    return f"step {rec.get('step')}: {rec.get('type')}: {str(rec.get('message'))[:300]}"


def _finding(f: dict, root_cause: bool) -> Finding:
    oom = bool(OOM.search(f["type"] + " " + f["message"]))
    return Finding(
        category=Category.OOM if oom else Category.OTHER,
        severity=Severity.CRITICAL, confidence=0.85 if oom else 0.7,
        title=(f"rank {f['rank']} ran out of memory at step {f['step']}" if oom else
               f"rank {f['rank']} failed first, at step {f['step']}: {f['type']}"),
        culprit=Culprit(ranks=(f["rank"],), hosts=(f["host"],) if f["host"] else ()),
        evidence=(f["evidence"],),
        fix=("reduce the per-rank memory: smaller micro-batch, activation checkpointing, "
             "ZeRO/FSDP sharding; on GPU check for fragmentation "
             "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)" if oom else
             f"fix the {f['type']} raised on rank {f['rank']} (traceback in its event "
             "log); the other ranks' errors follow from it"),
        detector="failures", root_cause=root_cause, first_seen=f["t"],
    )


def _victims(root: dict, victims: list[dict]) -> Finding:
    ranks = sorted({v["rank"] for v in victims})
    return Finding(
        category=Category.OTHER, severity=Severity.ERROR, confidence=0.8,
        title=f"ranks {', '.join(map(str, ranks))} failed after rank {root['rank']} (victims)",
        culprit=Culprit(), evidence=tuple(v["evidence"] for v in victims[:8]),
        fix=f"nothing to fix on these ranks: they failed because rank {root['rank']} did",
        detector="failures", root_cause=False, first_seen=victims[0]["t"],
    )
