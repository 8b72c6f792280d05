"""Across-rank checks on hand-built snapshots of a 2-node x 2-rank job."""

from __future__ import annotations

import dataclasses

from diag.checkenv.checks_cross import (
    check_clock, check_devices, check_env_consistency, check_group, check_local_ranks,
    check_mtu, check_ranks, check_versions, run_cross, span,
)
from diag.checkenv.facts import Versions
from diag.checkenv.snapshot import GroupOutcome
from diag.verdict import Category, Status
from tests.checkenv.factories import LO, eth0, snap

T0 = 1_800_000_000.0


def job() -> list:
    return [snap(r) for r in range(4)]


def test_healthy_job_has_no_failures():
    results = run_cross(job(), 4)
    assert {r.status for r in results} <= {Status.OK, Status.SKIP}


def test_version_difference_names_the_odd_node():
    old = Versions("3.11.7", "2.12.0", "12.4", "2.21.5", "550.54", "0.1.0")
    [res] = check_versions([snap(r, world=6, **({"versions": old} if r in (2, 3) else {}))
                            for r in range(6)])
    assert res.status is Status.FAIL and res.category is Category.VERSION_MISMATCH
    assert res.culprit.hosts == ("node2",) and res.culprit.ranks == (2, 3)
    assert res.summary.startswith("torch differs across ranks: 2.13.0 on node1, node3")


def test_identical_versions_are_one_ok():
    [res] = check_versions(job())
    assert res.status is Status.OK and "torch 2.13.0" in res.summary


def test_job_variable_set_on_one_node_only_fails_naming_it():
    snaps = [snap(0), snap(1), snap(2, env_extra={"NCCL_ALGO": "Tree"}),
             snap(3, env_extra={"NCCL_ALGO": "Tree"})]
    [res] = check_env_consistency(snaps)
    assert res.status is Status.FAIL and res.culprit.env_var == "NCCL_ALGO"
    assert res.culprit.hosts == ("node2",) and res.culprit.ranks == (2, 3)
    assert "unset on node1 (ranks 0,1); 'Tree' on node2 (ranks 2,3)" in res.summary


def test_values_that_differ_on_a_tie_blame_the_group_without_rank_0():
    snaps = [snap(r, env_extra={"TORCH_DISTRIBUTED_DEBUG": "DETAIL" if r >= 2 else "OFF"})
             for r in range(4)]
    [res] = check_env_consistency(snaps)
    assert res.culprit.ranks == (2, 3)


def test_interface_names_may_differ_between_nodes_but_not_within():
    across = [snap(r, env_extra={"GLOO_SOCKET_IFNAME": "eth0" if r < 2 else "ens3"})
              for r in range(4)]
    within = [snap(r, env_extra={"GLOO_SOCKET_IFNAME": "eth0" if r != 1 else "ens3"})
              for r in range(4)]
    assert check_env_consistency(across)[0].status is Status.WARN
    assert check_env_consistency(within)[0].status is Status.FAIL


def test_rank_specific_and_logging_variables_are_not_compared():
    snaps = [snap(r, env_extra={"NCCL_DEBUG": "INFO" if r else "WARN",
                                "CUDA_VISIBLE_DEVICES": str(r), "SLURM_PROCID": str(r)})
             for r in range(4)]
    [res] = check_env_consistency(snaps)
    assert res.status is Status.OK


def test_unknown_variable_difference_warns():
    snaps = [snap(r, env_extra={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
                  if r == 3 else {}) for r in range(4)]
    [res] = check_env_consistency(snaps)
    assert res.status is Status.WARN and res.culprit.ranks == (3,)


def test_missing_duplicate_and_disagreeing_ranks():
    snaps = [snap(0), snap(1), snap(1), snap(3, world=8)]
    results = check_ranks(snaps, 4)
    summaries = " | ".join(r.summary for r in results)
    assert all(r.status is Status.FAIL for r in results)
    assert "WORLD_SIZE differs" in summaries and "rank(s) 1 reported twice" in summaries
    assert "no snapshot from rank(s) 2 of 4" in summaries


def test_local_rank_repeated_on_a_node():
    snaps = [snap(0), dataclasses.replace(snap(1), facts=snap(0).facts), snap(2), snap(3)]
    [res] = check_local_ranks(snaps)
    assert res.status is Status.FAIL and res.culprit.hosts == ("node1",)


def test_ranks_sharing_a_gpu_fail():
    """Every rank on node1 sees one GPU and uses it: CUDA_VISIBLE_DEVICES=0 for all."""
    shared = {"gpu_uuids": ("GPU-aaa",)}
    own = [{"gpu_uuids": ("GPU-c", "GPU-d")}] * 2
    snaps = [snap(0, **shared), snap(1, **shared), snap(2, **own[0]), snap(3, **own[1])]
    [res] = check_devices(snaps)
    assert res.status is Status.FAIL and res.culprit.ranks == (0, 1) and "GPU-aaa" in res.summary
    assert check_devices(job())[0].status is Status.SKIP


def test_clock_skew():
    def at(r, dt):
        return snap(r, group=GroupOutcome(True, None, 0.5, T0 + dt))
    assert check_clock([at(0, 0), at(1, 0.01), at(2, 0.02), at(3, 0)])[0].status is Status.OK
    [res] = check_clock([at(0, 0), at(1, 0), at(2, 3.5), at(3, 3.5)])
    assert res.status is Status.WARN and res.culprit.hosts == ("node2",)
    assert "+3.500 s" in res.summary
    assert check_clock([at(0, 0), at(1, 0), at(2, 900), at(3, 0)])[0].status is Status.FAIL
    unsynced = [snap(r, group=GroupOutcome(False, "x")) for r in range(4)]
    assert check_clock(unsynced)[0].status is Status.SKIP


def test_mtu_differs_between_nodes():
    jumbo = {"interfaces": (LO, eth0("10.0.0.12", mtu=9000))}
    [res] = check_mtu([snap(r, world=6, **(jumbo if r in (2, 3) else {})) for r in range(6)])
    assert res.status is Status.FAIL and res.culprit.hosts == ("node2",)
    assert "1500 on node1, node3; 9000 on node2" in res.summary


def test_group_failure_blames_the_ranks_that_failed_on_their_own():
    eth9 = GroupOutcome(False, "RuntimeError: Unable to find address for: eth9", 0.01)
    waited = GroupOutcome(False, "DistStoreError: wait timeout after 10000ms", 10.0)
    snaps = [snap(0, group=waited), snap(1, group=waited), snap(2, group=eth9),
             snap(3, group=eth9)]
    [res] = check_group(snaps)
    assert res.status is Status.FAIL
    assert res.culprit.hosts == ("node2",) and res.culprit.ranks == (2, 3)
    assert "eth9" in res.summary and "2 other rank(s) timed out waiting" in res.summary
    assert check_group(job())[0].status is Status.OK


def test_span():
    assert span([0, 1, 2, 3, 6, 7]) == "0-3,6,7"
    assert span([5]) == "5" and span([]) == ""
