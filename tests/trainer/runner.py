"""Launch the reference trainer as real ranks (torchrun, or alone) and read what it left.

Every launch checks afterwards that no process of its run is left: the run directory's
path is on the command line of torchrun, of every rank and of every forked loader
worker, so /proc finds them all.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from diag.format.events import RankLog, read_run_events
from tests.util import free_port, quiet_env

STRAY_WAIT_S = 20.0  # a killed rank's loader workers notice within ~5 s


@dataclass
class Launch:
    """One finished run: exit status, output, and the run directory."""

    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    @property
    def summary(self) -> dict:
        lines = [ln for ln in self.stdout.splitlines() if ln.startswith("{")]
        assert lines, f"no JSON summary on stdout; stderr:\n{self.stderr[-3000:]}"
        return json.loads(lines[-1])

    def logs(self) -> dict[int, RankLog]:
        logs, problems = read_run_events(self.run_dir)
        assert not [p for p in problems if "torn" not in p.message], problems
        return logs

    def why(self) -> str:
        """The ranks' own error lines (torchrun's summary hides them), then the tail."""
        errors = [ln for ln in self.stderr.splitlines()
                  if ln.startswith("[rank") and ("Error" in ln or "Exception" in ln)]
        return "\n".join([*errors[-20:], "...", self.stderr[-2000:]])

    def fr(self, rank: int) -> dict:
        return json.loads((self.run_dir / "fr" / f"rank{rank:05d}.json").read_text())


def trainer_cmd(nproc: int, run_dir: Path, *args: str) -> list[str]:
    """torchrun with ``nproc`` ranks; ``nproc=0`` runs the trainer alone (no launcher)."""
    trainer = ["-m", "reference_trainer", "--out", str(run_dir), *args]
    if nproc == 0:
        return [sys.executable, *trainer]
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}", *trainer]


def launch(nproc: int, run_dir: Path, *args: str, timeout: float = 150,
           env: dict | None = None) -> Launch:
    """Run to the end (or kill the whole session at ``timeout``); retried once when the
    free port we picked was taken by someone else before torchrun bound it."""
    result = _launch_once(nproc, run_dir, args, timeout, env)
    if result.returncode != 0 and "Address already in use" in result.stderr:
        shutil.rmtree(run_dir, ignore_errors=True)
        result = _launch_once(nproc, run_dir, args, timeout, env)
    return result


def _launch_once(nproc: int, run_dir: Path, args: tuple[str, ...], timeout: float,
                 env: dict | None) -> Launch:
    proc = subprocess.Popen(trainer_cmd(nproc, run_dir, *args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=quiet_env(**(env or {})))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout}s\n{out[-2000:]}\n{err[-4000:]}")
    finally:
        assert_no_strays(run_dir)
    return Launch(proc.returncode, out, err, Path(run_dir))


def strays(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def assert_no_strays(run_dir: Path, wait_s: float = STRAY_WAIT_S) -> None:
    """Wait for the run's processes to go; kill and fail if any outlive ``wait_s``."""
    marker = str(run_dir)
    deadline = time.monotonic() + wait_s
    while (left := strays(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # ours: its command line names our run directory
    assert not left, f"processes of {marker} still running after {wait_s}s: {left}"


def last_collective(log: RankLog, op: str | None = None) -> dict:
    records = [c for c in log.of_kind("collective") if op is None or c["op"] == op]
    assert records, f"rank {log.rank} recorded no {op or 'collective'}"
    return records[-1]


def steps_of(log: RankLog) -> dict[int, dict]:
    return {s["step"]: s for s in log.of_kind("step")}


def fr_entries(fr: dict, name: str | None = None) -> list[dict]:
    """Flight Recorder entries, optionally those whose profiling_name ends in ``name``."""
    return [e for e in fr["entries"] if name is None or e["profiling_name"].endswith(name)]


def top_finding(run_dir: Path) -> dict | None:
    """``ddiag analyze``'s first finding on the run directory, as its JSON."""
    from diag.analyze import analyze

    result = analyze(run_dir)
    assert result.detector_errors == [], result.detector_errors
    return result.findings[0].to_json() if result.findings else None


def assert_verdict(run: Launch, category: str, ranks: list[int]) -> None:
    """analyze names the fault's category and the injected rank first."""
    top = top_finding(run.run_dir)
    assert top is not None, "analyze found nothing"
    assert (top["category"], top["culprit"]["ranks"]) == (category, ranks), top["title"]
