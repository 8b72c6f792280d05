"""A lab's state dir: the paths in it, and ``state.json`` (versioned) written and read back."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from diag.lab.spec import (
    FABRIC_IFNAME, MGMT_IFNAME, STATE_ROOT, Layout, LabError, Node, SlowLink, parse_rate,
)
from diag.format import schema


@dataclass(frozen=True)
class LabPaths:
    """Where a lab keeps its files; everything lives under ``root`` so down is one rm."""

    root: Path

    @property
    def state_json(self) -> Path:
        return self.root / "state.json"

    @property
    def slurm_conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def hosts(self) -> Path:
        """The /etc/hosts every node sees (bind-mounted in the node's own mount ns)."""
        return self.root / "hosts"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def ctld_state(self) -> Path:
        return self.root / "ctld"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def ctld_pid(self) -> Path:
        return self.root / "slurmctld.pid"

    def slurmd_pid(self, node: str) -> Path:
        return self.spool / f"slurmd-{node}.pid"

    def slurmd_log(self, node: str) -> Path:
        return self.log_dir / f"slurmd-{node}.log"


def lab_paths(name: str, state_root: Path = STATE_ROOT) -> LabPaths:
    return LabPaths(state_root / name)


@dataclass(frozen=True, kw_only=True)
class LabState:
    """A lab as ``up`` left it: its layout and the pids of the daemons it started."""

    layout: Layout
    created: str
    """ISO-8601 UTC time ``up`` started."""
    pids: dict[str, int] = field(default_factory=dict)
    """Daemon -> pid: ``munged``, ``slurmctld``, ``slurmd:nodeI``."""
    up_seconds: float | None = None
    """Wall time ``up`` took until every node was idle; None while coming up."""


def node_to_json(node: Node) -> dict:
    return {
        "name": node.name, "addr": node.addr, "mgmt_addr": node.mgmt_addr,
        "netns": node.netns, "veth": node.veth, "mgmt_veth": node.mgmt_veth,
        "slow_link": node.slow_link.rate if node.slow_link else None,
        "broken_iface": node.broken_iface, "blocked_ports": list(node.blocked_ports),
    }


def to_json(state: LabState) -> dict:
    lay = state.layout
    return {
        **schema.stamp(schema.LAB),
        "name": lay.name, "prefix": lay.prefix, "state_dir": str(lay.state_dir),
        "created": state.created, "up_seconds": state.up_seconds,
        "subnet": str(lay.subnet),
        "fabric": {"bridge": lay.fabric_bridge, "subnet": str(lay.fabric_subnet),
                   "ifname": FABRIC_IFNAME},
        "mgmt": {"bridge": lay.mgmt_bridge, "subnet": str(lay.mgmt_subnet),
                 "ifname": MGMT_IFNAME, "host_addr": lay.host_mgmt_addr},
        "slurm": {"conf": str(LabPaths(lay.state_dir).slurm_conf),
                  "ctld_port": lay.ctld_port, "partition": "debug"},
        "master_addr": lay.master_addr,
        "addrs": {n.name: n.addr for n in lay.nodes},
        "nodes": [node_to_json(n) for n in lay.nodes],
        "pids": dict(state.pids),
    }


def node_from_json(doc: dict, index: int) -> Node:
    slow = doc.get("slow_link")
    return Node(
        name=doc["name"], index=index, netns=doc["netns"], addr=doc["addr"],
        mgmt_addr=doc["mgmt_addr"], veth=doc["veth"], mgmt_veth=doc["mgmt_veth"],
        slow_link=SlowLink(doc["name"], parse_rate(slow)) if slow else None,
        broken_iface=bool(doc.get("broken_iface")),
        blocked_ports=tuple(int(p) for p in doc.get("blocked_ports", ())),
    )


def from_json(doc: dict, source: str = "state.json") -> LabState:
    schema.check(doc, schema.LAB, source)
    nodes = tuple(node_from_json(n, i) for i, n in enumerate(doc["nodes"], start=1))
    layout = Layout(
        name=doc["name"], prefix=doc["prefix"], octet=int(doc["subnet"].split(".")[2]),
        ctld_port=int(doc["slurm"]["ctld_port"]), nodes=nodes,
        state_dir=Path(doc["state_dir"]),
    )
    return LabState(layout=layout, created=doc["created"], pids=dict(doc.get("pids", {})),
                    up_seconds=doc.get("up_seconds"))


def write_state(state: LabState) -> Path:
    """Write atomically, so a reader or a killed ``up`` never sees half a file."""
    path = LabPaths(state.layout.state_dir).state_json
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_json(state), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_state(paths: LabPaths) -> LabState | None:
    """The lab's state, or None when it has none (never up, or already down)."""
    try:
        doc = json.loads(paths.state_json.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise LabError(f"{paths.state_json}: unreadable ({err}); "
                       "run 'ddiag lab down' to remove what is left of the lab") from None
    return from_json(doc, str(paths.state_json))
