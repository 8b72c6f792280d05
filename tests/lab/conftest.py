"""The lab fixtures: prerequisites (skip, or fail under CI) and one session-wide lab.

The session lab is brought up once (4 nodes, node4 throttled to 200mbit) through the real
CLI, and always torn down: at session end, on failure, on Ctrl-C (pytest still finishes
the session) and on SIGTERM (turned into KeyboardInterrupt while the lab is up).
"""

from __future__ import annotations

import atexit
import os
import signal

import pytest

from tests.lab.labutil import (
    SESSION_LAB, SESSION_NODES, SLOW_NODE, SLOW_RATE, lab_cli, lab_json, lab_leftovers,
)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def lab_prereqs() -> None:
    """Skip lab tests where they cannot run -- except in CI, where that is a failure."""
    from diag.lab.cluster import prerequisite_problem

    problem = prerequisite_problem()
    if problem and in_ci():
        pytest.fail(f"CI=true and lab tests cannot run: {problem}", pytrace=False)
    if problem:
        pytest.skip(problem)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _down_once(name: str, done: list[bool]) -> None:
    if not done:
        done.append(True)
        lab_cli("down", "--name", name)


@pytest.fixture(scope="session")
def session_lab(lab_prereqs):
    """``ddiag lab up --json`` of the shared lab; yields its status document."""
    done: list[bool] = []
    atexit.register(_down_once, SESSION_LAB, done)  # if pytest itself dies uncleanly
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        state = lab_json("up", "--name", SESSION_LAB, "--nodes", str(SESSION_NODES),
                         "--slow-link", f"{SLOW_NODE}={SLOW_RATE}")
        yield state
    finally:
        _down_once(SESSION_LAB, done)
        signal.signal(signal.SIGTERM, old_term)
    left = lab_leftovers(state)
    assert not left, f"ddiag lab down left these behind: {left}"
