"""The incident's topology: which hosts, how many nodes, which host has which address and
runs which rank, read once from every signal that says so.

The principles ask the same questions ("is this one node?", "whose address is 10.0.0.4?")
and each used to answer them from the signals it happened to look at. One answer, built
once per analysis, keeps them consistent: NCCL's "NET/IB : No device found" is no finding
on the node that ``one_node`` says the job ran on, and the link a failed connect names is
the hosts ``host_of`` maps its addresses to.

Sources: the host of every prefixed line (NCCL's ``host:pid:tid``, ``srun -l``, pdsh); a
stated node count (NCCL's ``nNodes``, ``--nnodes``); NCCL's bootstrap and socket interface
lines (address -> host); NCCL's init lines (``rank R nranks N`` per host) and nccl-tests'
device table (``Rank R Pid P on HOST``). Loopback names ("localhost", torchrun's failure
summary on a one-node job) are the machine that printed them, never a second host.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Topology:
    hosts: frozenset[str]  # distinct host names, loopback names excluded
    stated_nodes: frozenset[int]  # node counts the logs print
    addresses: frozenset[str]  # NCCL bootstrap addresses
    rank_host: dict[int, str] = field(default_factory=dict)
    addr_host: dict[str, str] = field(default_factory=dict)
    inits_on_one_host: bool = False  # every rank of the communicator init'd on one host

    @property
    def multi_node(self) -> bool:
        """The job spans hosts: two host names, two bootstrap addresses, ranks on two hosts,
        or a stated node count above one."""
        return (len(self.hosts) > 1 or len(self.addresses) > 1
                or len(set(self.rank_host.values())) > 1
                or any(n > 1 for n in self.stated_nodes))

    @property
    def one_node(self) -> bool:
        """The logs say the job ran on one node, as opposed to saying nothing: a stated node
        count of 1, or every rank seen on the one host."""
        if self.multi_node:
            return False
        ranks_on_one = len(set(self.rank_host.values())) == 1
        return self.stated_nodes == {1} or self.inits_on_one_host or ranks_on_one

    def host_of(self, addr: str | None) -> str | None:
        """The host whose NCCL bootstrap or socket transport printed ``addr`` as its own."""
        return self.addr_host.get(addr) if addr else None


def build(idx, is_loopback) -> Topology:
    """``is_loopback(name)``: the address classifier of detectors/common.py, which builds
    this (passed in, so that this module imports nothing of the detectors)."""
    hosts = {h for h in {s.host for s in idx.signals if s.host} if not is_loopback(h)}
    stated = {s.fields.get("n") for s in idx.of("nnodes")}
    boots = idx.of("nccl_bootstrap")
    rank_host = {s.rank: s.fields["host"] for s in idx.of("rank_host")
                 if s.fields.get("host") and s.rank is not None}
    return Topology(frozenset(hosts), frozenset(n for n in stated if isinstance(n, int)),
                    frozenset(s.fields.get("addr") for s in boots if s.fields.get("addr")),
                    rank_host, _addresses(idx), _inits_on_one_host(idx))


def _addresses(idx) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in idx.of("nccl_bootstrap"):
        if s.host and s.fields.get("addr"):
            out.setdefault(s.fields["addr"], s.host)
    for s in idx.of("nccl_net"):
        for _, addr in s.fields.get("ifaces") or ():
            if s.host and addr:
                out.setdefault(addr, s.host)
    return out


def _inits_on_one_host(idx) -> bool:
    """NCCL's init line of every rank of the communicator ("rank R nranks N"), all from one
    host: one node even where NCCL failed before printing nNodes."""
    inits = idx.of("nccl_init")
    sizes = {s.fields.get("nranks") for s in inits}
    hosts = {s.host for s in inits}
    if len(sizes) != 1 or len(hosts) != 1 or None in hosts:
        return False
    n = sizes.pop()
    return bool(n) and {s.rank for s in inits} == set(range(n))
