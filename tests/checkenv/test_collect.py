"""The edge that reads the machine: the kernel's interfaces and routes against what iproute2
says, probes on 127.0.0.1 only."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time

import pytest

from diag.checkenv.collect import bounded, collect, probe_port, resolve
from diag.checkenv.netfacts import cidr, interfaces, route
from tests.util import free_port

needs_ip = pytest.mark.skipif(shutil.which("ip") is None, reason="no iproute2 to compare with")


def ip_json(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "-j", *args], capture_output=True, text=True, timeout=10)


@needs_ip
def test_interfaces_from_the_kernel_are_what_ip_addr_lists():
    links = json.loads(ip_json("addr", "show").stdout)
    ours = {i.name: i for i in interfaces()}
    assert list(ours) == [link["ifname"] for link in links]
    for link in links:
        iface, flags = ours[link["ifname"]], set(link["flags"])
        listed = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", ())
                  if a.get("family") in ("inet", "inet6") and a.get("local")]
        assert sorted(iface.addrs) == sorted(listed), link["ifname"]
        assert [a for a in iface.addrs if ":" not in a] == [a for a in listed if ":" not in a]
        assert (iface.mtu, iface.loopback) == (link["mtu"], "LOOPBACK" in flags)
        # IFF_RUNNING is the kernel's netif_oper_up: operstate UP, or UNKNOWN (lo, tun)
        assert iface.up == ("UP" in flags and link.get("operstate") in ("UP", "UNKNOWN"))


@needs_ip
def test_route_from_the_kernel_is_what_ip_route_get_says():
    ifaces = interfaces()
    own = [ip for i in ifaces if i.up for ip in i.ips if not ip.startswith("fe80")]
    # documentation ranges: routed by the default route if there is one, else unreachable
    for dst in ("127.0.0.5", "198.51.100.7", "2001:db8::7", *own):
        ours, res = route(dst, ifaces), ip_json("route", "get", dst)
        if res.returncode:
            assert ours.error and ours.dev is None, (dst, res.stderr)
            continue
        [theirs] = json.loads(res.stdout)
        assert (ours.dev, ours.src, ours.local) == (
            theirs["dev"], theirs.get("prefsrc"), theirs.get("type") == "local"), dst


def test_route_by_name_and_to_nowhere():
    assert route("localhost", interfaces()).local
    assert route("no-such-host.invalid", interfaces()).error


@pytest.mark.parametrize("address,netmask,expected", [
    ("10.201.3.11", "255.255.255.128", "10.201.3.11/25"),
    ("fe80::1%eth0", "ffff:ffff:ffff:ffff::", "fe80::1/64"),  # psutil's scoped form
    ("10.8.0.1", None, "10.8.0.1/32"),  # a point-to-point address without a netmask
])
def test_cidr(address, netmask, expected):
    assert cidr(address, netmask) == expected


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
