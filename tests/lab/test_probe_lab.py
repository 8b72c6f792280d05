"""ddiag probe on the lab: the links matrix finds the throttled node."""

from __future__ import annotations

import json
import time

import pytest

from tests.lab.labutil import SLOW_MBIT, SLOW_NODE, ddiag_argv, lab_env, run

pytestmark = pytest.mark.lab


def test_links_flag_exactly_the_throttled_nodes_links(session_lab, tmp_path, record_property):
    nodes = sorted(session_lab["addrs"])
    start = time.monotonic()
    res = run([*ddiag_argv(), "probe", "links", "--launcher", "slurm", "--nodes",
               str(len(nodes)), "--out", str(tmp_path), "--json"],
              timeout=120, env=lab_env(session_lab["name"]))
    elapsed = time.monotonic() - start
    assert res.returncode == 1, res.stderr[-4000:]  # 1: slow links were flagged
    doc = json.loads(res.stdout)
    record_property("matrix_s", round(doc["seconds"], 2))
    record_property("wall_s", round(elapsed, 1))
    rates = {(x["src"], x["dst"]): round(x["gbit_per_s"] * 1000) for x in doc["links"]}
    record_property("mbit_per_s", rates)
    print(f"links: {rates} Mbit/s; matrix {doc['seconds']:.1f} s, wall {elapsed:.1f} s")
    expected = {(a, b) for a in nodes for b in nodes if a != b and SLOW_NODE in (a, b)}
    assert len(doc["links"]) == len(nodes) * (len(nodes) - 1)
    assert {tuple(p) for p in doc["slow_links"]} == expected
    assert doc["slow_nodes"] == [SLOW_NODE]
    for link in doc["links"]:
        if link["slow"]:
            assert 0.75 * SLOW_MBIT <= link["gbit_per_s"] * 1000 <= 1.25 * SLOW_MBIT, link
    assert elapsed < 60
