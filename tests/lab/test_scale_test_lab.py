"""scale-test under Slurm on the lab, whose node4 is throttled to 200 Mbit/s: the cliff
appears at the 4-node stage and is blamed on node4's link."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.lab.labutil import SESSION_LAB, SLOW_NODE, lab_env, run

pytestmark = pytest.mark.lab


def test_throttled_node_is_the_cliff_and_its_link_the_cause(session_lab, tmp_path):
    env = {**lab_env(SESSION_LAB), "GLOO_SOCKET_IFNAME": "eth0"}
    out = tmp_path / "st"
    res = run([sys.executable, "-m", "diag.cli", "scale-test", "--launcher", "slurm",
               "--stages", "2,4", "--nproc-per-node", "2", "--steps", "15", "--out", str(out),
               "--json"], timeout=900, env=env)
    assert res.returncode == 1, res.stderr[-3000:]  # a cliff is not healthy
    doc = json.loads(res.stdout)
    assert [r["status"] for r in doc["results"]] == ["ok", "ok"]
    assert doc["cliff_stage"] == 4
    first, second = (r["efficiency"] for r in doc["results"])
    assert first == 1.0 and second < 0.8
    top = doc["results"][1]["findings"][0]
    assert top["category"] == "slow_link" and top["culprit"]["hosts"] == [SLOW_NODE]
    assert SLOW_NODE in doc["verdict"]
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout
    assert left.strip() == ""
