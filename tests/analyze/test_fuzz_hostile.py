"""Hostile values in the documents ddiag reads: event-log headers, heartbeats and probe
documents with huge, negative, wrongly typed, control-character and HTML values.

For every generated run directory: no exception escapes the loaders, the analysis, the
summary, the heartbeat reader or the renderers; each run finishes within a bound; and the
Python heap stays under 1 GB while it runs (tracemalloc's peak).
"""

from __future__ import annotations

import io
import json
import time
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from diag.format import schema
from diag.analyze import analyze
from diag.runtime.eventlog import encode
from diag.report.terminal import render_analysis, render_summary
from diag.report.html import render_html
from diag.analyze.summary import summarize
from diag.format.heartbeat import read_beats

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
TIME_BOUND_S = 20.0
HEAP_BOUND = 2**30

HOSTILE_TEXT = st.sampled_from([
    "<script>document.title='pwned'</script>", '"><img src=x onerror=alert(1)>',
    "\x1b]52;c;cHduZWQ=\x07", "\x1b]0;title\x07", "\x9b31m", "[red]x[/red]", "\x00\x01",
    "a" * 10_000, "", "../../etc/passwd", "node\nnode",
]) | st.text(max_size=30)
HUGE_INTS = st.sampled_from([10**12, 10**400 // 10**380, 2**63, -(2**63), -1, 0, 2**31])
HOSTILE = st.recursive(
    st.none() | st.booleans() | HUGE_INTS | st.integers() | HOSTILE_TEXT
    | st.floats(allow_nan=True, allow_infinity=True),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8)

HEADER_FIELDS = ("rank", "world_size", "host", "run_id", "pid", "local_rank", "backend", "t")
BEAT_FIELDS = ("rank", "pid", "host", "t", "step", "seq", "pending", "span", "fr_signal")


def _header(rank: int, hostile: dict) -> dict:
    return {"kind": "header", **schema.stamp(schema.EVENTS), "rank": rank, "world_size": 2,
            "host": f"node{rank}", "run_id": "r", **hostile}


def _records(rank: int, hostile: dict) -> list[dict]:
    recs = [{"kind": "collective", "rank": rank, "op": "all_reduce", "group": "0",
             "seq": i, "in_numel": 4, "t": 1.0 + i, **hostile} for i in range(1, 4)]
    return recs + [{"kind": "step", "rank": rank, "step": 0, "t": 2.0, "dur_s": 0.1,
                    **hostile}]


def _write_run(d, header: dict, record: dict, beat: dict, probe: dict) -> None:
    for sub in ("events", "heartbeat", "probes"):
        (d / sub).mkdir()
    for rank in (0, 1):
        lines = [_header(rank, header if rank else {})] + _records(rank, record)
        (d / "events" / f"rank{rank:05d}.jsonl").write_bytes(
            b"".join(encode(r) for r in lines))
    (d / "heartbeat" / "rank00000.json").write_text(json.dumps(
        {**schema.stamp(schema.HEARTBEAT), "rank": 0, "t": time.time(), **beat}, default=str))
    links = {**schema.stamp(schema.PROBE_LINKS), "median_gbit_per_s": 10.0,
             "links": [{"src": "a", "dst": "b", "gbit_per_s": 0.1, "slow": True}],
             "slow_nodes": ["a"], **probe}
    (d / "probes" / "links.json").write_text(json.dumps(links, default=str))


def _exercise(d) -> None:
    result = analyze(d)
    assert result.detector_errors == []
    console = Console(file=io.StringIO(), width=100, color_system=None)
    render_analysis(result, console=console)
    render_html(result, result.inputs)
    render_summary(summarize(d), console=console)
    read_beats(d)


def _bounded(d) -> None:
    tracemalloc.start()
    start = time.monotonic()
    try:
        _exercise(d)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < TIME_BOUND_S
    assert peak < HEAP_BOUND, f"heap peak {peak >> 20} MB"


def _fields(names: tuple) -> st.SearchStrategy:
    return st.dictionaries(st.sampled_from(names), HOSTILE, max_size=4)


@SETTINGS
@given(header=_fields(HEADER_FIELDS),
       record=_fields(("rank", "seq", "group", "op", "in_numel", "t", "step", "dur_s")),
       beat=_fields(BEAT_FIELDS),
       probe=_fields(("median_gbit_per_s", "links", "slow_nodes", "nodes")))
def test_hostile_headers_heartbeats_and_probe_documents(tmp_path_factory, header, record,
                                                       beat, probe):
    d = tmp_path_factory.mktemp("hostile")
    _write_run(d, header, record, beat, probe)
    _bounded(d)


@SETTINGS
@given(link=st.dictionaries(st.sampled_from(("src", "dst", "gbit_per_s", "slow",
                                             "nominal_gbit_per_s", "below_nominal")),
                            HOSTILE, max_size=6),
       nodes=st.lists(HOSTILE, max_size=3))
def test_hostile_probe_links(tmp_path_factory, link, nodes):
    d = tmp_path_factory.mktemp("links")
    _write_run(d, {}, {}, {}, {"links": [{"slow": True, **link}], "slow_nodes": nodes})
    _bounded(d)
