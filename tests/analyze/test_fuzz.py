"""Hostile and broken inputs never crash the loaders or the analysis."""

from __future__ import annotations

import json
import pickle

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diag.format import schema
from diag.analyze import analyze
from diag.runtime.eventlog import encode
from diag.format.events import read_events

SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                       children, max_size=4),
    max_leaves=20)


def valid_log() -> bytes:
    header = {"kind": "header", **schema.stamp(schema.EVENTS), "rank": 0, "world_size": 2}
    recs = [header] + [{"kind": "collective", "rank": 0, "op": "all_reduce", "group": "0",
                        "seq": i, "in_numel": 4, "t": 1.0 + i} for i in range(1, 6)]
    return b"".join(encode(r) for r in recs)


@SETTINGS
@given(cut=st.integers(min_value=0, max_value=len(valid_log())), junk=st.binary(max_size=200))
def test_truncated_event_log_with_junk(tmp_path_factory, cut, junk):
    d = tmp_path_factory.mktemp("run")
    (d / "events").mkdir()
    (d / "events" / "rank00000.jsonl").write_bytes(valid_log()[:cut] + junk)
    read_events(d / "events" / "rank00000.jsonl")
    result = analyze(d)
    assert result.detector_errors == []


@SETTINGS
@given(records=st.lists(st.dictionaries(
    st.sampled_from(["kind", "rank", "seq", "op", "group", "in_numel", "t", "step", "loss",
                     "phases", "nonfinite", "pending", "format", "schema", "world_size"]),
    json_values, max_size=10), max_size=12))
def test_records_with_arbitrary_field_values(tmp_path_factory, records):
    d = tmp_path_factory.mktemp("run")
    (d / "events").mkdir()
    header = {"kind": "header", **schema.stamp(schema.EVENTS), "rank": 0, "world_size": 2}
    body = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    (d / "events" / "rank00000.jsonl").write_bytes(encode(header) + body)
    (d / "hb.json").write_text(json.dumps({**schema.stamp(schema.HEARTBEAT),
                                           **(records[0] if records else {})}))
    assert analyze(d).detector_errors == []


@SETTINGS
@given(doc=json_values)
def test_arbitrary_json_and_pickles_as_flight_recorder_dumps(tmp_path_factory, doc):
    d = tmp_path_factory.mktemp("fr")
    fr = {"version": "2.10", "pg_config": doc, "entries": [doc, {"profiling_name": doc}]}
    (d / "rank0.json").write_text(json.dumps(fr))
    (d / "nccl_trace_rank_1").write_bytes(pickle.dumps(fr)[: max(1, len(str(doc)))])
    (d / "other.json").write_text(json.dumps(doc))
    assert analyze(d).detector_errors == []


@SETTINGS
@given(data=st.binary(max_size=2000))
def test_random_bytes_in_any_file(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("blob")
    (d / "log.txt").write_bytes(data)
    (d / "dump.pkl").write_bytes(b"\x80" + data)
    assert analyze(d).detector_errors == []
