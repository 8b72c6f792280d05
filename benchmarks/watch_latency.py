"""Time from a hang's onset to ``ddiag watch`` naming the rank, over repeated trials.

Each trial starts a 2-rank gloo DDP job (tests/programs/hang_ddp.py) in which rank 1
blocks in its data loading at step 40, runs ``ddiag watch --stall S --kill`` beside it,
and measures the alarm time minus the onset (when rank 1 entered the blocking span,
from its heartbeat).

    python benchmarks/watch_latency.py [--trials 10] [--stall 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.util import quiet_env, run, torchrun_cmd  # noqa: E402

HANG = REPO / "tests" / "programs" / "hang_ddp.py"


def trial(stall: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        job = subprocess.Popen(torchrun_cmd(2, HANG, "--out", str(out), "--hang-rank", "1",
                                            "--hang-step", "40"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=quiet_env(), start_new_session=True)
        try:
            res = run([sys.executable, "-m", "diag.cli", "watch", str(out), "--stall", str(stall),
                       "--kill", "--timeout", "180", "--json"], timeout=240)
        finally:
            job.kill()
            job.wait()
        doc = json.loads(res.stdout)
        beat = json.loads((out / "heartbeat" / "rank00001.json").read_text())
        onset = beat["span"]["since"]
        return {"named": doc["alarm"]["laggards"] if doc["alarm"] else None,
                "verdict_ranks": (doc["verdict"] or {}).get("culprit", {}).get("ranks"),
                "alarm_s": round(doc["alarm"]["detected_at"] - onset, 2) if doc["alarm"] else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--stall", type=float, default=5.0)
    args = p.parse_args()
    results = []
    for i in range(args.trials):
        results.append(trial(args.stall))
        print(f"trial {i + 1}: {results[-1]}", file=sys.stderr, flush=True)
    times = [r["alarm_s"] for r in results if r["alarm_s"] is not None]
    summary = {"trials": args.trials, "stall_s": args.stall,
               "named_right": sum(r["named"] == [1] and r["verdict_ranks"] == [1] for r in results),
               "median_s": statistics.median(times) if times else None,
               "max_s": max(times) if times else None}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
