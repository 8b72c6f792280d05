"""Facts and snapshots built by hand, for check tests that start no processes.

``facts()`` is a healthy rank 0 of a 2-node x 2-rank job on node1; tests override what
their case breaks.
"""

from __future__ import annotations

from diag.checkenv.facts import (
    Iface, Limits, PortProbe, RankFacts, Resolution, Route, Versions,
)
from diag.checkenv.snapshot import GroupOutcome, Snapshot

LO = Iface("lo", True, ("127.0.0.1/8", "::1/128"), 65536, loopback=True)


def eth0(ip: str = "10.0.0.11", up: bool = True, mtu: int = 1500) -> Iface:
    return Iface("eth0", up, (f"{ip}/24",), mtu)


def launch_env(rank: int = 0, world: int = 4, local_rank: int | None = None,
               local_world: int = 2, **extra: str) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank % local_world if local_rank is None else local_rank),
            "LOCAL_WORLD_SIZE": str(local_world), "GROUP_WORLD_SIZE": str(world // local_world),
            "MASTER_ADDR": "node1", "MASTER_PORT": "29500", "OMP_NUM_THREADS": "1", **extra}


def facts(node: str = "node1", ip: str = "10.0.0.11", env: dict | None = None,
          **overrides) -> RankFacts:
    values = dict(
        node=node, hostname=node, env=launch_env() if env is None else env,
        interfaces=(LO, eth0(ip), Iface("docker0", True, ("172.17.0.1/16",))),
        hostname_addrs=Resolution(node, (ip,)),
        master=Resolution("node1", ("10.0.0.11",)),
        master_route=Route("10.0.0.11", "lo" if ip == "10.0.0.11" else "eth0", ip,
                           local=ip == "10.0.0.11"),
        master_port=PortProbe("10.0.0.11", 29500, "open"),
        limits=Limits(65536, 65536, -1, -1), shm_bytes=16 << 30, cpus=8,
        libibverbs_error="libibverbs.so.1: cannot open shared object file",
        versions=Versions("3.11.7", "2.13.0", "12.4", "2.21.5", "550.54", "0.1.0"),
        time=1_800_000_000.0)
    values.update(overrides)
    if "env_names" not in overrides:
        values["env_names"] = tuple(sorted(values["env"]))
    return RankFacts(**values)


def snap(rank: int, node: str | None = None, env_extra: dict | None = None,
         world: int = 4, local_world: int = 2, group: GroupOutcome | None = None,
         launch: str = "launch-1", **fact_overrides) -> Snapshot:
    """Rank ``rank`` of ``world`` with ``local_world`` ranks per node, on node(rank // lw + 1)."""
    node = node or f"node{rank // local_world + 1}"
    ip = f"10.0.0.{10 + int(node.removeprefix('node'))}"
    env = launch_env(rank, world, local_world=local_world, **(env_extra or {}))
    return Snapshot(rank, world, facts(node, ip, env, **fact_overrides),
                    group=group or GroupOutcome(True, None, 0.5, 1_800_000_000.0),
                    launch=launch)
