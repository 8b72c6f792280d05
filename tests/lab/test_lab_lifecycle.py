"""A second lab next to the session one: broken iface, killed run, down, down again."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from diag.lab import procs
from tests.lab.labutil import (
    SESSION_LAB, in_node, json_lines, lab_cli, lab_env, lab_json, lab_leftovers, run, srun,
)

pytestmark = pytest.mark.lab
NAME = "ddiag-test2"

CONNECT = """
import errno, json, socket, sys
s = socket.socket(); s.settimeout(1.0)
try:
    s.connect((sys.argv[1], 5999)); out = "connected"
except socket.timeout:
    out = "timeout"
except ConnectionRefusedError:
    out = "refused"
except OSError as e:
    out = errno.errorcode.get(e.errno, str(e))
print(json.dumps({"result": out}))
"""


def connect_result(netns: str, addr: str) -> str:
    """How a TCP connect from inside ``netns`` to ``addr`` ends (nothing listens there)."""
    res = run(in_node(netns, sys.executable, "-c", CONNECT, addr), timeout=20)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["result"]


def check_broken_iface(state: dict) -> None:
    node1, node2 = state["nodes"]
    assert node2["broken_iface"] and not node1["broken_iface"]
    # Slurm still reaches the broken node (over mgmt0) ...
    task = 'echo "{\\"node\\": \\"$SLURMD_NODENAME\\"}"'
    res = srun(lab_env(NAME), "-N2", "-n2", "sh", "-c", task)
    assert res.returncode == 0, res.stderr
    assert sorted(t["node"] for t in json_lines(res.stdout)) == ["node1", "node2"]
    # ... but its fabric is dead: a connect gets no answer, where a live node refuses.
    assert connect_result(node1["netns"], node2["addr"]) in ("timeout", "EHOSTUNREACH")
    assert connect_result(node2["netns"], node1["addr"]) in ("timeout", "EHOSTUNREACH",
                                                             "ENETUNREACH")


def kill_like_a_crash(state: dict) -> None:
    """SIGKILL every daemon; namespaces, links and the state dir stay behind."""
    for pid in state["pids"].values():
        os.kill(pid, signal.SIGKILL)
    assert procs.wait_gone(list(state["pids"].values()), 5.0) == []
    assert lab_cli("status", "--name", NAME).returncode == 1  # degraded, not up


def test_second_lab_broken_iface_killed_run_and_down(session_lab):
    first = lab_json("up", "--name", NAME, "--nodes", "2", "--broken-iface", "node2")
    try:
        assert first["prefix"] != session_lab["prefix"]
        assert first["subnet"] != session_lab["subnet"]
        check_broken_iface(first)
        kill_like_a_crash(first)
        second = lab_json("up", "--name", NAME, "--nodes", "2")
        assert second["up"] and set(second["pids"].values()).isdisjoint(first["pids"].values())
        # `up` over a lab that is still up (a SIGKILLed test session) replaces it.
        third = lab_json("up", "--name", NAME, "--nodes", "2")
        assert third["up"] and not any(procs.alive(p) for p in second["pids"].values())
    finally:
        report = lab_json("down", "--name", NAME)
    assert report["found_anything"] and report["left_behind"] == []
    assert lab_leftovers(first) == [] and lab_leftovers(second) == []
    assert lab_leftovers(third) == []
    again = lab_json("down", "--name", NAME)
    assert not again["found_anything"]
    # The session lab next door was never touched.
    assert lab_json("status", "--name", SESSION_LAB)["up"]


def test_status_and_env_of_a_lab_that_is_not_up(lab_prereqs):
    res = lab_cli("status", "--name", "ddiag-none")
    assert res.returncode == 1 and "not up" in res.stdout
    res = lab_cli("env", "--name", "ddiag-none")
    assert res.returncode == 2 and "no lab named 'ddiag-none' is up" in res.stderr
