"""check-env on real gloo ranks on this machine: launched for us, and inside torchrun."""

from __future__ import annotations

import json
import socket
import sys

import pytest

from diag.checkenv.snapshot import read_snapshots
from tests.util import quiet_env, run, torchrun_cmd

DDIAG = ["-m", "diag.cli"]


def results(doc: dict, status: str) -> dict[str, dict]:
    return {r["check"]: r for r in doc["results"] if r["status"] == status}


# Not slow (3 s): the fast tier's one launch of real gloo ranks, through diag.launch.
def test_local_launcher_two_ranks_healthy(tmp_path):
    res = run([sys.executable, *DDIAG, "check-env", "--all-ranks", "--launcher", "local",
               "--nproc-per-node", "2", "--out", str(tmp_path), "--json"], timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["format"] == "ddiag.check_env" and doc["schema"] == 1
    assert doc["status"] != "fail" and doc["summary"]["fail"] == 0
    assert doc["mode"] == "local" and doc["world_size"] == 2 and doc["missing_ranks"] == []
    host = socket.gethostname()
    assert doc["nodes"] == {host: [0, 1]}
    ok = results(doc, "ok")
    assert ok["cross.group"]["summary"].startswith("gloo group of 2 ranks formed")
    assert ok["net.master_port"]["ranks"] == [0, 1]  # torchrun's store answered both
    assert {"cross.versions", "cross.env", "cross.clock", "launch.geometry"} <= set(ok)
    snaps, problems = read_snapshots(tmp_path / "env")
    assert [s.rank for s in snaps] == [0, 1] and problems == []
    assert all(s.group.ok and s.group.t_sync for s in snaps)


@pytest.mark.slow
def test_inside_torchrun_a_missing_interface_fails_and_names_it(tmp_path):
    env = quiet_env(GLOO_SOCKET_IFNAME="eth9")
    cmd = torchrun_cmd(2, "diag.cli", "check-env", "--all-ranks", "--out", str(tmp_path),
                       "--json", "--group-timeout", "5", module=True)
    res = run(cmd, timeout=120, env=env)
    assert res.returncode != 0  # rank 0 exits 1 on a failed check
    doc = json.loads(res.stdout)  # only rank 0 printed
    assert doc["status"] == "fail" and doc["mode"] == "torchrun"
    failed = results(doc, "fail")
    iface = failed["net.gloo_ifname"]
    assert iface["env_var"] == "GLOO_SOCKET_IFNAME" and iface["ranks"] == [0, 1]
    assert iface["nodes"] == [socket.gethostname()]
    assert "no such interface eth9 (interfaces: " in iface["summary"]
    assert "lo" in iface["summary"].split("interfaces: ")[1]
    assert "eth9" in failed["cross.group"]["summary"]
    # The group never formed, yet rank 0 reported both ranks: from the snapshot files.
    assert doc["missing_ranks"] == [] and doc["nodes"][socket.gethostname()] == [0, 1]
