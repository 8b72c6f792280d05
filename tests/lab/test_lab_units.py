"""The lab's pure parts: names, subnets, options, slurm.conf, state.json, process picking.
No root, no processes."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.lab import procs, spec
from diag.lab.netns import tbf_burst
from diag.lab.slurm import render_hosts, render_slurm_conf, slurmd_argv
from diag.lab.spec import LabError, LabSpec, SlowLink
from diag.lab.state import LabPaths, LabState, from_json, to_json
from diag.lab.throughput import check_lab_addr, rate_mbit
from diag.format.schema import SchemaError


def layout(nodes: int = 4, octet: int = 7, **kw) -> spec.Layout:
    return spec.plan(LabSpec(nodes=nodes, **kw), octet=octet, ctld_port=17007,
                     state_root=Path("/run/ddiag-lab"))


def test_prefix_is_stable_short_and_differs_between_names():
    assert spec.lab_prefix("ddiag") == spec.lab_prefix("ddiag")
    assert spec.lab_prefix("ddiag") != spec.lab_prefix("ddiag2")
    lay = layout(nodes=spec.MAX_NODES)
    names = [lay.fabric_bridge, lay.mgmt_bridge] + [n.veth for n in lay.nodes]
    assert max(len(n) for n in names + [n.mgmt_veth for n in lay.nodes]) <= 15
    assert all(spec.owns_link(lay.prefix, n) for n in names + [n.netns for n in lay.nodes])
    assert not spec.owns_link(lay.prefix, lay.prefix + "x-br")


@pytest.mark.parametrize("name", ["", "Ddiag", "9lab", "a" * 21, "lab_1", "lab/1"])
def test_bad_lab_names_are_refused_with_the_rule(name):
    with pytest.raises(LabError, match="lowercase letters, digits and '-'"):
        LabSpec(name=name)


def test_pick_octet_skips_subnets_in_use_and_wraps():
    used = [ipaddress.IPv4Network("10.201.5.0/25"), ipaddress.IPv4Network("10.0.0.0/8")]
    assert spec.pick_octet(5, used[:1]) == 6
    assert spec.pick_octet(255, [ipaddress.IPv4Network("10.201.255.7/32")]) == 0
    with pytest.raises(LabError, match="every 10.201.X.0/24 overlaps"):
        spec.pick_octet(5, used)


def test_addresses_fabric_and_mgmt_halves():
    lay = layout(nodes=2, octet=9)
    assert [n.addr for n in lay.nodes] == ["10.201.9.11", "10.201.9.12"]
    assert [n.mgmt_addr for n in lay.nodes] == ["10.201.9.139", "10.201.9.140"]
    assert lay.master_addr == "10.201.9.11" and lay.host_mgmt_addr == "10.201.9.129"
    assert all(ipaddress.IPv4Address(n.addr) in lay.fabric_subnet for n in lay.nodes)
    assert all(ipaddress.IPv4Address(n.mgmt_addr) in lay.mgmt_subnet for n in lay.nodes)
    assert not lay.fabric_subnet.overlaps(lay.mgmt_subnet)


@pytest.mark.parametrize("text,bits", [("200mbit", 200_000_000), ("1.5gbit", 1_500_000_000),
                                       ("64kbit", 64_000), ("200MBIT", 200_000_000)])
def test_parse_rate(text, bits):
    assert spec.parse_rate(text) == bits


@pytest.mark.parametrize("text,message", [
    ("node9=200mbit", "--slow-link node9=200mbit: no node9 in a 4-node lab"),
    ("node0=200mbit", "no node0 in a 4-node lab"),
    ("nodeX=1gbit", "no nodeX in a 4-node lab"),
    ("node4", "--slow-link node4: expected nodeK=RATE, e.g. node4=200mbit"),
    ("node4=200mbps", "give a number and one of bit, kbit, mbit, gbit"),
    ("node4=fast", "rate 'fast'"),
    ("node4=1kbit", "lowest rate the lab shapes is 8kbit"),
])
def test_slow_link_errors_name_the_option_value_and_fix(text, message):
    with pytest.raises(LabError, match=message.replace(".", r"\.")):
        spec.parse_slow_link(text, nodes=4)


def test_slow_links_parse_and_refuse_duplicates():
    assert spec.parse_slow_links(("node4=200mbit",), 4) == (SlowLink("node4", 200_000_000),)
    assert SlowLink("node4", 200_000_000).rate == "200mbit"
    with pytest.raises(LabError, match="node2 given 2 times"):
        spec.parse_slow_links(("node2=1gbit", "node2=2gbit"), 4)


def test_broken_iface_and_node_count_checks():
    assert spec.parse_broken_ifaces(("node2", "node2"), 4) == ("node2",)
    with pytest.raises(LabError, match="--broken-iface node5: no node5 in a 4-node lab"):
        spec.parse_broken_ifaces(("node5",), 4)
    with pytest.raises(LabError, match=r"--nodes must be in \[1, 32\], got: 0"):
        LabSpec(nodes=0)


def test_slurm_conf_uses_only_the_state_dir_and_mgmt_addresses():
    lay = layout(nodes=2, octet=3, slow_links=(SlowLink("node2", 10**8),))
    paths = LabPaths(lay.state_dir)
    conf = render_slurm_conf(lay, paths, "vm", cpus=2, real_memory_mb=1000)
    assert "SlurmctldHost=vm(10.201.3.129)\n" in conf
    assert "SlurmctldPort=17007\n" in conf
    assert "AuthInfo=socket=/run/ddiag-lab/ddiag/munge/munge.socket\n" in conf
    assert "NodeName=node2 NodeAddr=10.201.3.140 CPUs=2 RealMemory=1000\n" in conf
    assert "PartitionName=debug Nodes=node1,node2 Default=YES" in conf
    paths_in_conf = [v for line in conf.splitlines() for v in line.split("=")[1:]
                     if v.startswith("/")]
    assert paths_in_conf and all(p.startswith("/run/ddiag-lab/ddiag/") for p in paths_in_conf)


def test_hosts_resolve_every_node_forward_and_v4_mapped():
    hosts = render_hosts(layout(nodes=2, octet=3))
    assert "10.201.3.11 node1\n" in hosts and "::ffff:10.201.3.12 node2\n" in hosts


def test_slurmd_runs_under_nsenter_not_ip_netns_exec():
    lay = layout(nodes=1)
    argv = slurmd_argv(lay.nodes[0], LabPaths(lay.state_dir))
    assert argv[:2] == ["nsenter", f"--net=/run/netns/{lay.prefix}-node1"]
    assert argv[-4:] == ["-N", "node1", "-f", "/run/ddiag-lab/ddiag/slurm.conf"]
    assert "netns" not in argv[:3]


def test_state_json_round_trips_and_rejects_newer_schemas():
    lay = layout(slow_links=(SlowLink("node4", 200_000_000),), broken_ifaces=("node3",))
    state = LabState(layout=lay, created="2026-01-01T00:00:00+00:00", pids={"munged": 5})
    doc = to_json(state)
    assert doc["format"] == "ddiag.lab" and doc["schema"] == 1
    assert doc["addrs"]["node4"] == "10.201.7.14" and doc["nodes"][3]["slow_link"] == "200mbit"
    assert from_json(doc) == state
    with pytest.raises(SchemaError, match="schema 2 is newer than this ddiag reads"):
        from_json({**doc, "schema": 2})
    with pytest.raises(SchemaError, match="expected format 'ddiag.lab'"):
        from_json({**doc, "format": "ddiag.run"})


def proc(pid, ppid, argv=(), inode=1, zombie=False):
    return procs.ProcInfo(pid=pid, ppid=ppid, argv=tuple(argv), netns_inode=inode,
                          zombie=zombie)


def test_lab_processes_are_picked_by_state_dir_netns_and_descent():
    root = Path("/run/ddiag-lab/a")
    table = [
        proc(10, 1, ["slurmctld", "-f", "/run/ddiag-lab/a/slurm.conf"]),
        proc(11, 10, [": slurmscriptd"]),                       # child of a lab daemon
        proc(12, 1, ["munged", "--socket=/run/ddiag-lab/a/munge/munge.socket"]),
        proc(13, 1, ["slurmstepd: [1.0]"], inode=77),           # lives in a lab namespace
        proc(20, 1, ["slurmctld", "-f", "/run/ddiag-lab/ab/slurm.conf"]),  # another lab
        proc(21, 1, ["tail", "/run/ddiag-lab/a"], zombie=True),  # already dead
        proc(22, 1, ["bash"]),
    ]
    assert procs.select(table, root, {77}) == [10, 11, 12, 13]


def test_tbf_burst_covers_a_gso_packet_and_scales_with_rate():
    assert tbf_burst(200_000_000) == 100_000 and tbf_burst(1_000_000) == 64 * 1024


def test_throughput_tool_only_talks_to_lab_addresses():
    assert check_lab_addr("10.201.7.11") == "10.201.7.11"
    for addr in ("192.0.2.2", "127.0.0.1", "node1", "10.202.0.1"):
        with pytest.raises(ValueError, match="not a lab address"):
            check_lab_addr(addr)
    assert rate_mbit(25_000_000, 1.0) == 200.0 and rate_mbit(1, 0) == 0.0


def test_cli_says_root_is_needed(monkeypatch):
    from diag.cli import main

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    for verb in ("up", "down", "status", "env"):
        res = CliRunner().invoke(main, ["lab", verb])
        assert res.exit_code == 2, res.output
        assert "ddiag lab needs root to create network namespaces; run as root or with sudo" \
            in res.output


def test_cli_reports_bad_options_before_touching_anything(monkeypatch):
    from diag.cli import main

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    res = CliRunner().invoke(main, ["lab", "up", "--slow-link", "node9=200mbit"])
    assert res.exit_code == 2
    assert "--slow-link node9=200mbit: no node9 in a 4-node lab" in res.output


def test_only_slurm_clients_of_this_lab_count_as_its_processes():
    conf = Path("/run/ddiag-lab/a/slurm.conf")
    env = b"HOME=/root\0SLURM_CONF=/run/ddiag-lab/a/slurm.conf\0PATH=/usr/bin"
    assert procs.is_lab_client(("/usr/bin/srun", "-N4", "hostname"), env, conf)
    assert not procs.is_lab_client(("bash",), env, conf)  # the user's shell after eval
    assert not procs.is_lab_client(("srun",), env.replace(b"/a/", b"/b/"), conf)
    assert not procs.is_lab_client(("srun",), b"SLURM_CONF=/run/ddiag-lab/a/slurm.confx", conf)


def test_shape_parses_a_rate_or_off():
    from diag.lab.spec import parse_shape

    node, link = parse_shape("node4=200mbit", 4)
    assert node == "node4" and link.bits_per_s == 200_000_000
    assert parse_shape("node2=off", 4) == ("node2", None)
    with pytest.raises(LabError, match="no node5"):
        parse_shape("node5=off", 4)


def test_port_block_names_node_and_port():
    from diag.lab.spec import parse_port_block

    assert parse_port_block("node1:29500", 4) == ("node1", 29500)
    for bad in ("node1", "node1:0", "node1:x", "node1:70000"):
        with pytest.raises(LabError, match="nodeK:PORT"):
            parse_port_block(bad, 4)
