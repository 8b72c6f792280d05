"""Where ranks come from: the job we already run in (torchrun or srun), or one we start
with the standard launchers (torchrun on this host; srun with one torchrun per node).

Used by ``ddiag probe``, ``ddiag check-env --all-ranks`` and ``ddiag scale-test``; ``stop``
is how every ddiag command ends processes (SIGTERM, a grace period, then SIGKILL).
Nothing here imports torch.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

LAUNCHERS = ("local", "slurm")
"""The launchers ddiag starts ranks with: ``local`` is torchrun on this host, ``slurm`` is
srun with one torchrun per node."""
GROUP_TIMEOUT_S = 10.0
"""How long ranks wait for each other to form a process group: short, because a group
that has not formed in seconds is broken (the default of 30 minutes hides that)."""


class LaunchError(ValueError):
    """A launch request that cannot work, with what to change."""


@dataclass(frozen=True)
class JobEnv:
    """This process's place in a running job, as its launcher told it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str
    """torchrun (RANK/WORLD_SIZE set) or srun (SLURM_PROCID/SLURM_NTASKS only)."""

    @property
    def rendezvous_id(self) -> str:
        """The rendezvous store's host-port: a name every rank of the job shares."""
        return f"{self.master_addr}-{self.master_port}"

    @property
    def init_method(self) -> str:
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    value = env.get(key, "").strip()
    if value.isdigit():
        return int(value)
    if default is None:
        raise LaunchError(f"{key} must be a non-negative integer, got: {value!r}")
    return default


def job_env(env: Mapping[str, str] | None = None) -> JobEnv | None:
    """The job this process runs in, or None when it was started by hand."""
    env = os.environ if env is None else env
    if env.get("RANK") and env.get("WORLD_SIZE"):
        return _torchrun_env(env)
    if env.get("SLURM_PROCID") and env.get("SLURM_NTASKS"):
        return _srun_env(env)
    return None


def _torchrun_env(env: Mapping[str, str]) -> JobEnv:
    if not env.get("MASTER_ADDR") or not env.get("MASTER_PORT"):
        raise LaunchError("RANK and WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT are not; "
                          "launch with torchrun, or export both")
    world = _int(env, "WORLD_SIZE")
    return JobEnv(_int(env, "RANK"), world, _int(env, "LOCAL_RANK", 0),
                  _int(env, "LOCAL_WORLD_SIZE", world), env["MASTER_ADDR"],
                  _int(env, "MASTER_PORT"), "torchrun")


def _srun_env(env: Mapping[str, str]) -> JobEnv:
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")
    master = env.get("MASTER_ADDR") or (expand_nodelist(nodelist) or ["127.0.0.1"])[0]
    # Every task derives the same port from the job id, without talking to the others.
    port = _int(env, "MASTER_PORT", 20000 + _int(env, "SLURM_JOB_ID", 0) % 20000)
    local_world = _int(env, "SLURM_NTASKS_PER_NODE", 0) or _tasks_on_node(env)
    return JobEnv(_int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"),
                  _int(env, "SLURM_LOCALID", 0), local_world, master, port, "srun")


def _tasks_on_node(env: Mapping[str, str]) -> int:
    """SLURM_TASKS_PER_NODE ("2(x3),1") at this node's index."""
    counts: list[int] = []
    for part in env.get("SLURM_TASKS_PER_NODE", "1").split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m:
            counts += [int(m.group(1))] * int(m.group(2) or 1)
    node = _int(env, "SLURM_NODEID", 0)
    return counts[node] if node < len(counts) else 1


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed host list ("node[1-3,7],gpu01") in order."""
    hosts: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", nodelist):
        if plain:
            hosts.append(plain)
            continue
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            hosts += [f"{prefix}{i:0{width}d}" for i in range(int(lo), int(hi or lo) + 1)]
    return hosts


# --- starting a job ---------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchSpec:
    """How to start ranks: ``local`` is torchrun on this host, ``slurm`` is srun with one
    torchrun per node (static rendezvous on the first node)."""

    launcher: str
    nodes: int = 1
    nproc_per_node: int = 1
    env_on: tuple[tuple[str, str, str], ...] = ()
    """(node, VAR, value): set VAR on that node only, to rehearse a misconfiguration."""
    master_port: int | None = None
    timeout_s: float = 300.0
    program: tuple[str, ...] = ()
    """The user's own command, run in place of a module: a script and its arguments,
    ``-m module ...``, or an executable (``python train.py``, a shell script), which
    torchrun starts with ``--no-python``. Empty: ddiag's module."""

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise LaunchError(f"--launcher must be one of {', '.join(LAUNCHERS)}, got: "
                              f"{self.launcher!r}")
        if self.nodes < 1 or self.nproc_per_node < 1:
            raise LaunchError(f"--nodes and --nproc-per-node must be >= 1, got: "
                              f"{self.nodes} and {self.nproc_per_node}")
        if self.launcher == "local" and self.nodes != 1:
            raise LaunchError(f"--launcher local runs on this host only: --nodes must be 1, "
                              f"got: {self.nodes}; use --launcher slurm for more nodes")


def parse_env_on(items: Sequence[str]) -> tuple[tuple[str, str, str], ...]:
    out = []
    for item in items:
        m = re.fullmatch(r"([\w.-]+):([A-Za-z_][A-Za-z0-9_]*)=(.*)", item)
        if not m:
            raise LaunchError(f"--env-on must look like NODE:VAR=VALUE (e.g. "
                              f"node3:GLOO_SOCKET_IFNAME=eth9), got: {item!r}")
        out.append((m.group(1), m.group(2), m.group(3)))
    return tuple(out)


def torchrun_args(nnodes: int, nproc: int, port: int) -> list[str]:
    """torchrun with static rendezvous (the default once --master-addr is given)."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
            f"--nproc-per-node={nproc}", f"--master-port={port}"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def entry_argv(spec: LaunchSpec, module: str | None, args: Sequence[str]) -> list[str]:
    """What torchrun runs as each rank: ddiag's ``module`` with ``args``, or the spec's
    program (torchrun takes a script path or ``-m module``; anything else it runs as an
    executable with ``--no-python``)."""
    if not spec.program:
        if not module:
            raise LaunchError("nothing to launch: give a module or a program")
        return ["-m", module, *args]
    head = spec.program[0]
    if head == "-m" or head.endswith(".py"):
        return list(spec.program)
    return ["--no-python", *spec.program]


def local_command(spec: LaunchSpec, module: str | None, args: Sequence[str]
                  ) -> tuple[list[str], dict[str, str]]:
    """torchrun on this host, and the environment to give it (with --env-on applied)."""
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    env = dict(os.environ)
    for node, var, value in spec.env_on:
        if node != host:
            raise LaunchError(f"--env-on {node}:{var}: --launcher local runs on this host "
                              f"only ({host}); name it, or use --launcher slurm")
        env[var] = value
    port = spec.master_port or free_port()
    argv = torchrun_args(1, spec.nproc_per_node, port) + ["--master-addr=127.0.0.1"]
    return argv + entry_argv(spec, module, args), env


def random_port() -> int:
    """A rendezvous port for a multi-node launch (a free local port says nothing about
    the first node's)."""
    return random.randint(20000, 39999)


def slurm_command(spec: LaunchSpec, module: str | None, args: Sequence[str]) -> list[str]:
    """srun, one task per node, each exec-ing torchrun; rank 0's node hosts the store."""
    port = spec.master_port or random_port()
    torchrun = " ".join(shlex.quote(a) for a in torchrun_args(spec.nodes, spec.nproc_per_node,
                                                              port))
    exports = "".join(f'if [ "$SLURMD_NODENAME" = {shlex.quote(node)} ]; then export '
                      f"{var}={shlex.quote(value)}; fi; " for node, var, value in spec.env_on)
    # The step's first node, not the allocation's: a smaller stage's step may run elsewhere.
    nodelist = '"${SLURM_STEP_NODELIST:-$SLURM_JOB_NODELIST}"'
    script = (f'MASTER=$(scontrol show hostnames {nodelist} | head -n1); '
              f'{exports}exec {torchrun} --node-rank="$SLURM_NODEID" --master-addr="$MASTER" '
              f"{shlex.join(entry_argv(spec, module, args))}")
    # --kill-on-bad-exit: when one node's torchrun fails, end the others' too; else they
    # sit in torchrun's exit barrier (5 min) waiting for an agent that is gone.
    return ["srun", f"--nodes={spec.nodes}", f"--ntasks={spec.nodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            "sh", "-c", script]


def command(spec: LaunchSpec, module: str | None, args: Sequence[str]
            ) -> tuple[list[str], dict[str, str]]:
    if spec.launcher == "local":
        return local_command(spec, module, args)
    return slurm_command(spec, module, args), dict(os.environ)


@dataclass(frozen=True)
class JobResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


def run_job(spec: LaunchSpec, module: str, args: Sequence[str]) -> JobResult:
    """Start the job and wait; on timeout stop it (SIGTERM, then SIGKILL) and say so."""
    argv, env = command(spec, module, args)
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=spec.timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        stop_group(proc, kill_wait_s=None)
        out, err = proc.communicate()
        timed_out = True
    return JobResult(argv, proc.returncode, out, err, time.monotonic() - start, timed_out)


# --- stopping processes -----------------------------------------------------------------

STOP_GRACE_S = 10.0
"""Seconds between SIGTERM and SIGKILL: time for the ranks' handlers to flush their event
logs and dump the Flight Recorder."""


def stop(send: Callable[[int], object], ended: Callable[[float | None], bool],
         grace_s: float = STOP_GRACE_S, kill_wait_s: float | None = 5.0) -> bool:
    """SIGTERM, up to ``grace_s`` for the processes to end, then SIGKILL what is left.

    ``send(signum)`` signals them (a process group, or pids the caller has verified);
    ``ended(seconds)`` waits up to that long (None: for ever) and says whether they have
    all ended. Returns whether they ended within ``kill_wait_s`` of the SIGKILL.
    """
    send(signal.SIGTERM)
    if ended(grace_s):
        return True
    send(signal.SIGKILL)
    return ended(kill_wait_s)


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S,
               kill_wait_s: float | None = 5.0) -> bool:
    """Stop the process group ``proc`` leads (started with ``start_new_session``): the
    whole group, because srun forwards SIGTERM to its tasks and a SIGKILL of srun alone
    would orphan them. What ``proc`` printed stays readable with ``proc.communicate()``."""
    return stop(lambda signum: _signal_group(proc.pid, signum),
                lambda seconds: _wait_draining(proc, seconds), grace_s, kill_wait_s)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # every process of the group has ended and been reaped
        pass


def _wait_draining(proc: subprocess.Popen, seconds: float | None) -> bool:
    # communicate, not wait: a rank blocked writing to a full pipe would never end.
    try:
        proc.communicate(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


STEPS_END_S = 30.0  # slurmd's KillWait plus its epilog, with room


def wait_steps_ended(job_id: str, timeout_s: float = STEPS_END_S) -> bool:
    """Wait until the Slurm job ``job_id`` runs no step of ours (its ``.extern``,
    ``.batch`` and ``.interactive`` steps are Slurm's): srun returns when its tasks are
    signalled, but slurmd ends them on their nodes up to KillWait later, and a rank that
    outlives its stage holds the nodes and ports the next stage needs. False when steps
    remain after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            res = subprocess.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        ours = [s for s in res.stdout.split()
                if s.rpartition(".")[2] not in ("extern", "batch", "interactive")]
        if res.returncode != 0 or not ours:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)

