"""Is a finding of confidence 0.9 right about 9 times in 10? The top finding's confidence
against whether it was right, over every labelled verdict there is:

- the real incident logs of ``shared/corpus`` (labels from the threads),
- the hand-written cases of ``tests/analyze/cases`` (other versions' wordings),
- the fault matrix's stored results (``benchmarks/results/fault-matrix-*.json``, the lab's
  injected faults; its top findings and verdicts are read from the file, not re-run).

A verdict is right when the top finding's category is the label's and, where the label
names a culprit rank, the finding names it. Verdicts are binned by confidence; each bin
gives its count, how many were right, and the mean confidence. Written to
``benchmarks/results/calibration-<date>.json`` and printed as the table in
docs/analyze.md.

    python benchmarks/calibration.py [--corpus ../shared/corpus] [--matrix FILE]
        [--before FILE] [--doc docs/accuracy.md]

``--before`` is an earlier run's result file, shown beside this one: the corpus scored by a
ddiag that had no rule written with those logs in view is the out-of-sample figure. ``--doc``
writes the real-log section at the end of docs/accuracy.md (below the fault matrix, which
benchmarks/fault_matrix.py writes and keeps this section when it does).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from diag.analyze import analyze
from diag.verdict import CONFIDENCE, Basis

sys_path = str(Path(__file__).resolve().parent)
if sys_path not in sys.path:
    sys.path.insert(0, sys_path)
from emitter_coverage import COVERAGE_BEGIN  # noqa: E402
from fault_matrix import REAL_LOGS_MARK  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BINS = ((0.0, 0.5), (0.5, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01))


def corpus_verdicts(root: Path) -> list[dict]:
    out = []
    for case in sorted(p for p in root.iterdir() if (p / "truth.json").is_file()):
        truth = json.loads((case / "truth.json").read_text())
        out.append(_verdict("corpus", case.name, case / "log.txt",
                            truth["root_cause_category"], truth.get("culprit_rank")))
    return out


def case_verdicts(root: Path) -> list[dict]:
    out = []
    for case in sorted(p for p in root.iterdir() if (p / "expected.json").is_file()):
        want = json.loads((case / "expected.json").read_text())
        if want.get("category") is None:
            continue  # a healthy log: nothing to be right about
        out.append(_verdict("cases", case.name, case / "log.txt", want["category"],
                            want.get("culprit_rank")))
    return out


def _verdict(source: str, name: str, log: Path, category: str, rank: int | None) -> dict:
    findings = analyze(log).findings
    top = findings[0] if findings else None
    category_ok = top is not None and top.category.value == category
    right = category_ok and (rank is None or rank in top.culprit.ranks)
    return {"source": source, "case": name, "confidence": top.confidence if top else None,
            "basis": top.basis.name.lower() if top and top.basis is not None else None,
            "detector": top.detector if top else None, "right": right,
            "category_ok": category_ok, "has_rank": rank is not None}


def matrix_verdicts(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    out = []
    for cell in doc["cells"]:
        top = cell.get("top")
        if cell["fault"] == "healthy" or top is None:
            continue
        out.append({"source": "fault_matrix", "case": cell["cell"],
                    "confidence": top.get("confidence"), "basis": top.get("basis"),
                    "detector": top.get("detector"),
                    "right": bool(cell["category_ok"] and cell["culprit_ok"])})
    return out


def table(verdicts: list[dict]) -> list[dict]:
    rows = []
    for low, high in BINS:
        inside = [v for v in verdicts if v["confidence"] is not None
                  and low <= v["confidence"] < high]
        right = sum(v["right"] for v in inside)
        mean = sum(v["confidence"] for v in inside) / len(inside) if inside else None
        rows.append({"bin": f"{low:.1f}-{min(high, 1.0):.1f}", "n": len(inside), "right": right,
                     "accuracy": round(right / len(inside), 2) if inside else None,
                     "mean_confidence": round(mean, 2) if mean is not None else None})
    none = [v for v in verdicts if v["confidence"] is None]
    rows.append({"bin": "no finding", "n": len(none), "right": 0, "accuracy": None,
                 "mean_confidence": None})
    return rows


def by_basis(verdicts: list[dict]) -> list[dict]:
    """Accuracy per evidence class against the confidence the table gives it: the check
    that ``diag.verdict.CONFIDENCE`` is calibrated (the table's figures are set from it)."""
    rows = []
    for basis in sorted(Basis, reverse=True):
        name = basis.name.lower()
        inside = [v for v in verdicts if v.get("basis") == name]
        right = sum(v["right"] for v in inside)
        rows.append({"basis": name, "confidence": CONFIDENCE[basis], "n": len(inside),
                     "right": right,
                     "accuracy": round(right / len(inside), 2) if inside else None})
    return rows


def basis_markdown(by_source: dict[str, list[dict]]) -> str:
    lines = ["| basis | confidence | " + " | ".join(f"{s}: right/n" for s in by_source) +
             " | all (accuracy) |", "|---|---:|" + "---:|" * (len(by_source) + 1)]
    tables = {s: by_basis(v) for s, v in by_source.items()}
    for i, row in enumerate(by_basis([v for vs in by_source.values() for v in vs])):
        cells = [f"{tables[s][i]['right']}/{tables[s][i]['n']}" for s in by_source]
        acc = f" ({row['accuracy']:.0%})" if row["accuracy"] is not None else ""
        lines.append(f"| {row['basis']} | {row['confidence']:.2f} | " + " | ".join(cells) +
                     f" | {row['right']}/{row['n']}{acc} |")
    return "\n".join(lines)


def markdown(by_source: dict[str, list[dict]]) -> str:
    lines = ["| confidence | " + " | ".join(f"{s}: right/n" for s in by_source) + " | all: right/n "
             "(accuracy) | mean confidence |",
             "|---|" + "---:|" * (len(by_source) + 2)]
    tables = {s: table(v) for s, v in by_source.items()}
    total = table([v for vs in by_source.values() for v in vs])
    for i, row in enumerate(total):
        cells = [f"{tables[s][i]['right']}/{tables[s][i]['n']}" for s in by_source]
        acc = f" ({row['accuracy']:.0%})" if row["accuracy"] is not None else ""
        mean = f"{row['mean_confidence']:.2f}" if row["mean_confidence"] is not None else "-"
        lines.append(f"| {row['bin']} | " + " | ".join(cells) +
                     f" | {row['right']}/{row['n']}{acc} | {mean} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    parser.add_argument("--cases", type=Path, default=REPO / "tests" / "analyze" / "cases")
    parser.add_argument("--matrix", type=Path, default=None,
                        help="a fault-matrix result file (default: the newest one)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--held-out", type=Path, default=None,
                        help="real incidents in the corpus's layout that no rule was written "
                             "from (scored as their own source)")
    parser.add_argument("--note", default="", help="what the run is, stored in its file")
    parser.add_argument("--before", type=Path, default=None,
                        help="an earlier result file: its corpus table is shown as well")
    parser.add_argument("--doc", type=Path, default=None,
                        help="write the real-log section of this page (docs/accuracy.md)")
    args = parser.parse_args(argv)
    matrix = args.matrix or max((REPO / "benchmarks" / "results").glob("fault-matrix-*.json"))
    by_source = {"corpus": corpus_verdicts(args.corpus) if args.corpus.is_dir() else [],
                 "cases": case_verdicts(args.cases), "fault_matrix": matrix_verdicts(matrix)}
    if args.held_out:
        by_source["held_out"] = corpus_verdicts(args.held_out)
    today = datetime.date.today().isoformat()
    out = args.out or REPO / "benchmarks" / "results" / f"calibration-{today}.json"
    out.write_text(json.dumps({"format": "ddiag.calibration", "schema": 1, "date": today,
                               "note": args.note,
                               "matrix": matrix.name, "verdicts": by_source,
                               "bins": {s: table(v) for s, v in by_source.items()},
                               "by_basis": {s: by_basis(v) for s, v in by_source.items()}},
                              indent=1) + "\n")
    print(markdown(by_source))
    print()
    print(basis_markdown(by_source))
    misses = [v for vs in by_source.values() for v in vs if not v["right"]]
    for v in misses:
        print(f"miss: {v['source']} {v['case']}: confidence {v['confidence']} ({v['detector']})")
    print(f"written: {out}")
    if args.doc:
        before = json.loads(args.before.read_text()) if args.before else None
        write_doc(args.doc, by_source, today, before)
        print(f"written: {args.doc}")
    return 0


# What the corpus still shows ddiag does badly, and what no real log here has tested: kept by
# hand, with the figures, so the page says it beside the score.
KNOWN_GAPS = (
    "The development corpus is fitted: the rules of issue 20 were written with the first 33 "
    "logs in view (each derived from the emitting code and tested on logs written for the "
    "test, never keyed to one file), so those are an upper bound. The out-of-sample figures "
    "are the 'before' column (the first 33 scored by a ddiag never shaped on them: 18/33) and "
    "the 15 cases added in December 2026, scored before anyone looked: 4/15; with the "
    "emitter templates of issue 28 and the rules read from Open MPI's and torch's code, "
    "7/15 (test_corpus.py lists the 8 misses and what each log lacks).",
    "Most template rows (issue 28) met no real log yet: a message is matched wherever it "
    "appears, but whether its category is the right root cause of a whole incident is only "
    "checked on the corpus, the case folders and the fault matrix. Their confidence comes "
    "from their role (0.6 for an initiating failure, 0.4 for a cascade), not from a "
    "calibration.",
    "Confidence 0.7-0.8 was over-confident on unseen real logs (5 of 8 right before): the "
    "three misses there (a device-mapping rule, a generic NCCL CUDA failure, a hang inferred "
    "from one rank's silence) now have more specific rules, but other rules in that band "
    "have not met an unseen log yet.",
    "Thin evidence stays thin: a single watchdog line, an NCCL CUDA failure without an NCCL "
    "version, a paste cut before its exception line. The rules for them carry 0.55-0.7.",
    "NCCL and CUDA paths have never run on a GPU here: every NCCL signature is read from "
    "NCCL's source and tested on written lines, none on a live NCCL job.",
    "Unexplained logs: when errors are present and no rule explains them, the finding is "
    "`other` at confidence 0.2 with each rank's earliest error quoted; it is right only when "
    "the cause happens to be an 'other' one.",
)


def write_doc(path: Path, by_source: dict[str, list[dict]], today: str,
              before: dict | None) -> None:
    corpus = by_source["corpus"]
    ranked = [v for v in corpus if v.get("has_rank")]
    lines = [REAL_LOGS_MARK, "", "## Real logs: the incident corpus", "",
             f"Measured by `python benchmarks/calibration.py --doc docs/accuracy.md` on {today}: "
             f"`ddiag analyze` on each of the {len(corpus)} real incident logs in "
             "`shared/corpus` (pasted into public issue threads; labels from the threads), the "
             "top finding against the label. `shared/score_corpus.py` gives the same figure "
             "through the CLI.", "",
             f"- Top-1 category right: **{sum(v['category_ok'] for v in corpus)}/{len(corpus)}**.",
             f"- Culprit rank right where the thread named one: "
             f"**{sum(v['right'] for v in ranked)}/{len(ranked)}**."]
    if before:
        old = before["verdicts"]["corpus"]
        lines.append(f"- Out of sample ({before.get('note') or before.get('date')}): "
                     f"{sum(bool(v.get('category_ok', v['right'])) for v in old)}/{len(old)} "
                     f"right, {sum(v['confidence'] is None for v in old)} logs with no "
                     "finding at all.")
    lines += ["", "### Confidence against being right", "",
              "A verdict is right when the top finding's category is the label's and, where the "
              "label names a culprit rank, the finding names it.", ""]
    if before:
        lines += ["Out of sample (the corpus before its rules):", "",
                  markdown({"corpus (before)": before["verdicts"]["corpus"]}), ""]
    lines += ["Now (the corpus in sample; the hand-written cases; the fault matrix's stored "
              "cells):", "", markdown(by_source), "", "### What is still weak", ""]
    lines += [f"- {gap}" for gap in KNOWN_GAPS]
    old_text = path.read_text() if path.exists() else ""
    head = old_text[:old_text.find(REAL_LOGS_MARK)] if REAL_LOGS_MARK in old_text else old_text
    coverage = old_text[old_text.find(COVERAGE_BEGIN):] if COVERAGE_BEGIN in old_text else ""
    # hand-written figures on other real logs (scored once, not re-run here) are kept
    held = old_text.find(HELD_OUT)
    kept = old_text[held:old_text.find(COVERAGE_BEGIN) if coverage else len(old_text)] \
        if held >= 0 else ""
    path.write_text(head.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
                    + ("\n" + kept.rstrip("\n") + "\n" if kept else "")
                    + ("\n" + coverage if coverage else ""))


HELD_OUT = "<!-- held-out: written by hand; benchmarks/calibration.py keeps it -->"


if __name__ == "__main__":
    raise SystemExit(main())
