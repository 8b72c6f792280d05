"""Helpers for tests that start real ranks: free ports, torchrun, and no orphans."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "decorated_ddp.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(nproc: int, script: str | Path, *args: str, module: bool = False) -> list[str]:
    target = ["-m", str(script)] if module else [str(script)]
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}", *target, *args]


def quiet_env(**extra: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.update(extra)
    return env


def run(cmd: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run to completion; a timeout kills the whole process group, never leaves orphans."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=kw.pop("env", quiet_env()), **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout}s: {cmd}\n{out[-3000:]}\n{err[-3000:]}")
    except BaseException:  # Ctrl-C, SIGTERM: srun ignores SIGTERM once its lab is gone
        os.killpg(proc.pid, 9)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def pids_alive(pids) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat").read_text().split()
            if stat[2] != "Z":
                alive.append(pid)
        except (ProcessLookupError, FileNotFoundError):
            pass
    return alive


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a launcher and every process under it: torchrun's workers run in sessions
    of their own, so killing the launcher's group alone would orphan them."""
    from diag.watch.discover import descendants

    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    proc.wait()
