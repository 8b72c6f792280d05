"""How many of the failure messages the emitters print does ``ddiag analyze`` explain?

Each failure template's rendered line (a log line as its emitter prints it) is analysed
alone, in this process, and its top finding counted as
  specific     a category other than ``other``, or ``other`` with a title of its own
  fallback     the unexplained fallback (``other`` quoting the earliest error lines)
  none         no finding at all
per emitter and per subsystem (bootstrap, socket, IB/net, shm, init, ProcessGroupNCCL,
TCPStore, reducer, elastic, gloo, CUDA, ...). The same rule as shared/emitters/coverage.py,
which runs the CLI once per line; this one takes about a minute.

    python benchmarks/emitter_coverage.py [--census FILE] [--gate 0.9] [--markdown]
        [--emitter NAME] [--verbose] [--json FILE] [--before FILE] [--doc docs/accuracy.md]

``--census`` reads the census of shared/emitters (its ``rendered`` column) instead of the
project's inventory; ``--gate F`` exits 1 when under F are specific overall or any emitter is
under 0.75; ``--markdown`` prints the table for docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from diag.analyze import analyze

GENERIC = ("unexplained", " on a rank", "with no detail in the log")
# docs/accuracy.md's block, last on the page (fault_matrix.py and calibration.py keep it)
COVERAGE_BEGIN = "<!-- emitter-coverage: written by benchmarks/emitter_coverage.py --doc -->"
EMITTER_FLOOR = 0.75
STATUSES = ("specific", "fallback", "none")

def subsystem(row: dict) -> str:
    from diag.analyze.catalog import emitted  # the table the settings principle uses too

    return emitted.subsystem(row["file"], row["emitter"])


def classify(line: str, folder: Path) -> tuple[str, str, str]:
    """(status, category, title) of the top finding of ``line`` analysed alone."""
    path = folder / "job.log"
    path.write_text(line + "\n", encoding="utf-8")
    findings = analyze(path).findings
    if not findings:
        return "none", "", ""
    top = findings[0]
    cat, title = top.category.value, top.title
    if cat == "other" and any(g in title for g in GENERIC):
        return "fallback", cat, title
    return "specific", cat, title


def rows_of(census: str | None, emitter: str | None) -> list[dict]:
    if census:
        csv.field_size_limit(1 << 24)
        with open(census, encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    else:
        from diag.analyze.catalog import emitted  # a version of ddiag that has one

        rows = [r for r in emitted.inventory() if not r.get("variant_of")]
    return [r for r in rows if r["failure"] == "1" and (not emitter or r["emitter"] == emitter)]


def tally(rows: list[dict], verbose: bool) -> dict:
    per: dict[str, Counter] = defaultdict(Counter)
    cats: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            status, cat, title = classify(row["rendered"], Path(tmp))
            for key in (row["emitter"], "sub:" + subsystem(row), "ALL"):
                per[key][status] += 1
            cats[cat or "-"] += 1
            if verbose and status != "specific":
                print(f"{status:9} {row['emitter']:13} {row['file']}:{row['line']}  "
                      f"{row['template'][:90]}", file=sys.stderr)
    return {"per": {k: dict(v) for k, v in per.items()}, "categories": dict(cats)}


def table(result: dict, markdown: bool, before: dict | None = None,
          subsystems: bool | None = None) -> str:
    """One row per emitter (``subsystems`` False), per subsystem (True) or both (None),
    then all; with ``before`` (an earlier run's ``--json``) its specific share beside."""
    head = ["subsystem" if subsystems else "emitter", "templates", *STATUSES] + (
        ["specific before"] if before else [])
    lines = []
    if markdown:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted((k for k in result["per"] if subsystems is None or k == "ALL"
                   or k.startswith("sub:") == subsystems),
                  key=lambda k: (k == "ALL", k.startswith("sub:"), k))
    for key in keys:
        c = result["per"][key]
        n = sum(c.values())
        cells = [key.removeprefix("sub:"), str(n)] + [f"{c.get(s, 0) / n:.1%}" for s in STATUSES]
        if before:
            old = before["per"].get(key, {})
            cells.append(f"{old.get('specific', 0) / max(sum(old.values()), 1):.1%}")
        lines.append("| " + " | ".join(cells) + " |" if markdown else
                     f"{cells[0]:20} {cells[1]:>6}  " + "  ".join(
                         f"{s} {v:>6}" for s, v in zip(head[2:], cells[2:])))
    return "\n".join(lines)


def write_doc(path: Path, result: dict, before: dict | None, source: str) -> None:
    """The coverage block at the end of ``path``, replacing the one there."""
    today = datetime.date.today().isoformat()
    lines = [COVERAGE_BEGIN, "", "## The emitters' messages: coverage", "",
             f"Measured by `python benchmarks/emitter_coverage.py --doc docs/accuracy.md` on "
             f"{today}: each failure template of {source} (the message as its emitter prints "
             "it, one line) analysed alone; the top finding is *specific* when it names what "
             "happened (a category other than `other`, or `other` with a title of its own), "
             "*fallback* when it is the unexplained fallback, *none* when nothing is found. "
             "Whether a specific answer is the right one is judged elsewhere (the corpus, hand "
             "labels). Before: ddiag at bf7813d, the same benchmark; gloo's 91% then was one "
             "blanket `rank_hang` at 0.35 for 69 different messages.", "",
             "By emitter:", "", table(result, True, before, subsystems=False), "",
             "By subsystem:", "", table(result, True, before, subsystems=True), ""]
    old = path.read_text() if path.exists() else ""
    head = old[:old.find(COVERAGE_BEGIN)] if COVERAGE_BEGIN in old else old
    path.write_text(head.rstrip("\n") + "\n\n" + "\n".join(lines))


def gate_failures(result: dict, gate: float) -> list[str]:
    out = []
    for key, c in result["per"].items():
        n = sum(c.values())
        share = c.get("specific", 0) / n
        floor = gate if key == "ALL" else EMITTER_FLOOR
        if not key.startswith("sub:") and share < floor:
            out.append(f"{key}: {share:.1%} specific, under {floor:.0%}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--census", help="shared/emitters/templates.tsv instead of the inventory")
    ap.add_argument("--emitter")
    ap.add_argument("--gate", type=float, default=None)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--json", help="write the counts to this file")
    ap.add_argument("--before", type=Path, help="an earlier run's --json, shown beside")
    ap.add_argument("--doc", type=Path, help="write the table at the end of this page")
    a = ap.parse_args()
    result = tally(rows_of(a.census, a.emitter), a.verbose)
    before = json.loads(a.before.read_text()) if a.before else None
    print(table(result, a.markdown, before))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if a.doc:
        source = "shared/emitters/templates.tsv" if a.census else "the project's inventory"
        write_doc(a.doc, result, before, source)
    failed = gate_failures(result, a.gate) if a.gate is not None else []
    for why in failed:
        print(f"gate: {why}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
