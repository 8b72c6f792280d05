"""ddiag check-env --all-ranks on the lab: healthy, a bad interface on one node, and a
variable that differs across ranks."""

from __future__ import annotations

import json

import pytest

from tests.lab.labutil import ddiag_argv, lab_env, run

pytestmark = pytest.mark.lab


def check_env(lab: dict, out, *args: str, nproc: int = 2) -> tuple[int, dict, str]:
    res = run([*ddiag_argv(), "check-env", "--all-ranks", "--launcher", "slurm", "--nodes",
               str(len(lab["addrs"])), "--nproc-per-node", str(nproc), "--out", str(out),
               "--json", *args], timeout=120, env=lab_env(lab["name"]))
    return res.returncode, json.loads(res.stdout), res.stderr


def failed(doc: dict) -> list[dict]:
    return [r for r in doc["results"] if r["status"] == "fail"]


def test_healthy_lab_has_no_failure(session_lab, tmp_path):
    rc, doc, err = check_env(session_lab, tmp_path)
    assert rc == 0 and failed(doc) == [], err[-3000:]
    nodes = sorted(session_lab["addrs"])
    assert sorted(doc["nodes"]) == nodes and doc["missing_ranks"] == []
    assert all(len(ranks) == 2 for ranks in doc["nodes"].values())
    ok = {r["check"]: r for r in doc["results"] if r["status"] == "ok"}
    assert ok["cross.group"]["summary"].startswith(f"gloo group of {2 * len(nodes)} ranks")
    assert {"cross.versions", "cross.env", "cross.mtu", "cross.clock", "net.master_port",
            "net.gloo_ifname", "net.master_addr"} <= set(ok)


def test_bad_gloo_interface_on_one_node_names_only_that_node(session_lab, tmp_path):
    rc, doc, err = check_env(session_lab, tmp_path, "--env-on", "node3:GLOO_SOCKET_IFNAME=eth9",
                             "--group-timeout", "5")
    assert rc == 1, err[-3000:]
    bad = failed(doc)
    assert bad and all(r["nodes"] == ["node3"] for r in bad), bad
    [iface] = [r for r in bad if r["check"] == "net.gloo_ifname"]
    assert iface["env_var"] == "GLOO_SOCKET_IFNAME"
    assert iface["summary"].startswith("GLOO_SOCKET_IFNAME=eth9: no such interface eth9 "
                                       "(interfaces: ")
    existing = iface["summary"].split("(interfaces: ")[1].rstrip(")").split(", ")
    assert "eth0" in existing and "lo" in existing and "eth9" not in existing
    # Every rank still reported, from its snapshot file: the group never formed.
    assert doc["missing_ranks"] == [] and sorted(doc["nodes"]) == sorted(session_lab["addrs"])


def test_variable_differing_across_ranks_is_flagged(session_lab, tmp_path):
    rc, doc, err = check_env(session_lab, tmp_path, "--env-on", "node2:NCCL_ALGO=Tree",
                             nproc=1)
    assert rc == 1, err[-3000:]
    [diff] = [r for r in failed(doc) if r["check"] == "cross.env"]
    assert diff["env_var"] == "NCCL_ALGO" and diff["nodes"] == ["node2"]
    assert "'Tree' on node2" in diff["summary"]
