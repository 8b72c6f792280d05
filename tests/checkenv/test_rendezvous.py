"""The rendezvous pre-flight: real sockets on this host, and the pure check over its rows."""

from __future__ import annotations

import socket
import threading
import time

from diag.format import schema
from diag.checkenv import rendezvous
from diag.verdict import Category, Status
from tests.util import free_port


def test_master_accepts_a_client_that_connects_by_name():
    port = free_port()
    deadline = time.monotonic() + 5
    served: dict = {}
    thread = threading.Thread(target=lambda: served.update(rendezvous.serve(port, 1, deadline)))
    thread.start()
    row = rendezvous.connect("localhost", port, deadline)
    thread.join(10)
    assert row["outcome"] == "open", row
    assert served == {"role": "master", "outcome": "listening", "accepted": 1}


def test_client_reports_refused_once_its_deadline_passes():
    row = rendezvous.connect("127.0.0.1", free_port(), time.monotonic() + 0.5)
    assert row["outcome"] == "refused"


def test_master_reports_a_port_in_use():
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen(1)
        row = rendezvous.serve(busy.getsockname()[1], 1, time.monotonic() + 1)
    assert row["outcome"] == "bind_failed" and row["error"]


def _doc(*rows: dict) -> dict:
    return {**schema.stamp(schema.RENDEZVOUS), "port": 29555, "nodes": len(rows),
            "rows": list(rows), "error": None}


MASTER = {"role": "master", "outcome": "listening", "node": "node1", "master": "node1"}


def test_dropped_port_fails_naming_the_nodes_and_master_port():
    doc = _doc(MASTER, {"role": "client", "outcome": "timeout", "node": "node3"},
               {"role": "client", "outcome": "timeout", "node": "node2"},
               {"role": "client", "outcome": "open", "node": "node4"})
    [result] = rendezvous.check_rendezvous(doc)
    assert result.status is Status.FAIL and result.culprit.env_var == "MASTER_PORT"
    assert result.culprit.hosts == ("node2", "node3")
    assert "node1:29555" in result.summary and "dropped" in result.summary
    assert rendezvous.blocking(doc)


def test_all_reached_is_ok_and_does_not_block():
    doc = _doc(MASTER, {"role": "client", "outcome": "open", "node": "node2"})
    assert [r.status for r in rendezvous.check_rendezvous(doc)] == [Status.OK]
    assert not rendezvous.blocking(doc)


def test_bind_failure_is_an_env_fault_on_the_master():
    doc = _doc({**MASTER, "outcome": "bind_failed", "error": "Address already in use"})
    [result] = rendezvous.check_rendezvous(doc)
    assert result.culprit.hosts == ("node1",) and result.category is Category.ENV_MISCONFIG


def test_analyze_ranks_the_unreachable_port_above_its_symptom(tmp_path):
    """A run directory where check-env launched no rank: the pre-flight file alone."""
    import json

    from diag.analyze import analyze

    doc = _doc(MASTER, {"role": "client", "outcome": "timeout", "node": "node2"})
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "rendezvous.json").write_text(json.dumps(doc))
    top = analyze(tmp_path).findings[0]
    assert top.category.value == "network_unreachable" and top.root_cause
    assert top.culprit.env_var == "MASTER_PORT" and top.culprit.hosts == ("node2",)
    assert top.evidence[0].file.endswith("rendezvous.json")
