"""Steps per second of the reference trainer, per mode, at world sizes 1 and 2 (gloo, CPU).

Each cell is the best of ``--repeats`` real launches (torchrun for 2 ranks, the trainer
alone for 1) of the default model: other load on a shared machine only ever slows a run
down, so the fastest is the least disturbed. The trainer times the steps after the
first (warm-up) one, on rank 0, with ddiag instrumentation on, as every run has it.
Pipeline at world size 1 is one stage (--pp 1); at 2, two stages.

    python benchmarks/trainer_speed.py [--steps 60] [--repeats 3] [--modes ddp,...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

MODES = ("ddp", "zero1", "zero2", "zero3", "pipeline")
WORLD_SIZES = (1, 2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def command(mode: str, world_size: int, steps: int, out: str) -> list[str]:
    args = ["-m", "reference_trainer", "--mode", mode, "--steps", str(steps),
            "--out", out, "--json"]
    if mode == "pipeline":
        args += ["--pp", str(world_size), "--microbatches", "2"]
    if world_size == 1:
        return [sys.executable, *args]
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world_size}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}", *args]


def measure(mode: str, world_size: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="trainer-speed-") as tmp:
        done = subprocess.run(command(mode, world_size, steps, os.path.join(tmp, "run")),
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{mode} at world size {world_size} failed:\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return {"mode": mode, "world_size": world_size, "steps_per_s": summary["steps_per_s"],
            "global_batch": summary["global_batch"], "final_loss": summary["final_loss"]}


def table(rows: list[dict]) -> str:
    lines = ["| mode | steps/s, 1 rank | steps/s, 2 ranks | samples/s, 2 ranks |",
             "|---|---|---|---|"]
    for mode in dict.fromkeys(r["mode"] for r in rows):
        cell = {r["world_size"]: r for r in rows if r["mode"] == mode}
        two = cell.get(2)
        lines.append(f"| {mode} | {cell[1]['steps_per_s']:.1f} | "
                     f"{two['steps_per_s']:.1f} | {two['steps_per_s'] * two['global_batch']:.0f} |"
                     if two and 1 in cell else f"| {mode} | ? | ? | ? |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="steps per launch")
    p.add_argument("--repeats", type=int, default=3, help="launches per cell; the best counts")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    p.add_argument("--json", action="store_true", help="one JSON line per cell instead")
    args = p.parse_args()
    rows = []
    for mode in args.modes.split(","):
        for world_size in WORLD_SIZES:
            tries = [measure(mode, world_size, args.steps) for _ in range(args.repeats)]
            rows.append(max(tries, key=lambda r: r["steps_per_s"]))
            print(f"{mode} x{world_size}: {rows[-1]['steps_per_s']} steps/s", file=sys.stderr)
    print("\n".join(json.dumps(r) for r in rows) if args.json else table(rows))


if __name__ == "__main__":
    main()
