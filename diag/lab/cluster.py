"""Bringing a whole lab up, down, and reporting on it: the calls the CLI and tests make."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from diag.lab import netns, procs, slurm
from diag.lab.spec import (
    FABRIC_IFNAME, STATE_ROOT, LabError, LabSpec, Node, SlowLink, lab_prefix, pick_octet, plan,
    preferred_octet,
)
from diag.lab.state import LabPaths, LabState, lab_paths, read_state, to_json, write_state

Log = Callable[[str], None]
ROOT_MESSAGE = ("ddiag lab needs root to create network namespaces; "
                "run as root or with sudo")
INSTALL_HINT = ("install them with .ci/install-lab-deps.sh "
                "(apt-get install -y slurm-wlm munge iproute2)")


def _quiet(message: str) -> None:
    pass


def prerequisite_problem() -> str | None:
    """Why a lab cannot run on this machine, or None."""
    if os.geteuid() != 0:
        return ROOT_MESSAGE
    missing = slurm.missing_commands()
    if missing:
        return f"ddiag lab needs {', '.join(missing)} (not found on PATH); {INSTALL_HINT}"
    return None


def require_prerequisites() -> None:
    problem = prerequisite_problem()
    if problem:
        raise LabError(problem)


@contextmanager
def labs_lock() -> Iterator[None]:
    """One up/down at a time on this host, so two labs never race for a subnet or port."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    # 0755 whatever the umask: munged (user munge) must traverse it, and refuses a socket
    # under a group- or world-writable dir.
    STATE_ROOT.chmod(0o755)
    fd = os.open(STATE_ROOT, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class DownReport:
    """What ``down`` found and removed; all empty when there was nothing to do."""

    name: str
    killed: tuple[int, ...]
    netns: tuple[str, ...]
    links: tuple[str, ...]
    state_dir: str | None
    left_behind: tuple[str, ...] = ()
    """What could not be removed (``pid 12``, ``link ddl0610-br``); should stay empty."""

    @property
    def found_anything(self) -> bool:
        return bool(self.killed or self.netns or self.links or self.state_dir)

    def to_json(self) -> dict:
        return {"name": self.name, "killed": list(self.killed), "netns": list(self.netns),
                "links": list(self.links), "state_dir": self.state_dir,
                "left_behind": list(self.left_behind), "found_anything": self.found_anything}


def down(name: str, log: Log = _quiet) -> DownReport:
    """Remove everything lab ``name`` made, found by its prefix and state dir (no state.json
    needed, so this also cleans a killed run). Doing it twice is harmless."""
    require_prerequisites()
    with labs_lock():
        report = _down(name, log)
        _remove_empty_root()
    return report


def _down(name: str, log: Log) -> DownReport:
    prefix, paths = lab_prefix(name), lab_paths(name)
    inodes = {i for n in netns.lab_netns(prefix) if (i := netns.netns_inode(n)) is not None}
    pids = procs.lab_pids(paths.root, inodes)
    survivors = procs.stop(pids)
    removed_ns, removed_links = netns.remove(prefix)
    had_dir = paths.root.is_dir()
    if had_dir:
        shutil.rmtree(paths.root)
    report = DownReport(name, tuple(pids), tuple(removed_ns), tuple(removed_links),
                        str(paths.root) if had_dir else None, _left_behind(prefix, survivors))
    if report.found_anything:
        log(f"lab {name}: removed {_summary(report)}" + (f", {paths.root}" if had_dir else ""))
    return report


def _left_behind(prefix: str, survivors: list[int]) -> tuple[str, ...]:
    left = [f"pid {p}" for p in survivors] + [f"netns {n}" for n in netns.lab_netns(prefix)]
    return tuple(left + [f"link {n}" for n in netns.lab_links(prefix)])


def _remove_empty_root() -> None:
    try:
        STATE_ROOT.rmdir()
    except OSError:
        pass  # another lab lives there, or it is already gone


def check_prefix_free(spec: LabSpec) -> None:
    """Two names could hash to one prefix; refuse rather than share (and later delete)."""
    prefix = lab_prefix(spec.name)
    others = STATE_ROOT.iterdir() if STATE_ROOT.is_dir() else []
    for other in others:
        if other.is_dir() and other.name != spec.name and lab_prefix(other.name) == prefix:
            raise LabError(f"lab name {spec.name!r} shares prefix {prefix} with lab "
                           f"{other.name!r} ({other}); pick another --name")


def up(spec: LabSpec, timeout: float = 60.0, log: Log = _quiet) -> LabState:
    """Bring lab ``spec`` up: network, munge, Slurm; return once sinfo shows all idle.

    Whatever exists of a lab of that name -- the leftovers of a killed run, or a lab that
    is still up -- is removed first, so ``up`` always starts from nothing (a killed test
    session's lab must not block the next one). A failure removes everything it made.
    """
    require_prerequisites()
    with labs_lock():
        check_prefix_free(spec)
        earlier = _down(spec.name, _quiet)
        if earlier.found_anything:
            log(f"lab {spec.name}: removed an earlier run of it ({_summary(earlier)})")
        return _up_or_clean(spec, timeout, log)


def _summary(report: DownReport) -> str:
    return (f"{len(report.killed)} processes, {len(report.netns)} namespaces, "
            f"{len(report.links)} links")


def _plan(spec: LabSpec) -> LabState:
    octet = pick_octet(preferred_octet(spec.name), netns.used_ipv4_networks())
    layout = plan(spec, octet, slurm.pick_ctld_port(octet))
    return LabState(layout=layout, created=datetime.now(timezone.utc).isoformat())


def _up_or_clean(spec: LabSpec, timeout: float, log: Log) -> LabState:
    start, state = time.monotonic(), _plan(spec)
    state_dir = state.layout.state_dir
    try:
        state_dir.mkdir()
        state_dir.chmod(0o755)
        write_state(state)  # first, so a killed `up` is found and cleaned by name
        state = _start(state, timeout, log)
    except BaseException as err:
        kept = _keep_logs(LabPaths(state_dir))
        _down(spec.name, _quiet)
        if isinstance(err, LabError) and kept:
            raise LabError(f"{err}\n(all logs copied to {kept})") from None
        raise
    state = replace(state, up_seconds=round(time.monotonic() - start, 2))
    write_state(state)
    return state


def _start(state: LabState, timeout: float, log: Log) -> LabState:
    layout, paths = state.layout, LabPaths(state.layout.state_dir)
    netns.build(layout)
    log(f"lab {layout.name}: {len(layout.nodes)} nodes on {layout.subnet} "
        f"(fabric {layout.fabric_bridge}, mgmt {layout.mgmt_bridge})")
    slurm.write_config(layout, paths)
    pids = {"munged": slurm.start_munged(paths)}
    pids["slurmctld"] = slurm.start_slurmctld(paths)
    for node in layout.nodes:
        pids[f"slurmd:{node.name}"] = slurm.start_slurmd(node, paths)
    state = replace(state, pids=pids)
    write_state(state)
    waited = slurm.wait_idle(layout, paths, timeout)
    log(f"lab {layout.name}: slurm up, every node idle after {waited:.1f}s")
    for node in layout.nodes:
        netns.break_iface(node)
    return state


def _keep_logs(paths: LabPaths) -> str | None:
    """Copy the logs out of the state dir before a failed up removes it."""
    if not paths.log_dir.is_dir():
        return None
    dest = Path(tempfile.mkdtemp(prefix=f"ddiag-lab-{paths.root.name}-logs-"))
    shutil.copytree(paths.log_dir, dest / "log")
    if (paths.munge_dir / "munged.log").exists():
        shutil.copy(paths.munge_dir / "munged.log", dest / "log")
    return str(dest)


@dataclass(frozen=True)
class LabStatus:
    """A lab's state plus what is true now: daemons alive, namespaces present, sinfo."""

    name: str
    state: LabState | None
    alive: dict[str, bool]
    netns_present: dict[str, bool]
    slurm_states: dict[str, str]

    @property
    def up(self) -> bool:
        if self.state is None:
            return False
        nodes = [n.name for n in self.state.layout.nodes]
        return (all(self.alive.values()) and all(self.netns_present.values())
                and all(slurm_state_ok(self.slurm_states.get(n, "")) for n in nodes))

    def to_json(self) -> dict:
        doc = to_json(self.state) if self.state else {"name": self.name}
        doc.update(up=self.up, alive=self.alive, netns_present=self.netns_present,
                   slurm_states=self.slurm_states)
        return doc


def slurm_state_ok(state: str) -> bool:
    """Responding (no ``*``) and usable: idle, allocated, mixed, completing."""
    return bool(state) and not state.endswith("*") and not state.startswith(
        ("down", "drain", "fail", "unk", "inval", "maint", "boot"))


def status(name: str) -> LabStatus:
    require_prerequisites()
    paths = lab_paths(name)
    state = read_state(paths)
    if state is None:
        return LabStatus(name, None, {}, {}, {})
    alive = {d: procs.alive(pid) for d, pid in state.pids.items()}
    present = set(netns.netns_names())
    # sinfo retries a dead controller for ~10 s; don't ask it when we know.
    states = slurm.node_states(paths) if alive.get("slurmctld") else {}
    return LabStatus(name, state, alive,
                     {n.name: n.netns in present for n in state.layout.nodes}, states)


def env_vars(state: LabState) -> dict[str, str]:
    """What a shell needs to use the lab: Slurm's config, and the nodes' addresses."""
    layout = state.layout
    return {
        "SLURM_CONF": str(LabPaths(layout.state_dir).slurm_conf),
        "DDIAG_LAB": layout.name,
        "DDIAG_LAB_MASTER_ADDR": layout.master_addr,
        "DDIAG_LAB_NODES": " ".join(f"{n.name}={n.addr}" for n in layout.nodes),
        "DDIAG_LAB_IFNAME": FABRIC_IFNAME,
    }


def _running_state(name: str) -> LabState:
    require_prerequisites()
    state = read_state(lab_paths(name))
    if state is None:
        raise LabError(f"lab {name} is not up; start it with 'ddiag lab up --name {name}'")
    return state


def _with_node(state: LabState, node: Node) -> LabState:
    nodes = tuple(node if n.name == node.name else n for n in state.layout.nodes)
    return replace(state, layout=replace(state.layout, nodes=nodes))


def shape(name: str, node_name: str, link: SlowLink | None) -> LabState:
    """Throttle a node of a running lab (or lift it with None) and record it."""
    with labs_lock():
        state = _running_state(name)
        node = replace(state.layout.node(node_name), slow_link=link)
        netns.shape(node) if link else netns.unshape(node)
        state = _with_node(state, node)
        write_state(state)
    return state


def block_port(name: str, node_name: str, port: int, blocked: bool = True) -> LabState:
    """Drop (or stop dropping) inbound TCP to ``port`` on a node of a running lab."""
    with labs_lock():
        state = _running_state(name)
        old = state.layout.node(node_name)
        ports = sorted((set(old.blocked_ports) | {port}) if blocked
                       else (set(old.blocked_ports) - {port}))
        node = replace(old, blocked_ports=tuple(ports))
        netns.drop_port(node, port, blocked)
        state = _with_node(state, node)
        write_state(state)
    return state
