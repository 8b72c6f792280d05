"""The probes' pure parts: pair schedule, slow-link verdicts, busbw, TFLOP/s."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, strategies as st

from probes import collectives, compute, links
from probes.links import Link


@given(st.integers(min_value=2, max_value=40))
def test_round_robin_covers_every_pair_once_in_disjoint_rounds(n):
    rounds = links.round_robin(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))
    for r in rounds:
        players = [x for p in r for x in p]
        assert len(players) == len(set(players))  # no node twice in a round


def test_round_robin_small():
    assert links.round_robin(2) == [[(0, 1)]]
    assert links.round_robin(1) == []


def matrix(rate_of) -> list[Link]:
    """Four nodes; a link of ``rate_of(src, dst)`` Gbit/s takes 1 s for its bytes."""
    nodes = [f"node{i}" for i in range(1, 5)]
    return [Link(a, b, int(rate_of(a, b) * 1e9 / 8), 1.0, 50.0)
            for a in nodes for b in nodes if a != b]


def test_links_of_a_throttled_node_are_flagged_and_the_node_named():
    found = matrix(lambda a, b: 0.2 if "node4" in (a, b) else 10.0)
    report = links.analyze([f"node{i}" for i in range(1, 5)], found)
    assert sorted(report.slow_links) == sorted(
        (a, b) for a, b in itertools.permutations([f"node{i}" for i in range(1, 5)], 2)
        if "node4" in (a, b))
    assert report.slow_nodes == ("node4",)
    assert report.median_gbit_per_s == pytest.approx(5.1)
    doc = report.to_json()
    assert doc["format"] == "ddiag.probe_links" and doc["schema"] == 1
    assert [x["gbit_per_s"] for x in doc["links"] if x["slow"]] == [pytest.approx(0.2)] * 6


def test_one_slow_pair_flags_that_pair_but_no_node():
    found = matrix(lambda a, b: 1.0 if {a, b} == {"node1", "node2"} else 10.0)
    report = links.analyze([f"node{i}" for i in range(1, 5)], found)
    assert sorted(report.slow_links) == [("node1", "node2"), ("node2", "node1")]
    assert report.slow_nodes == ()


def test_uniform_links_flag_nothing_and_two_nodes_name_no_node():
    assert links.analyze(["a", "b"], [Link("a", "b", 10**9, 1.0, 1.0),
                                      Link("b", "a", 10**7, 1.0, 1.0)]).slow_nodes == ()
    uniform = links.analyze([f"node{i}" for i in range(1, 5)], matrix(lambda a, b: 3.0))
    assert uniform.slow_links == () and uniform.slow_nodes == ()


def test_link_rate_and_join_of_halves():
    assert Link("a", "b", 25_000_000, 1.0, 0).gbit_per_s == pytest.approx(0.2)
    joined = links.join([[{"src": "a", "dst": "b", "latency_us": 80.0}],
                         [{"src": "a", "dst": "b", "bytes": 100, "seconds": 1.0}]])
    assert joined == [Link("a", "b", 100, 1.0, 80.0)]


def test_my_pair_and_transfer_size():
    assert links.my_pair([(0, 3), (1, 2)], 3, flip=False) == (0, 3)
    assert links.my_pair([(0, 3), (1, 2)], 3, flip=True) == (3, 0)
    assert links.my_pair([(0, 3)], 1, flip=False) is None
    assert links._size_for(25e6, 0.5, 64 << 20) == 12_500_000
    assert links._size_for(1e12, 0.5, 64 << 20) == 64 << 20
    assert links._size_for(1.0, 0.5, 64 << 20) == links.PILOT_BYTES


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 8, 2 * 7 / 8), ("all_reduce", 2, 1.0), ("all_gather", 4, 0.75),
    ("reduce_scatter", 4, 0.75), ("broadcast", 16, 1.0), ("all_to_all", 2, 0.5),
])
def test_busbw_factors_as_nccl_tests(op, n, factor):
    assert collectives.busbw(op, 10**9, 1.0, n) == pytest.approx(factor)
    assert collectives.algbw(10**9, 0.5) == pytest.approx(2.0)


def test_sweep_sizes_and_row():
    assert collectives.sweep_sizes(4096, 1 << 20, 4) == [4096, 16384, 65536, 262144, 1048576]
    with pytest.raises(ValueError, match="factor >= 2"):
        collectives.sweep_sizes(4096, 1 << 20, 1)
    r = collectives.row("all_reduce", 8 << 20, 10, [0.010, 0.012, 0.011, 0.011])
    assert r.time_us == pytest.approx(11_000) and r.max_time_us == pytest.approx(12_000)
    assert r.algbw == pytest.approx((8 << 20) / 0.011 / 1e9)
    assert r.busbw == pytest.approx(r.algbw * 1.5) and r.count == 2 << 20


def test_compute_flags_ranks_below_the_median():
    ranks = [compute.RankCompute(r, f"node{r // 2}", "cpu", 1000, 10, 0.02 * (3 if r == 5 else 1))
             for r in range(8)]
    report = compute.analyze(ranks)
    assert report.slow_ranks == (5,)
    assert ranks[0].tflops == pytest.approx(2 * 1000**3 * 10 / 0.02 / 1e12)
    assert report.to_json()["format"] == "ddiag.probe_compute"


def test_two_nodes_slow_link_is_judged_against_the_interface_speed():
    """One link has no peer to compare with: 190 Mbit/s on 10 Gbit/s ports is slow,
    5 Gbit/s (TCP on a busy host) is not, and without a known speed nothing is said."""
    slow = [Link("a", "b", int(0.19e9 / 8), 1.0, 1.0, 10.0),
            Link("b", "a", int(0.19e9 / 8), 1.0, 1.0, 10.0)]
    report = links.analyze(["a", "b"], slow)
    assert sorted(report.slow_links) == [("a", "b"), ("b", "a")] and report.slow_nodes == ()
    assert all(x["below_nominal"] for x in report.to_json()["links"])
    fine = [Link("a", "b", int(5e9 / 8), 1.0, 1.0, 10.0), Link("b", "a", int(5e9 / 8), 1.0, 1.0)]
    assert links.analyze(["a", "b"], fine).slow_links == ()
    unknown = [Link("a", "b", int(0.19e9 / 8), 1.0, 1.0), Link("b", "a", int(0.19e9 / 8), 1.0, 1.0)]
    assert links.analyze(["a", "b"], unknown).slow_links == ()


def test_join_takes_the_slower_ends_interface_speed():
    joined = links.join([[{"src": "a", "dst": "b", "latency_us": 80.0, "src_nic_gbit": 100.0}],
                         [{"src": "a", "dst": "b", "bytes": 100, "seconds": 1.0,
                           "dst_nic_gbit": 10.0}]])
    assert joined[0].nominal_gbit_per_s == 10.0


def test_best_of_keeps_each_links_faster_reading():
    first = [Link("a", "b", int(1.4e9 / 8), 1.0, 1.0), Link("b", "a", int(4e9 / 8), 1.0, 1.0)]
    again = [Link("a", "b", int(4.1e9 / 8), 1.0, 1.0)]
    best = links.best_of(first, again)
    assert [round(x.gbit_per_s, 1) for x in best] == [4.1, 4.0]
