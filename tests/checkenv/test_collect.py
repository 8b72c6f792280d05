"""The edge that reads the machine: parsers on recorded output, probes on 127.0.0.1 only."""

from __future__ import annotations

import json
import socket
import time

from diag.checkenv.collect import (
    bounded, collect, parse_ip_addr, parse_route, probe_port, resolve,
)
from tests.util import free_port

IP_ADDR = json.dumps([
    {"ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536,
     "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
    {"ifname": "eth0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "mtu": 1500,
     "addr_info": [{"family": "inet", "local": "10.201.3.11", "prefixlen": 25},
                   {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]},
    {"ifname": "eth1", "flags": ["NO-CARRIER", "BROADCAST", "UP"], "mtu": 9000,
     "addr_info": [{"family": "inet", "local": "10.9.0.2", "prefixlen": 16}]},
    {"ifname": "ifb0", "flags": ["BROADCAST", "NOARP"], "mtu": 1500, "addr_info": []},
])


def test_parse_ip_addr():
    lo, eth0, eth1, ifb0 = parse_ip_addr(IP_ADDR)
    assert lo.loopback and lo.up and lo.ips == ("127.0.0.1",)
    assert eth0.up and eth0.addrs == ("10.201.3.11/25", "fe80::1/64") and eth0.mtu == 1500
    assert not eth1.up  # UP but NO-CARRIER: the cable (or veth peer) is gone
    assert not ifb0.up and ifb0.addrs == ()


def test_parse_route():
    local = parse_route("127.0.0.1", '[{"type":"local","dst":"127.0.0.1","dev":"lo",'
                        '"prefsrc":"127.0.0.1"}]', 0)
    via = parse_route("10.0.0.1", '[{"dst":"10.0.0.1","dev":"eth0","prefsrc":"10.0.0.2"}]', 0)
    err = parse_route("10.5.5.5", "RTNETLINK answers: Network is unreachable\n", 2)
    assert local.local and local.dev == "lo"
    assert (via.dev, via.src, via.local) == ("eth0", "10.0.0.2", False)
    assert err.error == "RTNETLINK answers: Network is unreachable" and err.dev is None


def test_probe_port_open_and_refused():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert probe_port("127.0.0.1", server.getsockname()[1]).outcome == "open"
    refused = probe_port("127.0.0.1", free_port())
    assert refused.outcome == "refused" and "refused" in refused.error.lower()


def test_bounded_gives_up_on_a_stuck_call():
    start = time.monotonic()
    assert bounded(lambda: time.sleep(5) or "late", 0.2, "gave up") == "gave up"
    assert time.monotonic() - start < 2
    assert bounded(lambda: "fast", 1.0, "gave up") == "fast"


def test_resolve():
    assert "127.0.0.1" in resolve("localhost").addrs
    assert resolve("no-such-host.invalid").error


def test_collect_records_family_values_and_only_names_of_the_rest(monkeypatch):
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0",
           "NCCL_DEBUG": "INFO", "AWS_SECRET_ACCESS_KEY": "hunter2", "SLURMD_NODENAME": "n7"}
    facts = collect(env)
    assert facts.node == "n7" and facts.env["NCCL_DEBUG"] == "INFO"
    assert "AWS_SECRET_ACCESS_KEY" in facts.env_names
    assert "hunter2" not in json.dumps(facts.to_json())
    assert facts.master_route.local and facts.master_port.outcome == "refused"
    assert facts.versions.torch and facts.cpus >= 1 and facts.interfaces


def test_collect_never_probes_a_netmask():
    facts = collect({"MASTER_ADDR": "255.255.0.0", "MASTER_PORT": "29500"})
    assert facts.master.addrs == ("255.255.0.0",)
    assert facts.master_route is None and facts.master_port is None
