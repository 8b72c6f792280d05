"""What a lab is: its options, and the names and addresses derived from its name (pure).

Everything a lab creates is named from one short prefix hashed from the lab's name, so
that the leftovers of a killed run are found by that prefix alone, and two labs (or a
stale one) never share a namespace, interface, subnet or port.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_NAME = "ddiag"
STATE_ROOT = Path("/run/ddiag-lab")
# All lab subnets live in here; tools that send traffic refuse any address outside it.
LAB_NETWORK = ipaddress.IPv4Network("10.201.0.0/16")
MAX_NODES = 32
FABRIC_IFNAME = "eth0"
MGMT_IFNAME = "mgmt0"
# The first host number of a node on each half of the lab's /24 (node i gets BASE + i).
FABRIC_BASE = 10
MGMT_BASE = 138
CTLD_PORT_BASE = 17000

_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,19}")
_NODE_RE = re.compile(r"node([1-9][0-9]*)")
_RATE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit)")
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


class LabError(RuntimeError):
    """Something about a lab is wrong; the message says what, the value and the fix."""


@dataclass(frozen=True)
class SlowLink:
    """A node whose link is throttled, in both directions, to ``bits_per_s``."""

    node: str
    bits_per_s: int

    @property
    def rate(self) -> str:
        """The rate as ``tc`` reads it, in the largest exact unit: ``200mbit``."""
        for unit, scale in reversed(_RATE_UNITS.items()):
            if self.bits_per_s % scale == 0:
                return f"{self.bits_per_s // scale}{unit}"
        return f"{self.bits_per_s}bit"


@dataclass(frozen=True, kw_only=True)
class LabSpec:
    """What ``ddiag lab up`` was asked for."""

    name: str = DEFAULT_NAME
    """Lab name; picks the prefix, subnet, port and state dir. Lowercase, <= 20 chars."""
    nodes: int = 4
    """Number of nodes, ``node1`` .. ``nodeN``."""
    slow_links: tuple[SlowLink, ...] = ()
    broken_ifaces: tuple[str, ...] = ()
    """Nodes whose fabric interface (eth0) is taken down once the lab is up."""

    def __post_init__(self) -> None:
        check_name(self.name)
        if not 1 <= self.nodes <= MAX_NODES:
            raise LabError(f"--nodes must be in [1, {MAX_NODES}], got: {self.nodes}")
        for node in [s.node for s in self.slow_links] + list(self.broken_ifaces):
            check_node(node, self.nodes, "node")


def check_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise LabError(
            f"lab name {name!r}: use 1-20 characters, lowercase letters, digits and '-', "
            "starting with a letter (e.g. --name ddiag2)"
        )
    return name


def check_node(node: str, nodes: int, what: str) -> int:
    """The index of ``node`` (``nodeK``), or an error naming the option and valid nodes."""
    match = _NODE_RE.fullmatch(node)
    if match is None or int(match.group(1)) > nodes:
        raise LabError(f"{what}: no {node} in a {nodes}-node lab (nodes: node1..node{nodes})")
    return int(match.group(1))


def parse_rate(text: str) -> int:
    """``200mbit`` -> 200_000_000 bits/s. Only bit units: tc's ``mbps`` means *bytes*/s."""
    match = _RATE_RE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(
            f"rate {text!r}: give a number and one of bit, kbit, mbit, gbit "
            "(bits per second), e.g. 200mbit"
        )
    bits = int(float(match.group(1)) * _RATE_UNITS[match.group(2)])
    if bits < 8_000:
        raise ValueError(f"rate {text!r}: the lowest rate the lab shapes is 8kbit")
    return bits


def parse_slow_link(text: str, nodes: int) -> SlowLink:
    """Parse one ``--slow-link nodeK=RATE``."""
    option = f"--slow-link {text}"
    node, sep, rate = text.partition("=")
    if not sep:
        raise LabError(f"{option}: expected nodeK=RATE, e.g. node4=200mbit")
    check_node(node, nodes, option)
    try:
        return SlowLink(node=node, bits_per_s=parse_rate(rate))
    except ValueError as err:
        raise LabError(f"{option}: {err}") from None


def parse_slow_links(texts: tuple[str, ...], nodes: int) -> tuple[SlowLink, ...]:
    links = tuple(parse_slow_link(t, nodes) for t in texts)
    seen = [link.node for link in links]
    for node in seen:
        if seen.count(node) > 1:
            raise LabError(f"--slow-link: {node} given {seen.count(node)} times; give it once")
    return links


def parse_shape(text: str, nodes: int) -> tuple[str, SlowLink | None]:
    """``nodeK=RATE`` throttles nodeK; ``nodeK=off`` lifts its throttle."""
    node, sep, rate = text.partition("=")
    if sep and rate.strip().lower() == "off":
        check_node(node, nodes, f"shape {text}")
        return node, None
    link = parse_slow_link(text, nodes)
    return link.node, link


def parse_port_block(text: str, nodes: int) -> tuple[str, int]:
    """``nodeK:PORT``."""
    node, sep, port = text.partition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise LabError(f"block-port {text}: expected nodeK:PORT with a TCP port 1..65535, "
                       "e.g. node1:29500")
    check_node(node, nodes, f"block-port {text}")
    return node, int(port)


def parse_broken_ifaces(texts: tuple[str, ...], nodes: int) -> tuple[str, ...]:
    for text in texts:
        check_node(text, nodes, f"--broken-iface {text}")
    return tuple(dict.fromkeys(texts))


def name_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def lab_prefix(name: str) -> str:
    """``ddl`` + 4 hex digits: short enough that ``<prefix>-n32e`` fits IFNAMSIZ (15)."""
    return "ddl" + name_hash(name)[:4]


def preferred_octet(name: str) -> int:
    """The third octet of the lab's 10.201.X.0/24 if nothing else uses it."""
    return int(name_hash(name)[4:6], 16)


def lab_subnet(octet: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"10.201.{octet}.0/24")


def pick_octet(preferred: int, used: list[ipaddress.IPv4Network]) -> int:
    """The first /24 from ``preferred`` on (wrapping) that overlaps no network in use."""
    for step in range(256):
        octet = (preferred + step) % 256
        if not any(lab_subnet(octet).overlaps(net) for net in used):
            return octet
    raise LabError("every 10.201.X.0/24 overlaps an address or route on this host; "
                   "run 'ddiag lab down --name NAME' for labs you no longer need")


@dataclass(frozen=True, kw_only=True)
class Node:
    """One node: a network namespace with a fabric link (eth0) and a management link."""

    name: str
    index: int
    netns: str
    addr: str
    """Fabric address (eth0): the one jobs, hostnames and torch use."""
    mgmt_addr: str
    """Management address (mgmt0): Slurm's NodeAddr; never shaped or broken."""
    veth: str
    """Host-side end of the fabric veth (shaped for traffic *to* the node)."""
    mgmt_veth: str
    slow_link: SlowLink | None = None
    broken_iface: bool = False
    blocked_ports: tuple[int, ...] = ()
    """TCP ports whose inbound fabric traffic is dropped, as a firewall would."""


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Every name, address and port of one lab, derived from its spec and free subnet."""

    name: str
    prefix: str
    octet: int
    ctld_port: int
    nodes: tuple[Node, ...]
    state_dir: Path

    @property
    def fabric_bridge(self) -> str:
        """The bridge joining the nodes' eth0s; the host has no address on it."""
        return f"{self.prefix}-br"

    @property
    def mgmt_bridge(self) -> str:
        return f"{self.prefix}-mg"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return lab_subnet(self.octet)

    @property
    def fabric_subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"10.201.{self.octet}.0/25")

    @property
    def mgmt_subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"10.201.{self.octet}.128/25")

    @property
    def host_mgmt_addr(self) -> str:
        """The host's address on the management bridge: slurmctld and srun live here."""
        return f"10.201.{self.octet}.129"

    @property
    def master_addr(self) -> str:
        return self.nodes[0].addr

    def node(self, name: str) -> Node:
        return self.nodes[check_node(name, len(self.nodes), "node") - 1]


def make_node(prefix: str, octet: int, index: int, spec: LabSpec) -> Node:
    name = f"node{index}"
    slow = next((s for s in spec.slow_links if s.node == name), None)
    return Node(
        name=name, index=index, netns=f"{prefix}-{name}",
        addr=f"10.201.{octet}.{FABRIC_BASE + index}",
        mgmt_addr=f"10.201.{octet}.{MGMT_BASE + index}",
        veth=f"{prefix}-n{index}e", mgmt_veth=f"{prefix}-n{index}m",
        slow_link=slow, broken_iface=name in spec.broken_ifaces,
    )


def plan(spec: LabSpec, octet: int, ctld_port: int, state_root: Path = STATE_ROOT) -> Layout:
    """The lab's layout once a free subnet (``octet``) and controller port are known."""
    prefix = lab_prefix(spec.name)
    nodes = tuple(make_node(prefix, octet, i, spec) for i in range(1, spec.nodes + 1))
    return Layout(
        name=spec.name, prefix=prefix, octet=octet, ctld_port=ctld_port, nodes=nodes,
        state_dir=state_root / spec.name,
    )


def owns_link(prefix: str, ifname: str) -> bool:
    """Whether an interface or namespace name was made by the lab with ``prefix``."""
    return ifname.startswith(prefix + "-")
