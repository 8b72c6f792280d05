"""``probe links``: point-to-point bandwidth and latency between every pair of nodes.

One rank per node takes part. Pairs are scheduled as a round-robin tournament, so in each
round every node is in at most one pair and the pairs of a round run concurrently: n-1
rounds (n for odd n), each measuring both directions, instead of n(n-1) serial
transfers. The receiver times each transfer, from a small "go" message to the last byte,
so the rate is what the link delivered, not what the sender queued.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Sequence

from diag.format import schema

PILOT_BYTES = 1 << 20
PINGS = 10
# A link is also slow when it delivers under this share of the slower end's interface
# speed: with two nodes there is no other link to compare with, and when every link is
# slow the median is too. A twentieth leaves room for TCP over a fast NIC (one stream
# rarely fills 100G) while 200 Mbit/s on a 10G port is 2%.
NOMINAL_RATIO = 0.05


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair of ``n`` players once (circle method:
    player 0 stays, the others rotate; with an odd ``n`` a bye takes the empty seat)."""
    if n < 2:
        return []
    seats = list(range(n)) + ([None] if n % 2 else [])
    rounds = []
    for _ in range(len(seats) - 1):
        half = len(seats) // 2
        pairs = [(seats[i], seats[-1 - i]) for i in range(half)]
        rounds.append([tuple(sorted(p)) for p in pairs if None not in p])
        seats = [seats[0], seats[-1]] + seats[1:-1]
    return rounds


@dataclass(frozen=True)
class Link:
    """One direction of one node pair, as measured."""

    src: str
    dst: str
    bytes: int
    seconds: float
    """Receiver's time from the go message to the last byte."""
    latency_us: float
    """Half the median round trip of a 4-byte message."""
    nominal_gbit_per_s: float | None = None
    """The slower end's interface speed (sysfs), when both ends report one."""

    @property
    def gbit_per_s(self) -> float:
        """Payload rate in Gbit/s (10^9 bits per second)."""
        return self.bytes * 8 / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def below_nominal(self) -> bool:
        return bool(self.nominal_gbit_per_s) and \
            self.gbit_per_s < NOMINAL_RATIO * self.nominal_gbit_per_s


@dataclass(frozen=True)
class LinkReport:
    """The matrix and its verdict: a link is slow below ``slow_ratio`` x the median."""

    nodes: tuple[str, ...]
    links: tuple[Link, ...]
    median_gbit_per_s: float
    slow_ratio: float
    slow_links: tuple[tuple[str, str], ...]
    slow_nodes: tuple[str, ...]
    """Nodes all of whose links are slow: the node's own NIC, cable or port."""
    backend: str = "gloo"
    seconds: float = 0.0

    def to_json(self) -> dict:
        slow = set(self.slow_links)
        return {**schema.stamp(schema.PROBE_LINKS), "backend": self.backend,
                "nodes": list(self.nodes), "seconds": round(self.seconds, 3),
                "median_gbit_per_s": self.median_gbit_per_s, "slow_ratio": self.slow_ratio,
                "nominal_ratio": NOMINAL_RATIO,
                "slow_links": [list(p) for p in self.slow_links],
                "slow_nodes": list(self.slow_nodes),
                "links": [{**asdict(link), "gbit_per_s": link.gbit_per_s,
                           "slow": (link.src, link.dst) in slow,
                           "below_nominal": link.below_nominal()} for link in self.links]}


def analyze(nodes: Sequence[str], links: Sequence[Link], slow_ratio: float = 0.5,
            backend: str = "gloo", seconds: float = 0.0) -> LinkReport:
    rates = [link.gbit_per_s for link in links]
    median = statistics.median(rates) if rates else 0.0
    slow = tuple((x.src, x.dst) for x in links
                 if x.gbit_per_s < slow_ratio * median or x.below_nominal())
    return LinkReport(tuple(nodes), tuple(links), median, slow_ratio, slow,
                      slow_nodes(nodes, links, slow), backend, seconds)


def slow_nodes(nodes: Sequence[str], links: Sequence[Link],
               slow: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """With three or more nodes, a node whose every link is slow is the culprit; with two
    the one link cannot say which end is at fault."""
    if len(nodes) < 3:
        return ()
    flagged = set(slow)
    return tuple(n for n in nodes
                 if all((x.src, x.dst) in flagged for x in links if n in (x.src, x.dst)))


# --- inside the ranks ------------------------------------------------------------------

def _ping(peer: int, sender: bool, device: str) -> float:
    """Median one-way latency in microseconds, from round trips (sender side)."""
    import torch
    import torch.distributed as dist

    buf, trips = torch.zeros(1, device=device), []
    for _ in range(PINGS + 2):
        start = time.perf_counter()
        if sender:
            dist.send(buf, peer)
            dist.recv(buf, peer)
        else:
            dist.recv(buf, peer)
            dist.send(buf, peer)
        trips.append(time.perf_counter() - start)
    return statistics.median(trips[2:]) / 2 * 1e6


def _timed_recv(peer: int, nbytes: int, group) -> float:
    """Receive a go message, then ``nbytes``; seconds from go to the last byte."""
    import torch
    import torch.distributed as dist

    from probes.dist import sync

    go, buf = torch.zeros(1, device=group.device), torch.empty(nbytes // 4, device=group.device)
    dist.recv(go, peer)
    sync(group)
    start = time.perf_counter()
    dist.recv(buf, peer)
    sync(group)
    return time.perf_counter() - start


def _send(peer: int, nbytes: int, device: str) -> None:
    import torch
    import torch.distributed as dist

    dist.send(torch.zeros(1, device=device), peer)
    dist.send(torch.ones(nbytes // 4, device=device), peer)


def _size_for(rate_bps: float, target_s: float, max_bytes: int) -> int:
    """Bytes for a transfer of about ``target_s`` at the pilot's rate, 4-byte aligned."""
    return int(min(max(rate_bps * target_s, PILOT_BYTES), max_bytes)) // 4 * 4


def measure_pair(group, peer: int, sender: bool, target_s: float, max_bytes: int
                 ) -> dict | None:
    """One direction of one pair. The receiver returns bytes and seconds, the sender the
    latency; rank 0 joins them."""
    import torch
    import torch.distributed as dist

    latency = _ping(peer, sender, group.device)
    size = torch.zeros(1, dtype=torch.int64, device=group.device)
    if sender:
        _send(peer, PILOT_BYTES, group.device)
        dist.recv(size, peer)
        _send(peer, int(size.item()), group.device)
        return {"latency_us": latency}
    pilot = _timed_recv(peer, PILOT_BYTES, group)
    size[0] = _size_for(PILOT_BYTES / max(pilot, 1e-9), target_s, max_bytes)
    dist.send(size, peer)
    return {"bytes": int(size.item()), "seconds": _timed_recv(peer, int(size.item()), group)}


def my_pair(pairs: list[tuple[int, int]], me: int, flip: bool) -> tuple[int, int] | None:
    """(src, dst) node indices of my pair this round and direction, if I play."""
    for a, b in pairs:
        if me in (a, b):
            return (b, a) if flip else (a, b)
    return None


def play_rounds(group, target_s: float, max_bytes: int) -> list[dict]:
    """Every round, both directions; this rank's halves of the links it took part in."""
    import torch.distributed as dist

    me = _my_index(group)
    mine: list[dict] = []
    for pairs in round_robin(len(group.leaders)):
        for flip in (False, True):
            pair = my_pair(pairs, me, flip) if me is not None else None
            if pair:
                mine.append(_play(group, pair, me, target_s, max_bytes))
            dist.barrier()  # rounds must not overlap: each link is measured alone
    return mine


def replay(group, suspects: list[tuple[str, str]], target_s: float, max_bytes: int
           ) -> list[dict]:
    """Each suspect link once more, alone: a transfer slowed by a burst of other work on
    the host reads as a slow link once, a slow link reads slow every time."""
    import torch.distributed as dist

    nodes, me = list(group.leaders), _my_index(group)
    mine: list[dict] = []
    for src, dst in suspects:
        pair = (nodes.index(src), nodes.index(dst))
        if me in pair:
            mine.append(_play(group, pair, me, target_s, max_bytes))
        dist.barrier()
    return mine


def _my_index(group) -> int | None:
    ranks = list(group.leaders.values())
    return ranks.index(group.job.rank) if group.job.rank in ranks else None


def _play(group, pair: tuple[int, int], me: int, target_s: float, max_bytes: int) -> dict:
    """My half of one direction (src, dst) of one link, as node indices."""
    nodes, ranks = list(group.leaders), list(group.leaders.values())
    sender = me == pair[0]
    peer = ranks[pair[1] if sender else pair[0]]
    part = measure_pair(group, peer, sender, target_s, max_bytes)
    return {"src": nodes[pair[0]], "dst": nodes[pair[1]], **part,
            f"{'src' if sender else 'dst'}_nic_gbit": nic_gbit_per_s()}


# Readings after the first for a link that looks slow. On a busy host one transfer in
# ten can run at half speed (seen: 1.76 against a median of 3.63 Gbit/s, twice in a row,
# with 8 ranks on 2 cores); a slow link is slow at every reading.
REPLAYS = 3


def run(group, target_s: float = 0.5, max_bytes: int = 64 << 20,
        slow_ratio: float = 0.5) -> LinkReport | None:
    """Every rank calls this; rank 0 returns the report. Links that look slow are
    measured again and keep their better reading."""
    import torch.distributed as dist

    start, nodes = time.monotonic(), list(group.leaders)
    found = _gathered(group, play_rounds(group, target_s, max_bytes))
    for _ in range(REPLAYS):  # rank 0 decides; every rank must take the same branch
        suspects = [list(analyze(nodes, found, slow_ratio).slow_links) if found is not None
                    else None]
        dist.broadcast_object_list(suspects, src=0)
        if not suspects[0]:
            break
        again = _gathered(group, replay(group, suspects[0], target_s, max_bytes))
        found = best_of(found, again) if found is not None else None
    if group.job.rank != 0:
        return None
    return analyze(nodes, found, slow_ratio, group.backend, time.monotonic() - start)


def _gathered(group, mine: list[dict]) -> list[Link] | None:
    import torch.distributed as dist

    parts: list = [None] * group.job.world_size if group.job.rank == 0 else None
    dist.gather_object(mine, parts, dst=0)
    return join(parts) if group.job.rank == 0 else None


def best_of(first: list[Link], again: list[Link]) -> list[Link]:
    """Each link's faster reading: what the link can deliver."""
    better = {(x.src, x.dst): x for x in again}
    return [max((x, better.get((x.src, x.dst), x)), key=lambda y: y.gbit_per_s)
            for x in first]


def join(parts: list[list[dict]]) -> list[Link]:
    """Sender halves (latency) and receiver halves (bytes, seconds) into links."""
    halves: dict[tuple[str, str], dict] = {}
    for part in parts:
        for half in part or ():
            halves.setdefault((half["src"], half["dst"]), {}).update(half)
    return [Link(h["src"], h["dst"], h["bytes"], h["seconds"], h.get("latency_us", 0.0),
                 _slower(h.get("src_nic_gbit"), h.get("dst_nic_gbit")))
            for h in halves.values() if "bytes" in h]


def _slower(a: float | None, b: float | None) -> float | None:
    return min(a, b) if a and b else None


def nic_gbit_per_s() -> float | None:
    """This node's speed of the interface traffic to other nodes leaves by: the one the
    backend binds (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, first name), else the route
    to the store's host. None when the driver does not say (virtual, IB, not Linux)."""
    import os

    iface = (os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME")
             or "").split(",")[0].lstrip("^=")
    if not iface and os.environ.get("MASTER_ADDR"):
        from diag.checkenv.netfacts import interfaces, route

        iface = route(os.environ["MASTER_ADDR"], interfaces()).dev or ""
    mbit = _ethtool_speed_mbit(iface) if iface else None
    return mbit / 1000 if mbit else None


def _ethtool_speed_mbit(iface: str) -> int | None:
    """The link speed the driver reports, through the ETHTOOL_GSET ioctl: it answers for
    this process's network namespace, where sysfs may show the host's devices."""
    import array
    import fcntl
    import socket
    import struct

    cmd = array.array("B", struct.pack("I", 1) + bytes(40))  # ETHTOOL_GSET, struct ethtool_cmd
    request = struct.pack("16sP", iface.encode()[:15], cmd.buffer_info()[0])
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock, 0x8946, request)  # SIOCETHTOOL
    except OSError:
        return None
    raw = cmd.tobytes()
    speed = struct.unpack_from("H", raw, 12)[0] | struct.unpack_from("H", raw, 28)[0] << 16
    return speed if 0 < speed < 0xFFFFFFFF else None
