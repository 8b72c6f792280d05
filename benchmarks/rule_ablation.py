"""Which hand-written rules carry which verdicts? Each rule of the text-log detectors is
switched off in turn (it returns nothing) and every labelled input is analysed again: the
real incidents of ``shared/corpus`` and the case folders of ``tests/analyze/cases``. A rule
whose removal breaks one corpus case and nothing else is "right on exactly one development
log": the candidates for issue 28's rule admission (generalize it from its emitter's code,
find a second real source, or retire it).

    python benchmarks/rule_ablation.py [--corpus ../shared/corpus] [--also DIR] [--json FILE]

``--also DIR`` (repeatable) adds another folder of real incidents in the corpus's format
(``<case>/log.txt`` + ``truth.json``): a second real source for the rules it carries.

The rules are found in the detectors' own source: the names in their ``for rule in (...)``
tuples, so a new rule is ablated without editing this file.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import sys
from pathlib import Path

from diag.analyze import analyze
from diag.analyze import detectors
from diag.verdict import Severity

REPO = Path(__file__).resolve().parents[1]


def rules() -> list[tuple[object, str]]:
    """(detector module, rule name) for every name in a ``for rule in (...)`` tuple."""
    out = []
    for module in {fn.__module__: inspect.getmodule(fn) for fn in detectors.DETECTORS}.values():
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
                out += [(module, elt.id) for elt in node.iter.elts if isinstance(elt, ast.Name)]
    return sorted(set(out), key=lambda mr: (mr[0].__name__, mr[1]))


def labelled(corpus: Path, also: tuple[Path, ...] = ()
             ) -> list[tuple[str, str, Path, str | None, int | None]]:
    out = []
    for kind, folder in (("corpus", corpus), *(("real", a) for a in also)):
        for case in sorted(p for p in folder.iterdir() if (p / "truth.json").is_file()):
            t = json.loads((case / "truth.json").read_text())
            out.append((kind, case.name, case / "log.txt", t["root_cause_category"],
                        t.get("culprit_rank")))
    for case in sorted(p for p in (REPO / "tests/analyze/cases").iterdir()
                       if (p / "expected.json").is_file()):
        t = json.loads((case / "expected.json").read_text())
        out.append(("case", case.name, case / "log.txt", t["category"], t.get("culprit_rank")))
    return out


def right(path: Path, category: str | None, rank: int | None) -> bool:
    """The top finding is the label (and names its rank); a null label: no root cause."""
    findings = analyze(path).findings
    if category is None:
        return not [f for f in findings if f.root_cause and f.severity > Severity.INFO]
    top = findings[0] if findings else None
    return bool(top and top.category.value == category
                and (rank is None or rank in top.culprit.ranks))


def score(inputs: list) -> set[str]:
    return {f"{kind}:{name}" for kind, name, path, cat, rank in inputs if right(path, cat, rank)}


def ablate(inputs: list) -> tuple[set[str], dict[str, list[str]]]:
    """The inputs right with every rule, and per rule those that only it makes right."""
    base = score(inputs)
    carried = {}
    for module, name in rules():
        original = getattr(module, name)
        setattr(module, name, lambda *a, **k: [])
        try:
            carried[f"{module.__name__.rsplit('.', 1)[-1]}.{name}"] = sorted(base - score(inputs))
        finally:
            setattr(module, name, original)
    return base, carried


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus")
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="another folder of real incidents (log.txt + truth.json per case)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    inputs = labelled(a.corpus, tuple(a.also))
    base, carried = ablate(inputs)
    print(f"{len(base)}/{len(inputs)} inputs right with every rule; {len(carried)} rules")
    for rule, lost in sorted(carried.items(), key=lambda kv: (len(kv[1]), kv[0])):
        corpus = [x for x in lost if x.startswith("corpus:")]
        real = [x for x in lost if x.startswith("real:")]
        single = " <- one development log" if len(corpus) + len(real) == 1 and \
            len(lost) <= 2 else ""
        print(f"{rule:40} corpus {len(corpus)}  real {len(real)}  "
              f"cases {len(lost) - len(corpus) - len(real)}{single}")
    if a.json:
        a.json.write_text(json.dumps({"right": sorted(base), "carried": carried}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
