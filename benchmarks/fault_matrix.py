"""The fault matrix: every injected fault, on the lab under Slurm, judged by ddiag's verdict.

Each cell is one ``ddiag scale-test --launcher slurm --stages N`` of the reference trainer
in one mode with one fault: a trainer fault (``--inject``), a lab fault (a throttled link,
a port dropped by a firewall rule) or an environment fault (``--env-on``), or none (the
healthy baseline). The cell is right when the stage's top finding above info has the
fault's category and names its culprit (rank, node, link or variable); a healthy cell is
right when nothing above info is found at all. The time to verdict is the scale-test's
wall time, from launch to report.

    python benchmarks/fault_matrix.py                   # the full matrix on a fresh lab
    python benchmarks/fault_matrix.py --modes ddp --nodes 2 --faults hang,nan
    python benchmarks/fault_matrix.py --lab ddiag-dev   # on a lab that is already up

Needs root and the lab's prerequisites (``ddiag lab``). Writes every cell's run directory
under --out, a JSON of all cells, and (with --doc) the table in docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from diag.format import schema  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODES = ("ddp", "zero2", "pipeline")
NODE_COUNTS = (2, 4)
NPROC = 2
STEPS = 16
FAULT_STEP = 8          # one-shot faults fire here, after warm-up and a few measured steps
SLOW_RATE = "200mbit"
BLOCKED_PORT = 29555
TRAINER_FAULTS = {      # --inject kind -> the category ddiag must name
    "slow_compute": "straggler", "slow_data": "straggler", "hang": "rank_hang",
    "extra_collective": "collective_mismatch", "shape_mismatch": "shape_mismatch",
    "nan": "nan_inf", "crash": "other", "oom": "oom",
}
FAULTS = ("healthy", *TRAINER_FAULTS, "slow_link", "env_iface", "env_skew", "env_port")
SKEW_VAR, SKEW_VALUE = "NCCL_ALGO", "Tree"


@dataclass(frozen=True)
class Cell:
    fault: str
    mode: str
    nodes: int

    @property
    def world(self) -> int:
        return self.nodes * NPROC

    @property
    def rank(self) -> int:
        """The misbehaving rank: the last node's second rank, never the store's host."""
        return self.world - 1

    @property
    def node(self) -> str:
        """The misconfigured or throttled node: the last one of the stage."""
        return f"node{self.nodes}"

    @property
    def name(self) -> str:
        return f"{self.fault}-{self.mode}-{self.nodes}n"


@dataclass
class Outcome:
    cell: Cell
    category_ok: bool
    culprit_ok: bool
    top: dict | None
    false_findings: int
    """Findings above info beyond the expected one (all of them on a healthy cell)."""
    seconds: float
    status: str
    run_dir: str
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.category_ok and self.culprit_ok

    def to_json(self) -> dict:
        return {**asdict(self.cell), "cell": self.cell.name, "ok": self.ok,
                "category_ok": self.category_ok, "culprit_ok": self.culprit_ok,
                "top": self.top, "false_findings": self.false_findings,
                "seconds": round(self.seconds, 1), "status": self.status,
                "run_dir": self.run_dir, "notes": self.notes}


# --- what each cell runs ---------------------------------------------------------------------

def scale_test_args(cell: Cell) -> list[str]:
    args = ["--launcher", "slurm", "--stages", str(cell.nodes), "--nproc-per-node", str(NPROC),
            "--mode", cell.mode, "--steps", str(STEPS), "--stall", "10",
            "--stage-timeout", "240"]
    if cell.fault in TRAINER_FAULTS:
        step = "" if cell.fault in ("slow_compute", "slow_data") else f":step={FAULT_STEP}"
        args += ["--inject", f"{cell.fault}:rank={cell.rank}{step}"]
    elif cell.fault == "env_iface":
        args += ["--env-on", f"{cell.node}:GLOO_SOCKET_IFNAME=eth9"]
    elif cell.fault == "env_skew":
        args += ["--env-on", f"{cell.node}:{SKEW_VAR}={SKEW_VALUE}"]
    elif cell.fault == "env_port":
        args += ["--master-port", str(BLOCKED_PORT)]
    return args


def lab_faults(cell: Cell) -> tuple[dict[str, str], dict[str, int]]:
    """(node -> rate, node -> blocked port) the lab must have for this cell."""
    shaped = {cell.node: SLOW_RATE} if cell.fault == "slow_link" else {}
    blocked = {"node1": BLOCKED_PORT} if cell.fault == "env_port" else {}
    return shaped, blocked


# --- judging ------------------------------------------------------------------------------------

def expected_category(cell: Cell) -> str | None:
    return {"healthy": None, "slow_link": "slow_link", "env_iface": "wrong_interface",
            "env_skew": "env_misconfig", "env_port": "network_unreachable",
            }.get(cell.fault, TRAINER_FAULTS.get(cell.fault))


def culprit_ok(cell: Cell, culprit: dict) -> bool:
    hosts, link = set(culprit.get("hosts") or ()), culprit.get("link")
    if cell.fault in TRAINER_FAULTS:
        return list(culprit.get("ranks") or ()) == [cell.rank]
    if cell.fault == "slow_link":  # two nodes: the one link between them; more: the node
        if cell.nodes == 2:
            return bool(link) and set(link) == {"node1", "node2"}
        return hosts == {cell.node}
    if cell.fault == "env_iface":
        return hosts == {cell.node} and culprit.get("env_var") == "GLOO_SOCKET_IFNAME"
    if cell.fault == "env_skew":
        return culprit.get("env_var") == SKEW_VAR and hosts <= {cell.node}
    if cell.fault == "env_port":
        return culprit.get("env_var") == "MASTER_PORT"
    return True


def judge(cell: Cell, doc: dict | None, seconds: float, run_dir: Path) -> Outcome:
    """The scale-test's JSON against what the cell injected."""
    if not doc or not doc.get("results"):
        return Outcome(cell, False, False, None, 0, seconds, "no report", str(run_dir),
                       ["scale-test printed no report"])
    stage = doc["results"][0]
    above = [f for f in stage.get("findings", []) if f.get("severity") != "info"]
    want = expected_category(cell)
    if want is None:
        return Outcome(cell, not above, not above, above[0] if above else None, len(above),
                       seconds, stage["status"], str(run_dir))
    top = above[0] if above else None
    cat_ok = bool(top) and top["category"] == want
    cul_ok = cat_ok and culprit_ok(cell, top["culprit"])
    # one incident, one root cause (issue 29): any other root cause above info is false
    false = sum(1 for f in above[1:] if f.get("root_cause", True))
    return Outcome(cell, cat_ok, cul_ok, top, false, seconds, stage["status"], str(run_dir))


# --- running ------------------------------------------------------------------------------------

def ddiag(*args: str, env: dict | None = None, timeout: float = 900
          ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diag.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=ROOT)


class Lab:
    """The lab the matrix runs on, through the real ``ddiag lab`` CLI. It remembers the
    throttles and blocked ports it found, and puts them back."""

    def __init__(self, name: str):
        self.name = name
        status = self._json("status")
        if not status.get("up"):
            raise SystemExit(f"lab {name} is not up: start it with 'ddiag lab up --name {name}'")
        self.nodes = [n["name"] for n in status["nodes"]]
        self.found = ({n["name"]: n["slow_link"] for n in status["nodes"] if n["slow_link"]},
                      {n["name"]: p for n in status["nodes"] for p in n.get("blocked_ports", [])})
        self.shaped, self.blocked = dict(self.found[0]), dict(self.found[1])
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                    "GLOO_SOCKET_IFNAME": "eth0", **self._json("env")}

    def _json(self, *args: str) -> dict:
        res = ddiag("lab", *args, "--name", self.name, "--json", timeout=120)
        if res.returncode != 0:
            raise SystemExit(f"ddiag lab {' '.join(args)} --name {self.name}: {res.stderr}")
        return json.loads(res.stdout)

    def set(self, shaped: dict[str, str], blocked: dict[str, int]) -> None:
        for node in self.nodes:
            if self.shaped.get(node) != shaped.get(node):
                self._json("shape", f"{node}={shaped.get(node, 'off')}")
            old, new = self.blocked.get(node), blocked.get(node)
            if old and old != new:
                self._json("block-port", f"{node}:{old}", "--unblock")
            if new and old != new:
                self._json("block-port", f"{node}:{new}")
        self.shaped, self.blocked = dict(shaped), dict(blocked)

    def restore(self) -> None:
        self.set(*self.found)


def run_cell(cell: Cell, lab: Lab, out: Path) -> Outcome:
    lab.set(*lab_faults(cell))
    run_dir = out / cell.name
    start = time.monotonic()
    res = ddiag("scale-test", *scale_test_args(cell), "--out", str(run_dir), "--json",
                env=lab.env, timeout=600)
    seconds = time.monotonic() - start
    try:
        doc = json.loads(res.stdout)
    except ValueError:
        doc = None
    outcome = judge(cell, doc, seconds, run_dir)
    if doc is None:
        outcome.notes.append(res.stderr.strip()[-300:])
    left = _leftovers(run_dir)
    if left:
        outcome.notes.append(f"processes left: {left}")
    return outcome


def _leftovers(run_dir: Path) -> list[int]:
    found = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def cells(modes=MODES, node_counts=NODE_COUNTS, faults=FAULTS) -> list[Cell]:
    return [Cell(f, m, n) for n in node_counts for f in faults for m in modes]



# --- reporting ----------------------------------------------------------------------------------

def table(outcomes: list[Outcome]) -> str:
    lines = ["| fault | mode | nodes | category | culprit | false findings | verdict in | top finding |",
             "|---|---|---:|:---:|:---:|---:|---:|---|"]
    for o in outcomes:
        title = (o.top or {}).get("title", "none above info")[:110].replace("|", "/")
        lines.append(f"| {o.cell.fault} | {o.cell.mode} | {o.cell.nodes} | "
                     f"{_mark(o.category_ok)} | {_mark(o.culprit_ok)} | {o.false_findings} | "
                     f"{o.seconds:.0f} s | {title} |")
    return "\n".join(lines)


def _mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


def headline(outcomes: list[Outcome]) -> dict:
    faulty = [o for o in outcomes if o.cell.fault != "healthy"]
    healthy = [o for o in outcomes if o.cell.fault == "healthy"]
    secs = sorted(o.seconds for o in outcomes)
    return {"cells": len(outcomes),
            "category_right": sum(o.category_ok for o in faulty), "faulty_cells": len(faulty),
            "culprit_right": sum(o.culprit_ok for o in faulty),
            "healthy_cells": len(healthy),
            "healthy_false_findings": sum(o.false_findings for o in healthy),
            "median_seconds": secs[len(secs) // 2] if secs else None,
            "max_seconds": secs[-1] if secs else None}


REAL_LOGS_MARK = "<!-- real-logs: written by benchmarks/calibration.py -->"


def write_doc(path: Path, outcomes: list[Outcome], wall_s: float,
              rerun: list[str] | None = None) -> None:
    h = headline(outcomes)
    again = (f"\n{len(rerun)} cells were run again after the detector fixes they showed "
             f"were needed (the table holds the re-run): {', '.join(sorted(rerun))}. "
             "A table merged from several runs spans several commits: one pass of the "
             "whole matrix (`python benchmarks/fault_matrix.py --doc docs/accuracy.md`) "
             "measures one.\n" if rerun else "")
    text = f"""# Accuracy: the fault matrix

Measured by `python benchmarks/fault_matrix.py` on the lab (4 nodes in network namespaces
under a real Slurm, {NPROC} ranks per node, gloo on CPU) on {time.strftime('%Y-%m-%d')}.
Each cell is one `ddiag scale-test --launcher slurm --stages N` of the reference trainer
({STEPS} steps) with one fault; its verdict is the stage's top finding above info.
The runs behind this table took {wall_s / 60:.0f} min in all.
{again}
- Top-1 category right: **{h['category_right']}/{h['faulty_cells']}** faulty cells.
- Culprit right (rank, node, link or variable): **{h['culprit_right']}/{h['faulty_cells']}**.
- Healthy baselines: **{h['healthy_false_findings']}** findings above info over
  {h['healthy_cells']} runs.
- Time to verdict (launch to report, including check-env and the probes): median
  {h['median_seconds']:.0f} s, max {h['max_seconds']:.0f} s.

Faults: trainer faults are injected on rank world-1 (the last node's second rank), one-shot
ones at step {FAULT_STEP}; the slow link throttles the stage's last node to {SLOW_RATE}
with tbf; env_iface sets `GLOO_SOCKET_IFNAME=eth9` on the last node; env_skew sets
`{SKEW_VAR}={SKEW_VALUE}` on the last node only; env_port blocks MASTER_PORT
{BLOCKED_PORT} on node1 with a firewall DROP rule. On two nodes the slow link's culprit is
the one link between them; on four it is the throttled node.

{table(outcomes)}

A CI subset (`tests/lab/test_fault_matrix_lab.py`: one cell per fault kind and a healthy
baseline, on two nodes, spread over the three modes) runs in every `make test`. The
cells' JSON is kept in `benchmarks/results/`; `--from FILE` (repeatable) rebuilds this
page from it without running anything.
"""
    # the real-log section below the marker is benchmarks/calibration.py's: kept as it is
    old = path.read_text() if path.exists() else ""
    kept = old[old.find(REAL_LOGS_MARK):] if REAL_LOGS_MARK in old else ""
    path.write_text(text + ("\n" + kept if kept else ""))


def load_outcomes(path: Path) -> tuple[list[Outcome], float]:
    """The cells of an earlier run's fault_matrix.json, and its wall time."""
    doc = json.loads(path.read_text())
    schema.check(doc, schema.FAULT_MATRIX, str(path))
    cells = [Outcome(Cell(c["fault"], c["mode"], c["nodes"]), c["category_ok"],
                     c["culprit_ok"], c["top"], c["false_findings"], c["seconds"], c["status"],
                     c["run_dir"], c.get("notes", [])) for c in doc["cells"]]
    return cells, doc["seconds"]


def report_only(paths: list[Path], doc: Path | None) -> int:
    """--from: one table over earlier runs (e.g. the 2-node and the 4-node halves)."""
    by_cell: dict[str, Outcome] = {}
    rerun: list[str] = []
    wall = 0.0
    for path in paths:  # a later run's cell replaces an earlier one's (a re-run after a fix)
        loaded, seconds = load_outcomes(path)
        wall += seconds
        for o in loaded:
            if o.cell.name in by_cell:
                rerun.append(o.cell.name)
            by_cell[o.cell.name] = o
    order = {c.name: i for i, c in enumerate(cells())}
    outcomes = sorted(by_cell.values(), key=lambda o: order.get(o.cell.name, len(order)))
    if doc:
        write_doc(doc, outcomes, wall, rerun)
    print(table(outcomes))
    print(json.dumps(headline(outcomes)), file=sys.stderr)
    return 0 if all(o.ok for o in outcomes) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--nodes", default=",".join(map(str, NODE_COUNTS)))
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--lab", default=None, help="use this running lab (default: bring "
                        "up a 4-node lab named 'matrix' and take it down after)")
    parser.add_argument("--out", type=Path, default=Path(f"runs/fault-matrix-"
                                                         f"{time.strftime('%Y%m%d-%H%M%S')}"))
    parser.add_argument("--doc", type=Path, default=None, help="write the table here "
                        "(e.g. docs/accuracy.md)")
    parser.add_argument("--json", action="store_true", help="print all cells as JSON")
    parser.add_argument("--from", dest="sources", type=Path, action="append", default=[],
                        help="run nothing: report the cells of earlier runs' "
                             "fault_matrix.json (repeatable)")
    args = parser.parse_args(argv)
    if args.sources:
        return report_only(args.sources, args.doc)
    faults = args.faults.split(",")
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        parser.error(f"--faults: unknown {', '.join(unknown)}; choose from {', '.join(FAULTS)}")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} exists and is not empty; pass a new directory")
    todo = cells(args.modes.split(","), [int(n) for n in args.nodes.split(",")], faults)
    name = args.lab or "matrix"
    if not args.lab:
        up = ddiag("lab", "up", "--name", name, "--nodes", str(max(c.nodes for c in todo)),
                   "--json", timeout=180)
        if up.returncode != 0:
            raise SystemExit(f"ddiag lab up: {up.stderr}")
    start, outcomes = time.monotonic(), []
    lab = Lab(name)
    try:
        for i, cell in enumerate(todo, 1):
            print(f"[{i}/{len(todo)}] {cell.name} ...", end=" ", file=sys.stderr, flush=True)
            outcomes.append(run_cell(cell, lab, args.out))
            o = outcomes[-1]
            print(f"{'ok' if o.ok else 'WRONG'} in {o.seconds:.0f} s: "
                  f"{(o.top or {}).get('title', 'nothing above info')[:120]}",
                  file=sys.stderr, flush=True)
    finally:
        lab.restore()
        if not args.lab:
            ddiag("lab", "down", "--name", name, timeout=180)
    wall = time.monotonic() - start
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fault_matrix.json").write_text(json.dumps(
        {**schema.stamp(schema.FAULT_MATRIX), "headline": headline(outcomes),
         "seconds": round(wall, 1), "cells": [o.to_json() for o in outcomes]}, indent=1))
    if args.doc:
        write_doc(args.doc, outcomes, wall)
    print(json.dumps([o.to_json() for o in outcomes], indent=1) if args.json
          else table(outcomes))
    print(json.dumps(headline(outcomes)), file=sys.stderr)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
