"""analyze reads heartbeats with the watcher's reader (diag.format.heartbeat): the same
fields, the same checks, so a heartbeat the watcher refuses is not evidence here either."""

from __future__ import annotations

import json

import pytest

from diag.analyze import analyze
from diag.format.heartbeat import scan_beats
from tests.analyze.factories import RankWriter


def stopped_rank_1(tmp_path) -> None:
    """Two ranks after 10 all_reduces: rank 0 waits inside #11, rank 1 never issued it."""
    a, b = (RankWriter(tmp_path, r, 2) for r in range(2))
    for _ in range(10):
        a.coll(), b.coll()
    a.write().pending()
    b.write().heartbeat(span="data")


def test_the_culprits_heartbeat_is_evidence_with_its_file(tmp_path):
    stopped_rank_1(tmp_path)
    result = analyze(tmp_path)
    top = result.findings[0]
    assert (top.category.value, top.culprit.ranks) == ("rank_hang", (1,))
    beat = next(e for e in top.evidence if e.file.endswith("rank00001.json"))
    assert "seq={'0': 10}" in beat.text and "pending=None" in beat.text


@pytest.mark.parametrize("broken", [{"t": "soon"}, {"pending": "all_reduce"}, {"schema": 99}],
                         ids=["t_not_a_number", "pending_not_an_object", "newer_schema"])
def test_a_heartbeat_the_watcher_refuses_is_not_read_by_analyze(tmp_path, broken):
    stopped_rank_1(tmp_path)
    path = tmp_path / "heartbeat" / "rank00000.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **broken}))
    assert path in scan_beats(tmp_path)[1]  # the watcher names it malformed
    result = analyze(tmp_path)
    # without rank 0's pending all_reduce #11 both ranks stand at #10: no hang to report
    assert result.detector_errors == []
    assert not [f for f in result.findings if f.category.value == "rank_hang"]
