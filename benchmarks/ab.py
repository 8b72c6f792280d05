"""One ddiag command, two versions of ddiag, side by side in one run: the ratio is what
counts on a noisy machine. The versions alternate (A B B A A B ...), each run in its own
process; memory is the peak PSS of that process and any workers it starts together
(``proctree.py``).

    git worktree add /tmp/base <rev>
    python benchmarks/ab.py --base /tmp/base --runs 3 -- analyze /tmp/run --json

``--base`` is a checkout of the other version (PYTHONPATH points the child at it); the
current one is this checkout. Prints median wall time and peak RSS per version and their
ratios; exits 1 if the two versions' outputs differ (``--json`` output is compared with
its timing fields removed), so a speed change that changes the verdict shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from proctree import measure  # noqa: E402

RUNNER = "import sys; from diag.cli import main; sys.argv = ['ddiag'] + sys.argv[1:]; main()"
_TIMING_KEYS = ("seconds",)


def one(root: Path, args: list[str]) -> tuple[float, int, str]:
    # cwd is the checkout itself: "python -c" puts the cwd first on sys.path, so running from
    # the other checkout would import that one's ddiag whatever PYTHONPATH says
    env = {**os.environ, "PYTHONPATH": str(root)}
    args = [str(Path(a).resolve()) if not a.startswith("-") and Path(a).exists() else a
            for a in args]
    m = measure([sys.executable, "-c", RUNNER, *args], env=env, timeout=3600, cwd=root)
    return m.wall_s, m.peak_mb * 1024, _comparable(m.stdout)


def _comparable(stdout: str) -> str:
    try:
        doc = json.loads(stdout)
    except ValueError:
        return stdout
    if isinstance(doc, dict):
        for key in _TIMING_KEYS:
            doc.pop(key, None)
    return json.dumps(doc, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, required=True, help="checkout of the other version")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then the ddiag arguments")
    a = p.parse_args(argv)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    sides = {"base": a.base.resolve(), "this": REPO}
    for name, root in sides.items():
        probe = subprocess.run([sys.executable, "-c", "import diag; print(diag.__file__)"],
                               capture_output=True, text=True, cwd=root,
                               env={**os.environ, "PYTHONPATH": str(root)})
        print(f"{name}: {probe.stdout.strip()}")
    got: dict[str, list] = {name: [] for name in sides}
    for i in range(a.runs):
        order = ("base", "this") if i % 2 == 0 else ("this", "base")
        for name in order:
            got[name].append(one(sides[name], args))
            wall, peak, _ = got[name][-1]
            print(f"run {i} {name}: {wall:.2f} s, {peak / 1024:.0f} MB", flush=True)
    med = {n: (statistics.median(w for w, _, _ in r), statistics.median(m for _, m, _ in r))
           for n, r in got.items()}
    print(f"median base {med['base'][0]:.2f} s {med['base'][1] / 1024:.0f} MB; this "
          f"{med['this'][0]:.2f} s {med['this'][1] / 1024:.0f} MB; time ratio this/base "
          f"{med['this'][0] / med['base'][0]:.3f}, memory ratio "
          f"{med['this'][1] / max(med['base'][1], 1):.3f}")
    same = {r[2] for r in got["base"]} == {r[2] for r in got["this"]}
    print("outputs: " + ("identical" if same else "DIFFER"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
