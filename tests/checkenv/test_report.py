"""Merging results into a report, snapshot files both ways, and the analyze detector."""

from __future__ import annotations

import dataclasses
import json

from diag.format import schema
from diag.analyze import analyze
from diag.analyze.detectors import DETECTORS, config
from diag.checkenv.report import attach, build_report, merge, run_local
from diag.checkenv.snapshot import (
    GroupOutcome, read_snapshots, snapshot_from_json, write_snapshot,
)
from diag.checkenv.types import fail, ok
from diag.verdict import Status
from diag.checkenv.facts import Versions
from tests.checkenv.factories import snap


def with_results(s):
    return dataclasses.replace(s, results=run_local(s.facts))


def test_identical_results_of_many_ranks_merge_into_one_row():
    rows = attach([ok("host.shm", "/dev/shm is 16.0 GiB")], 0, "node1") + \
        attach([ok("host.shm", "/dev/shm is 16.0 GiB")], 3, "node2") + \
        attach([fail("net.x", "bad", "fix")], 2, "node2")
    merged = merge(rows)
    assert [(r.check, r.culprit.ranks, r.culprit.hosts) for r in merged] == [
        ("net.x", (2,), ("node2",)), ("host.shm", (0, 3), ("node1", "node2"))]


def test_report_of_a_healthy_job():
    report = build_report([with_results(snap(r)) for r in range(4)], 4, run_dir="/r")
    doc = report.to_json()
    assert doc["format"] == schema.CHECK_ENV and doc["schema"] == 1
    assert doc["status"] == "ok" and doc["summary"]["fail"] == 0
    assert doc["nodes"] == {"node1": [0, 1], "node2": [2, 3]} and doc["missing_ranks"] == []
    shm = next(r for r in doc["results"] if r["check"] == "host.shm")
    assert shm["ranks"] == [0, 1, 2, 3] and shm["status"] == "ok"


def test_report_with_a_missing_rank_and_a_failed_check():
    bad = snap(2, env_extra={"GLOO_SOCKET_IFNAME": "eth9"})
    report = build_report([with_results(snap(0)), with_results(snap(1)), with_results(bad)], 4)
    assert report.status is Status.FAIL and report.missing_ranks == (3,)
    iface = next(r for r in report.results if r.check == "net.gloo_ifname"
                 and r.status is Status.FAIL)
    assert iface.culprit.hosts == ("node2",) and iface.culprit.ranks == (2,)


def test_snapshot_round_trips_through_its_file(tmp_path):
    s = with_results(snap(1, group=GroupOutcome(True, None, 0.4, 1.8e9)))
    path = tmp_path / "env" / "rank00001.json"
    write_snapshot(path, s)
    doc = json.loads(path.read_text())
    assert doc["format"] == schema.ENV_SNAPSHOT and doc["rank"] == 1
    assert snapshot_from_json(doc) == s


def test_unreadable_snapshots_are_reported_not_raised(tmp_path):
    write_snapshot(tmp_path / "rank00000.json", snap(0))
    (tmp_path / "rank00001.json").write_text('{"format": "ddiag.env_snapshot", "sch')
    newer = {**snap(2).to_json(), "schema": 99}
    (tmp_path / "rank00002.json").write_text(json.dumps(newer))
    snaps, problems = read_snapshots(tmp_path)
    assert [s.rank for s in snaps] == [0] and len(problems) == 2
    assert "schema 99 is newer" in " ".join(problems)


def test_snapshots_of_an_earlier_launch_are_told_apart(tmp_path):
    write_snapshot(tmp_path / "rank00000.json", snap(0, launch="new"))
    write_snapshot(tmp_path / "rank00007.json", snap(7, world=8, launch="old"))
    snaps, problems = read_snapshots(tmp_path, "new")
    assert [s.rank for s in snaps] == [0]
    assert problems == [f"{tmp_path}: ignored 1 snapshot(s) of an earlier launch"]
    assert len(read_snapshots(tmp_path)[0]) == 2


def test_analyze_reads_only_the_newest_launch(tmp_path):
    old = [snap(r, world=8, launch="old", time=1.0, env_extra={"MASTER_ADDR": "0.0.0.0"})
           for r in range(8)]
    new = [snap(r, launch="new", time=2.0) for r in range(4)]
    assert findings(tmp_path, old + new) == {}


def write_run(tmp_path, snaps):
    for s in snaps:
        write_snapshot(tmp_path / "env" / f"rank{s.rank:05d}.json", with_results(s))
    return tmp_path


def test_detector_is_registered():
    assert config.detect in DETECTORS


def test_analyze_turns_snapshots_into_findings_naming_node_and_variable(tmp_path):
    eth9 = GroupOutcome(False, "RuntimeError: Unable to find address for: eth9", 0.01)
    waited = GroupOutcome(False, "DistStoreError: wait timeout after 10000ms", 10.0)
    snaps = [snap(r, group=waited) for r in (0, 1)]
    snaps += [snap(r, env_extra={"GLOO_SOCKET_IFNAME": "eth9"}, group=eth9) for r in (2, 3)]
    result = analyze(write_run(tmp_path, snaps))
    mine = [f for f in result.findings if f.detector == "env_snapshots"]
    iface = next(f for f in mine if f.details["check"] == "net.gloo_ifname")
    assert iface.category.value == "wrong_interface" and iface.root_cause
    assert iface.culprit.hosts == ("node2",) and iface.culprit.env_var == "GLOO_SOCKET_IFNAME"
    assert iface.evidence[0].file.endswith("rank00002.json")
    group = next(f for f in mine if f.details["check"] == "cross.group")
    assert not group.root_cause and group.culprit.ranks == (2, 3)
    assert result.findings.index(iface) < result.findings.index(group)  # cause first


def findings(run_dir, snaps) -> dict[str, object]:
    result = analyze(write_run(run_dir, snaps))
    return {f.details["check"]: f for f in result.findings if f.detector == "env_snapshots"}


def test_analyze_master_addr_netmask_is_env_misconfig(tmp_path):
    found = findings(tmp_path, [snap(r, env_extra={"MASTER_ADDR": "255.255.0.0"})
                                for r in range(4)])
    f = found["net.master_addr"]
    assert f.category.value == "env_misconfig" and f.culprit.env_var == "MASTER_ADDR"
    assert f.culprit.ranks == (0, 1, 2, 3)


def test_analyze_version_mismatch_names_the_node(tmp_path):
    old = Versions("3.10.12", "2.13.0", "12.4", "2.21.5", "550.54", "0.1.0")
    found = findings(tmp_path, [snap(r, world=6, **({"versions": old} if r in (2, 3) else {}))
                                for r in range(6)])
    f = found["cross.versions"]
    assert f.category.value == "version_mismatch" and f.culprit.hosts == ("node2",)


def test_analyze_of_healthy_snapshots_has_no_findings(tmp_path):
    result = analyze(write_run(tmp_path, [snap(r) for r in range(4)]))
    assert [f for f in result.findings if f.detector == "env_snapshots"] == []
