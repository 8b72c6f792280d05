"""Helpers for lab tests: the real CLI, srun with the lab's environment, no orphans."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.util import run

BIN = Path(sys.executable).parent
TORCHRUN = BIN / "torchrun"
SESSION_LAB = "ddiag-test"
SESSION_NODES = 4
SLOW_NODE, SLOW_RATE, SLOW_MBIT = "node4", "200mbit", 200.0


def ddiag_argv() -> list[str]:
    script = BIN / "ddiag"
    return [str(script)] if script.exists() else [sys.executable, "-m", "diag.cli"]


def lab_cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return run([*ddiag_argv(), "lab", *args], timeout=timeout)


def lab_json(*args: str, timeout: float = 90) -> dict:
    """``ddiag lab ARGS --json``: asserts exit 0 and returns the parsed stdout."""
    res = lab_cli(*args, "--json", timeout=timeout)
    assert res.returncode == 0, f"ddiag lab {' '.join(args)}: rc={res.returncode}\n{res.stderr}"
    return json.loads(res.stdout)


def lab_env(name: str) -> dict[str, str]:
    """The environment a shell has after ``eval "$(ddiag lab env)"``."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
            **lab_json("env", "--name", name)}


def srun(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return run([shutil.which("srun") or "srun", "--time=3", *args], timeout=timeout, env=env)


def in_node(netns: str, *argv: str) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def lab_leftovers(state: dict) -> list[str]:
    """Anything of the lab (by its prefix, pids and state dir) still on the machine."""
    from diag.lab import procs

    prefix = state["prefix"] + "-"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    pgrep = subprocess.run(["pgrep", "-a", "-f", state["state_dir"] + "/"],
                           capture_output=True, text=True).stdout
    left = [f"netns {line}" for line in netns.splitlines() if line.startswith(prefix)]
    left += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
             if line.split(":")[1].strip().startswith(prefix)]
    left += [f"process {line}" for line in pgrep.splitlines()]
    left += [f"pid {pid} ({d})" for d, pid in state["pids"].items() if procs.alive(pid)]
    return left + ([state["state_dir"]] if Path(state["state_dir"]).exists() else [])
