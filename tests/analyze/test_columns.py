"""analyze's columns (issue 22): the compact event reader against the full one, the
worker processes against one process, and the Flight Recorder fast path against the
per-entry one. Each pair must give the same values, problems and verdicts."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from diag.analyze import analyze
from diag.analyze.collops import fr_ops, from_fr_entry, make_table
from diag.analyze.eventcols import CompactLog, all_records, ops_of, read_compact, steps_of
from diag.analyze.inputs import Limits
from diag.analyze.progress import by_group
from diag.format import schema
from diag.format.events import read_events
from tests.analyze.factories import T0, RankWriter, fr_entry

HEADER = {"kind": "header", **schema.stamp(schema.EVENTS), "rank": 1, "world_size": 4,
          "host": "n1", "run_id": "r"}


def coll(seq, **extra):
    return {"kind": "collective", "rank": 1, "op": "all_reduce", "group": "0", "seq": seq,
            "in_numel": 8, "out_numel": 8, "in_dtype": "float32", "group_size": 4,
            "t": T0 + seq, "step": seq, "dur_s": 0.01, **extra}


def step(n, **extra):
    return {"kind": "step", "rank": 1, "step": n, "t": T0, "dur_s": 0.2, "iter_s": 0.25,
            "phases": {"data": 0.01, "forward": 0.05}, "loss": 2.0, "comm_s": 0.01, **extra}


def write_lines(path, lines: list) -> None:
    path.write_bytes(b"".join(l if isinstance(l, bytes) else json.dumps(l).encode() + b"\n"
                              for l in lines))


def same_reading(path) -> None:
    """Both readers give the same problems, collectives, steps and whole records."""
    full, full_problems = read_events(path)
    compact, compact_problems = read_compact(path)
    assert [str(p) for p in compact_problems] == [str(p) for p in full_problems]
    assert len(compact) == len(full)
    for f, c in zip(full, compact):
        assert c.header == f.header
        assert ops_of(c).rows() == ops_of(f).rows()
        fs, cs = steps_of(f), steps_of(c)
        assert fs.step.tolist() == cs.step.tolist() and fs.line.tolist() == cs.line.tolist()
        for name in fs.floats:
            assert np.array_equal(fs.col(name), cs.col(name), equal_nan=True), name
        assert sorted(fs.phases) == sorted(cs.phases)
        for kind in ("exception", "close", "span"):
            assert c.of_kind(kind) == f.of_kind(kind)
        assert c.count("step") == len(f.of_kind("step"))
        assert c.count("collective") == len(f.of_kind("collective"))
        assert c.n_records == len(f.records)
        assert [r.get("kind") for r in all_records(c)] == [r.get("kind") for r in f.records]


def test_messy_log_reads_the_same_both_ways(tmp_path):
    path = tmp_path / "rank1.jsonl"
    write_lines(path, [
        coll(0), HEADER, coll(1), step(0), coll(2, p2p=True, peer=0),
        {**coll(3), "seq": "x"}, coll(4, in_numel=2**70), coll(5, in_dtype=7), step(1, loss="nan"),
        step(2, nonfinite={"param": "w"}), b"\n", b"not json\n", b"[1, 2]\n",
        {"kind": "exception", "rank": 1, "type": "E", "message": "m", "t": T0},
        coll(6, op=None, group=None), coll(7, in_numel=3.0), step(3, phases=None),
        {**HEADER, "rank": "bad"}, coll(8), {**HEADER, "rank": 2}, coll(1), coll(1, op="x"),
        step(0, iter_s=None), {"kind": "close", "rank": 2, "dropped": 0},
        b'{"kind": "collective", "seq": 9, "grou',
    ])
    same_reading(path)
    compact, _ = read_compact(path)
    assert isinstance(compact[-1], CompactLog) and len(compact[-1].ops) == 2


RECORD = st.one_of(
    st.builds(coll, st.integers(-3, 40),
              in_numel=st.one_of(st.integers(0, 2**66), st.none(), st.floats(allow_nan=False),
                                 st.text(max_size=3)),
              group=st.sampled_from(["0", "1", None, 3]), p2p=st.sampled_from([False, True, 1]),
              t=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.none(),
                          st.booleans())),
    st.builds(step, st.one_of(st.integers(-2, 50), st.none(), st.text(max_size=2)),
              loss=st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                             st.sampled_from(["nan", "inf", None])),
              phases=st.one_of(st.none(), st.dictionaries(
                  st.sampled_from(["data", "forward", "x"]),
                  st.one_of(st.floats(0, 1), st.text(max_size=2)), max_size=3))),
    st.just(HEADER), st.just({**HEADER, "rank": 9}), st.just(b"{torn"),
    st.just({"kind": "note", "rank": 1, "text": "x"}),
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(RECORD, max_size=25))
def test_any_log_reads_the_same_both_ways(tmp_path, records):
    path = tmp_path / "rank1.jsonl"
    write_lines(path, [r if isinstance(r, bytes) else r for r in records])
    same_reading(path)


def test_repeated_seqs_keep_the_last_row(tmp_path):
    path = tmp_path / "rank1.jsonl"
    write_lines(path, [HEADER, coll(1), coll(2), coll(2, op="broadcast"), coll(3)])
    (log,), _ = read_compact(path)
    seqs = by_group({1: [log.ops]})["0"][1]
    assert list(seqs) == [1, 2, 3] and seqs.last == 3 and 2 in seqs and 4 not in seqs
    assert seqs[2].op == "broadcast" and seqs[2].line == 4
    with pytest.raises(KeyError):
        seqs[4]


def run_dir(tmp_path):
    """4 ranks: rank 2 hangs at step 30 (event logs, heartbeats) plus FR dumps of 4 more."""
    for r in range(4):
        w = RankWriter(tmp_path, r, 4)
        for s in range(30 if r == 2 else 40):
            w.step_rec(t=T0 + s).coll(t=T0 + s + 0.01 * r)
        (w.heartbeat() if r == 2 else w.pending()).write()
    for r in range(4):
        entries = [fr_entry(s, done=s < 50) for s in range(1, 50 if r == 1 else 51)]
        doc = {"version": "2.10", "pg_config": {"0": {"ranks": "[0, 1, 2, 3]"}},
               "entries": entries}
        (tmp_path / "fr" / f"dump_rank{r}").parent.mkdir(exist_ok=True)
        (tmp_path / "fr" / f"dump_rank{r}").write_bytes(pickle.dumps(doc))
    return tmp_path


def test_workers_give_what_one_process_gives(tmp_path):
    root = run_dir(tmp_path)
    alone = analyze(root, Limits(workers=1)).to_json()
    side_by_side = analyze(root, Limits(workers=2, parallel_bytes=0)).to_json()
    alone.pop("seconds"), side_by_side.pop("seconds")
    assert side_by_side == alone
    assert alone["findings"][0]["culprit"]["ranks"] == [2]
    # The victims wait in the collective their heartbeats name, which their logs lack.
    victims = next(f for f in alone["findings"] if not f["root_cause"])
    assert all(e["text"].startswith("heartbeat: rank") and "heartbeat" in e["file"]
               for e in victims["evidence"])


def test_fr_dump_fast_path_equals_the_per_entry_path():
    entries = [fr_entry(s, sizes=((4, s),), done=s < 9) for s in range(1, 10)]
    entries[3]["profiling_name"] = "nccl:all_gather_into_tensor"
    entries[4]["is_p2p"] = True
    fast = fr_ops(entries, 3, "f")
    slow = make_table(3, "f", [from_fr_entry(e, i) for i, e in enumerate(
        e for e in entries if not e["is_p2p"])])
    assert fast.rows() == slow.rows() and len(fast) == 8
    assert fast.row(3).op == "all_gather_into_tensor" and fast.row(3).out_numel == 16
    odd = [*entries[:2], {**entries[2], "collective_seq_id": "3"}]
    rows = fr_ops(odd, 3, "f").rows()  # one odd entry: every entry by the careful path
    assert [r.seq for r in rows] == [1, 2, 0] and rows[0] == fast.row(0)


def test_unknown_cells_come_back_as_none():
    table = make_table(0, "f", [("0", 1, "x", None, 2**70, None, None, False, None, None,
                                 None, None, None)])
    row = table.row(0)
    assert (row.in_numel, row.out_numel, row.dtype, row.t, row.state) == (
        None, None, None, None, "pending")
    assert math.isnan(table.dur_s[0])


def straggling_run(root):
    """3 ranks x 40 steps; rank 1 reaches each collective 50 ms late in steps 20-39 only."""
    for r in range(3):
        w = RankWriter(root, r, 3)
        for s in range(40):
            late = 0.05 if r == 1 and s >= 20 else 0.001 * r
            w.step_rec(t=T0 + s).coll(t=T0 + s + late)
        w.close().write()
    return root


def test_a_window_analyses_only_its_steps(tmp_path):
    from diag.analyze.eventcols import Window

    root = straggling_run(tmp_path)
    late = analyze(root, Limits(window=Window(first=20))).to_json()
    early = analyze(root, Limits(window=Window(last=19))).to_json()
    assert [f["culprit"]["ranks"] for f in late["findings"] if f["category"] == "straggler"] \
        == [[1]]
    assert not [f for f in early["findings"] if f["category"] == "straggler"]
    assert late["sources"]["window"] == "steps 20:" and early["sources"]["window"] == "steps :19"
    since = analyze(root, Limits(window=Window(since=T0 + 20))).to_json()
    assert [f["culprit"]["ranks"] for f in since["findings"] if f["category"] == "straggler"] \
        == [[1]]


def test_window_options_are_checked_and_named(tmp_path):
    from click.testing import CliRunner

    from diag.cli import main

    root = straggling_run(tmp_path)
    for args, word in ((["--steps", "9:3"], "--steps"), (["--steps", "a:b"], "--steps"),
                       (["--since", "yesterday"], "--since")):
        res = CliRunner().invoke(main, ["analyze", str(root), *args])
        assert res.exit_code == 2 and word in res.output and args[1] in res.output
    res = CliRunner().invoke(main, ["analyze", str(root), "--steps", "20:", "--json"])
    assert res.exit_code == 1 and json.loads(res.output)["sources"]["window"] == "steps 20:"
    iso = CliRunner().invoke(main, ["analyze", str(root), "--since", "2027-01-15T08:00:20+00:00",
                                    "--json"])
    assert json.loads(iso.output)["sources"]["window"] == f"since t={T0 + 20:.0f}"


def test_progress_counts_every_file_read_and_speaks_only_when_slow(tmp_path, capsys):
    from diag.cli.output import Throttled

    root = run_dir(tmp_path)
    calls = []
    analyze(root, Limits(workers=2, parallel_bytes=0), progress=lambda *a: calls.append(a))
    assert [c[0] for c in calls] == list(range(1, 9)) and {c[1] for c in calls} == {8}
    assert calls[-1][2] == sum(f.stat().st_size for f in root.rglob("*")
                               if f.suffix == ".jsonl" or f.parent.name == "fr")
    now = [0.0]
    quiet = Throttled("analyze", clock=lambda: now[0])
    for n in range(1, 5):
        quiet(n, 4, n)  # all done within the first 2 s: nothing said
    slow = Throttled("analyze", clock=lambda: now[0])
    for n in range(1, 5):
        now[0] += 1.5
        slow(n, 4, n * 2**20)
    assert capsys.readouterr().err.splitlines() == [
        "analyze: 2/4 files read (2 MB)", "analyze: 4/4 files read (4 MB)"]


def _dies_on_rank3(job, limits):
    """A worker's job that ends its process on one file, as the OOM killer would."""
    import os

    from diag.analyze.inputs import read_compact, read_pickle

    if job[1].endswith("dump_rank3"):
        os._exit(1)
    return read_compact(job[1]) if job[0] == "events" else read_pickle(job[1], job[2], limits)


def test_a_worker_that_dies_costs_its_files_not_the_analysis(tmp_path, monkeypatch):
    from diag.analyze import inputs

    root = run_dir(tmp_path)
    monkeypatch.setattr(inputs, "_run_job", _dies_on_rank3)
    result = analyze(root, Limits(workers=2, parallel_bytes=0))
    lost = [p for p in result.problems if "worker process" in p.message]
    assert [p.file for p in lost] == [str(root / "fr" / "dump_rank3")]  # that one alone
    assert len(result.inputs.events) == 4 and sorted(result.inputs.fr) == [0, 1, 2]
    assert result.findings[0].culprit.ranks == (2,)


def tuple_bomb(depth: int = 64) -> bytes:
    """A pickle of {t: 1} where t = (t', t') nests ``depth`` times: 2^depth to hash,
    inside the unpickler's own C loop. Written opcode by opcode: building it in Python
    would hash it here."""
    def get(i: int) -> bytes:
        return b"j" + i.to_bytes(4, "little")  # LONG_BINGET memo[i]

    # PROTO 4, EMPTY_DICT, EMPTY_TUPLE, MEMOIZE (memo[0]), POP
    out = [b"\x80\x04", b"}", b")", b"\x94", b"0"]
    for i in range(depth):
        out += [get(i), get(i), b"\x86", b"\x94", b"0"]  # TUPLE2, MEMOIZE as memo[i + 1]
    out += [get(depth), b"K\x01", b"s", b"."]  # the key, BININT1 1, SETITEM, STOP
    return b"".join(out)


def test_a_pickle_built_to_cost_time_is_stopped_and_named(tmp_path):
    import time

    root = run_dir(tmp_path)
    (root / "fr" / "dump_rank7").write_bytes(tuple_bomb())
    start = time.monotonic()
    result = analyze(root, Limits(pickle_seconds=2))
    assert time.monotonic() - start < 30
    (slow,) = [p for p in result.problems if p.file.endswith("dump_rank7")]
    assert "ran past 2 s" in slow.message
    assert sorted(result.inputs.fr) == [0, 1, 2, 3]  # the other dumps were read
    assert result.findings[0].culprit.ranks == (2,)
