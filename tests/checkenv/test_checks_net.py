"""Rendezvous checks on constructed interface tables, lookups, routes and connects."""

from __future__ import annotations

import pytest

from diag.checkenv.checks_master import (
    bad_address, check_hostname, check_master_addr, check_master_port, check_master_route,
)
from diag.checkenv.checks_net import (
    check_gloo_ifname, check_nccl_ifname, gloo_ifnames, nccl_matches, nnodes,
)
from diag.checkenv.facts import Iface, PortProbe, Resolution, Route
from diag.verdict import Category, Status
from tests.checkenv.factories import LO, eth0, facts, launch_env

IFACES = (LO, eth0(), Iface("eth1", True, ("192.168.0.2/24",)), Iface("docker0", True,
          ("172.17.0.1/16",)), Iface("ib0", False, ()), Iface("enp3s0", True, ("10.1.0.2/16",)))
SINGLE_NODE = launch_env(world=2, local_world=2)


def env(**extra: str) -> dict[str, str]:
    return launch_env(**extra)


# --- GLOO_SOCKET_IFNAME -----------------------------------------------------------

def test_gloo_ifname_that_does_not_exist_names_it_and_the_real_ones():
    [res] = check_gloo_ifname(facts(env=env(GLOO_SOCKET_IFNAME="eth9")))
    assert res.status is Status.FAIL and res.culprit.env_var == "GLOO_SOCKET_IFNAME"
    assert res.category is Category.WRONG_INTERFACE
    assert "GLOO_SOCKET_IFNAME=eth9" in res.summary and "no such interface" in res.summary
    assert "docker0, eth0, lo" in res.summary  # the interfaces there are, to pick from


def test_gloo_ifname_takes_exact_names_not_prefixes():
    [res] = check_gloo_ifname(facts(env=env(GLOO_SOCKET_IFNAME="eth")))
    assert res.status is Status.FAIL and "no prefixes" in res.fix


def test_gloo_ifname_down_or_without_address_fails():
    down = facts(env=env(GLOO_SOCKET_IFNAME="eth0"), interfaces=(LO, eth0(up=False)))
    bare = facts(env=env(GLOO_SOCKET_IFNAME="eth0"), interfaces=(LO, Iface("eth0", True)))
    assert "is down" in check_gloo_ifname(down)[0].summary
    assert "has no IP address" in check_gloo_ifname(bare)[0].summary


def test_gloo_ifname_list_checks_every_name():
    results = check_gloo_ifname(facts(env=env(GLOO_SOCKET_IFNAME="eth0,eth7,eth8")))
    assert [r.status for r in results] == [Status.FAIL, Status.FAIL]
    assert "eth7" in results[0].summary and "eth8" in results[1].summary


def test_gloo_ifname_loopback_fails_only_across_nodes():
    multi = facts(env=env(GLOO_SOCKET_IFNAME="lo"))
    single = facts(env=dict(SINGLE_NODE, GLOO_SOCKET_IFNAME="lo"))
    assert check_gloo_ifname(multi)[0].status is Status.FAIL
    assert check_gloo_ifname(single)[0].status is Status.OK


def test_gloo_ifname_good():
    [res] = check_gloo_ifname(facts(env=env(GLOO_SOCKET_IFNAME="eth0")))
    assert res.status is Status.OK and "10.0.0.11" in res.summary


def test_unset_gloo_ifname_binds_what_the_hostname_resolves_to():
    [res] = check_gloo_ifname(facts())
    assert res.status is Status.OK and "gloo binds 10.0.0.11 (eth0)" in res.summary
    assert gloo_ifnames(facts()) == ("eth0",)


@pytest.mark.parametrize("addrs", [("127.0.1.1",), ("127.0.0.1", "::1")])
def test_hostname_on_loopback_makes_gloo_bind_loopback_across_nodes(addrs):
    f = facts(hostname_addrs=Resolution("node1", addrs))
    [res] = check_gloo_ifname(f)
    assert res.status is Status.FAIL and "loopback" in res.summary
    assert "GLOO_SOCKET_IFNAME" in res.fix and gloo_ifnames(f) == ("lo",)


def test_hostname_resolving_elsewhere_falls_back_to_loopback():
    """An address that binds on no local interface: gloo falls back to 127.0.0.1."""
    f = facts(hostname_addrs=Resolution("node1", ("10.9.9.9",)))
    assert check_gloo_ifname(f)[0].status is Status.FAIL


def test_hostname_on_loopback_is_fine_on_one_node():
    f = facts(env=SINGLE_NODE, hostname_addrs=Resolution("node1", ("127.0.0.1",)))
    assert check_gloo_ifname(f)[0].status is Status.OK


# --- NCCL_SOCKET_IFNAME -----------------------------------------------------------

@pytest.mark.parametrize("spec,names", [
    ("eth", ["eth0", "eth1"]),
    ("=eth0", ["eth0"]),
    ("=eth", []),
    ("^docker,lo", ["eth0", "eth1", "ib0", "enp3s0"]),
    ("^=eth0", ["lo", "eth1", "docker0", "ib0", "enp3s0"]),
    ("ib,enp", ["ib0", "enp3s0"]),
])
def test_nccl_ifname_prefix_exclude_and_exact_syntax(spec, names):
    assert [i.name for i in nccl_matches(spec, IFACES)] == names


def test_nccl_ifname_matching_nothing_fails_listing_interfaces():
    [res] = check_nccl_ifname(facts(env=env(NCCL_SOCKET_IFNAME="bond")))
    assert res.status is Status.FAIL
    assert "matches no interface (interfaces: docker0, eth0, lo)" in res.summary


def test_nccl_ifname_matching_only_down_interfaces_fails():
    f = facts(env=env(NCCL_SOCKET_IFNAME="ib"), interfaces=IFACES)
    [res] = check_nccl_ifname(f)
    assert res.status is Status.FAIL and "no usable interface (matched: ib0)" in res.summary


def test_nccl_default_needs_a_non_loopback_interface_across_nodes():
    """The docker case: no IP interface at all but lo."""
    gpu = ("GPU-0",)
    only_lo = facts(interfaces=(LO,), gpu_uuids=gpu)
    nothing = facts(interfaces=(Iface("lo", False),), gpu_uuids=gpu)
    assert check_nccl_ifname(only_lo)[0].status is Status.FAIL
    assert "no usable interface" in check_nccl_ifname(nothing)[0].summary
    [ok] = check_nccl_ifname(facts(interfaces=IFACES, gpu_uuids=gpu))
    assert ok.status is Status.OK and "eth0, eth1, enp3s0" not in ok.summary
    assert "NCCL uses enp3s0, eth0, eth1" in ok.summary  # ib0 is down, so not ib first


@pytest.mark.parametrize("nodes,status", [(SINGLE_NODE, Status.OK), (env(), Status.FAIL)])
def test_loopback_only_is_enough_on_one_node_only(nodes, status):
    """A container with only lo, the hostname resolving elsewhere: on a single-node job
    every peer is on this host; across nodes, peers would be told to dial 127.0.0.1."""
    lo_only = facts(env=nodes, interfaces=(LO,), gpu_uuids=("GPU-0",),
                    hostname_addrs=Resolution("node1", ("10.0.0.11",)))
    for [res] in (check_nccl_ifname(lo_only), check_gloo_ifname(lo_only)):
        assert res.status is status and "lo" in res.summary, res.summary
        assert ("single-node job" in res.summary) == (status is Status.OK)


def test_loopback_only_with_an_unknown_node_count_passes_without_the_reason():
    unknown = {k: v for k, v in SINGLE_NODE.items()
               if k not in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE")}
    [res] = check_nccl_ifname(facts(env=unknown, interfaces=(LO,), gpu_uuids=("GPU-0",)))
    assert res.status is Status.OK and "single-node" not in res.summary


def test_a_named_interface_missing_fails_on_one_node_too():
    """NCCL's bootstrap finds no socket interface and fails, whatever the node count."""
    f = facts(env=dict(SINGLE_NODE, NCCL_SOCKET_IFNAME="eth0", GLOO_SOCKET_IFNAME="eth0"),
              interfaces=(LO,))
    assert check_nccl_ifname(f)[0].status is Status.FAIL
    assert check_gloo_ifname(f)[0].status is Status.FAIL


def test_nccl_ifname_unset_without_gpus_is_skipped():
    assert check_nccl_ifname(facts())[0].status is Status.SKIP


# --- MASTER_ADDR ------------------------------------------------------------------

@pytest.mark.parametrize("addr,why", [
    ("255.255.0.0", "is a netmask"), ("255.255.255.0", "is a netmask"),
    ("255.255.255.255", "is the broadcast address"), ("0.0.0.0", "wildcard"),
    ("::", "wildcard"), ("224.0.0.1", "multicast"),
    ("10.0.0.255", "is the broadcast address of eth0 (10.0.0.0/24)"),
])
def test_master_addr_that_is_not_a_host_fails(addr, why):
    f = facts(env=env(MASTER_ADDR=addr), master=Resolution(addr, (addr,)))
    [res] = check_master_addr(f)
    assert res.status is Status.FAIL and why in res.summary and res.culprit.env_var == "MASTER_ADDR"


@pytest.mark.parametrize("addr", ["10.0.0.11", "192.168.1.254", "fd00::1", "128.0.0.1"])
def test_host_addresses_are_not_bad(addr):
    assert bad_address(addr, facts()) is None


def test_master_addr_unresolvable_fails_with_the_resolver_error():
    f = facts(env=env(MASTER_ADDR="nodex"),
              master=Resolution("nodex", error="[Errno -2] Name or service not known"))
    [res] = check_master_addr(f)
    assert res.status is Status.FAIL
    assert res.culprit.env_var == "MASTER_ADDR" and "nodex" in res.summary
    assert "[Errno -2] Name or service not known" in res.summary


def test_master_addr_on_loopback_fails_across_nodes_only():
    multi = facts(master=Resolution("node1", ("127.0.1.1",)))
    single = facts(env=SINGLE_NODE, master=Resolution("node1", ("127.0.1.1",)))
    assert check_master_addr(multi)[0].status is Status.FAIL
    assert check_master_addr(single)[0].status is Status.OK


def test_master_addr_name_resolving_to_a_netmask_fails():
    f = facts(master=Resolution("node1", ("255.255.0.0",)))
    assert "resolves to 255.255.0.0 is a netmask" in check_master_addr(f)[0].summary


def test_master_addr_unset_is_skipped():
    f = facts(env={k: v for k, v in env().items() if k != "MASTER_ADDR"}, master=None)
    assert check_master_addr(f)[0].status is Status.SKIP


# --- route and port -------------------------------------------------------------

def test_route_error_is_unreachable():
    f = facts(master_route=Route("10.5.0.1", error="RTNETLINK answers: Network is unreachable"))
    [res] = check_master_route(f)
    assert res.status is Status.FAIL and res.category is Category.NETWORK_UNREACHABLE
    assert "Network is unreachable" in res.summary


def test_route_by_another_interface_than_gloo_warns():
    f = facts("node2", "10.0.0.12", master_route=Route("10.0.0.11", "eth1", "192.168.0.2"),
              interfaces=(LO, eth0("10.0.0.12"), IFACES[2]))
    [res] = check_master_route(f)
    assert res.status is Status.WARN and "leaves by eth1 but gloo binds eth0" in res.summary


def test_route_local_and_matching_are_ok():
    assert "is this node" in check_master_route(facts())[0].summary
    other = facts("node2", "10.0.0.12")
    [res] = check_master_route(other)
    assert res.status is Status.OK
    assert all(v in res.summary for v in ("10.0.0.11", "eth0", "10.0.0.12"))


def test_route_ignores_a_gloo_interface_that_does_not_exist():
    f = facts("node2", "10.0.0.12", env=env(GLOO_SOCKET_IFNAME="eth9"))
    assert check_master_route(f)[0].status is Status.OK


@pytest.mark.parametrize("outcome,store,status,words", [
    ("open", False, Status.OK, "succeeded"),
    ("refused", False, Status.OK, "nothing listens yet"),
    ("refused", True, Status.FAIL, "torchrun's store should be listening"),
    ("timeout", False, Status.FAIL, "timed out"),
    ("unreachable", False, Status.FAIL, "No route to host"),
    ("error", False, Status.WARN, "connect failed"),
])
def test_master_port_outcomes(outcome, store, status, words):
    extra = {"TORCHELASTIC_USE_AGENT_STORE": "True"} if store else {}
    error = "[Errno 113] No route to host" if outcome == "unreachable" else "boom"
    f = facts(env=env(**extra), master_port=PortProbe("10.0.0.11", 29500, outcome, error, 2.0))
    [res] = check_master_port(f)
    assert res.status is status and words in res.summary and "10.0.0.11:29500" in res.summary


def test_master_port_not_probed_is_skipped():
    assert check_master_port(facts(master_port=None))[0].status is Status.SKIP


# --- hostname -------------------------------------------------------------------

def test_hostname_checks():
    unresolved = facts(hostname_addrs=Resolution("node1", error="[Errno -3] Temporary failure"))
    loop = facts(hostname_addrs=Resolution("node1", ("127.0.1.1",)))
    [a], [b], [c] = check_hostname(unresolved), check_hostname(loop), check_hostname(facts())
    assert a.status is Status.FAIL and "err=-3" in a.summary and "/etc/hosts" in a.fix
    assert b.status is Status.WARN and "127.0.1.1" in b.summary
    assert c.status is Status.OK
    single = facts(env=SINGLE_NODE, hostname_addrs=Resolution("node1", error="x"))
    assert check_hostname(single)[0].status is Status.WARN


def test_nnodes_from_launchers():
    assert nnodes({"GROUP_WORLD_SIZE": "4"}) == 4
    assert nnodes({"SLURM_NNODES": "3"}) == 3
    assert nnodes({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2"}) == 4
    assert nnodes({}) is None
