"""Hostile and broken inputs to ``analyze`` and ``summary`` (issue 18): every one is read
in bounded time and memory, reported as a problem, and given an exit code a CI gate can
trust (0 looked and found nothing, 1 findings, 2 nothing to analyse / mixed runs / bad
input, 3 a detector failed)."""

from __future__ import annotations

import json
import os
import pickle
import resource
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.format import schema
from diag.analyze import analyze
from diag.cli import main
from diag.format.events import read_events
from tests.analyze.factories import RankWriter, billion_laughs, write_events
from tests.util import REPO, run

DDIAG = str(REPO / ".venv" / "bin" / "ddiag")
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def cli_json(*args: str) -> tuple[int, dict]:
    res = cli(*args, "--json")
    assert "Traceback" not in res.output, res.output
    return res.exit_code, json.loads(res.stdout)


def capped(limit_bytes: int):
    """For a subprocess: at most ``limit_bytes`` of address space, so an unbounded
    allocation fails fast with MemoryError instead of summoning the OOM killer."""
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def messages(doc: dict) -> str:
    return "\n".join(f"{p['file']}: {p['message']}" for p in doc["problems"])


# 4: the world size ----------------------------------------------------------------------

def test_a_world_size_of_10_to_the_12_is_refused_on_read_without_allocating(tmp_path):
    for rank in (0, 1):
        write_events(tmp_path / "events" / f"rank{rank:05d}.jsonl",
                     {"rank": rank, "world_size": 10**12, "run_id": "r"})
    for verb in ("analyze", "summary"):
        res = run([DDIAG, verb, str(tmp_path), "--json"], timeout=60,
                  preexec_fn=capped(1 << 30))
        assert "Traceback" not in res.stderr and res.returncode in (0, 1), res.stderr
        doc = json.loads(res.stdout)
        assert "world_size" in messages(doc) and "1000000000000" in messages(doc)
        assert doc["missing_ranks"] == []


def test_missing_ranks_print_as_ranges_and_the_json_stays_bounded(tmp_path):
    world = 2**20
    for rank in (0, 1, 7):
        write_events(tmp_path / "events" / f"rank{rank:05d}.jsonl",
                     {"rank": rank, "world_size": world, "run_id": "r"})
    for verb in ("analyze", "summary"):
        text = cli(verb, str(tmp_path)).output
        assert f"2-6, 8-{world - 1}" in text and "3, 4" not in text
        _, doc = cli_json(verb, str(tmp_path))
        assert doc["missing_rank_ranges"] == [[2, 6], [8, world - 1]]
        assert doc["missing_ranks"][:6] == [2, 3, 4, 5, 6, 8]
        assert len(doc["missing_ranks"]) == 1024


# 5: documents that unfold ---------------------------------------------------------------

# Peak RSS from VmHWM, this process's own memory: ru_maxrss keeps the high-water mark of
# the image before exec, i.e. of the pytest process this one was forked from.
MEASURE = """
import json, re, sys, time
from diag.analyze import analyze
start = time.monotonic()
result = analyze(sys.argv[1])
hwm_kb = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
print(json.dumps({"s": time.monotonic() - start, "outcome": result.outcome,
                  "rss_mb": hwm_kb / 1024,
                  "problems": [p.message for p in result.problems]}))
"""


def measured_analyze(path: Path) -> dict:
    res = run([sys.executable, "-c", MEASURE, str(path)], timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("carrier", [
    lambda bomb: bomb,
    lambda bomb: {"message": {"extraInfo": bomb}},  # the torchelastic classifier
    lambda bomb: {"version": "2.10", "pg_config": {"0": {"ranks": bomb}}, "entries": []},
    lambda bomb: [{"thread_id": 1, "frames": bomb}],  # py-spy
], ids=["bare", "torchelastic", "fr_pg_config", "pyspy"])
def test_a_pickle_bomb_is_refused_in_bounded_time_and_memory(tmp_path, carrier):
    data = pickle.dumps(carrier(billion_laughs(26)), protocol=4)
    assert len(data) < 400
    (tmp_path / "nccl_trace_rank_0.pkl").write_bytes(data)
    got = measured_analyze(tmp_path)
    assert got["s"] < 5 and got["rss_mb"] < 300, got
    assert any("nodes" in m for m in got["problems"]), got
    assert got["outcome"] == "nothing_to_analyse"


def test_flight_recorder_entries_that_unfold_are_read_as_rows_in_bounded_time(tmp_path):
    bomb = billion_laughs(30)
    entries = [{"profiling_name": bomb, "process_group": [bomb, "x"], "input_sizes": [
        [10**9, [0]], bomb], "input_dtypes": [bomb], "collective_seq_id": 1, "frames": bomb,
        "time_created_ns": 1, "state": bomb}, bomb]
    (tmp_path / "nccl_trace_rank_0.pkl").write_bytes(
        pickle.dumps({"version": "2.10", "entries": entries}))
    got = measured_analyze(tmp_path)
    assert got["s"] < 5 and got["rss_mb"] < 300, got
    assert got["problems"] == ["1 malformed entries skipped"]


def test_a_json_document_nested_too_deep_is_a_problem_not_a_crash(tmp_path):
    deep = 100_000
    (tmp_path / "deep.json").write_text("[" * deep + "]" * deep)
    (tmp_path / "deep_doc.json").write_text(
        json.dumps({**schema.stamp(schema.HEARTBEAT), "rank": 0, "pending": None})[:-1]
        + ', "seq": ' + "[" * 500 + "]" * 500 + "}")
    code, doc = cli_json("analyze", str(tmp_path))
    assert code == 2 and doc["outcome"] == "nothing_to_analyse"
    files = {Path(p["file"]).name: p["message"] for p in doc["problems"]}
    assert "deep" in files["deep.json"] and "deep" in files["deep_doc.json"]


# 6: files that are not regular ----------------------------------------------------------

def test_a_named_pipe_or_a_device_is_skipped_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "stuck.fifo")
    (tmp_path / "train.log").write_text(f"[rank1]: {OOM_LINE}\n")
    (tmp_path / "fifo_link.log").symlink_to(tmp_path / "stuck.fifo")
    (tmp_path / "zero.log").symlink_to("/dev/zero")
    outside = Path(tempfile.mkdtemp()) / "secret.log"
    outside.write_text(f"[rank3]: {OOM_LINE}\n")
    (tmp_path / "outside.log").symlink_to(outside)
    res = run([DDIAG, "analyze", str(tmp_path), "--json"], timeout=60)
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    skipped = {Path(p["file"]).name for p in doc["problems"] if "skipped" in p["message"]}
    assert skipped == {"stuck.fifo", "fifo_link.log", "zero.log", "outside.log"}
    assert doc["findings"][0]["culprit"]["ranks"] == [1]  # not rank 3's, outside the tree


def test_a_named_pipe_given_as_the_path_is_nothing_to_analyse(tmp_path):
    os.mkfifo(tmp_path / "p")
    res = run([DDIAG, "analyze", str(tmp_path / "p")], timeout=60)
    assert res.returncode == 2 and "nothing to analyse" in res.stderr


# 7: big text logs and the total held ----------------------------------------------------

def test_a_text_log_over_the_cap_is_read_head_and_tail_and_says_so(tmp_path):
    from diag.analyze.inputs import Limits

    log = tmp_path / "train.log"
    filler = "".join(f"step {i} loss 1.0\n" for i in range(200_000))  # ~3.6 MB
    log.write_text("[rank0]: starting\n" + filler + f"[rank2]: {OOM_LINE}\n")
    result = analyze(tmp_path, limits=Limits(text_file_bytes=1 << 20, text_tail_bytes=256 << 10))
    assert result.findings[0].category.value == "oom"
    assert result.findings[0].culprit.ranks == (2,)
    (problem,) = [p for p in result.problems if p.file == str(log)]
    assert "first" in problem.message and "last" in problem.message
    (text,) = result.inputs.texts
    assert text.lines == [] and 0 < text.n_lines < 200_000  # read in part, and not kept


def test_the_total_held_across_files_is_capped_and_said(tmp_path):
    from diag.analyze.inputs import Limits

    for i in range(6):
        (tmp_path / f"node{i}.log").write_text(f"node{i} line\n" * 50_000)  # ~600 KB each
    result = analyze(tmp_path, limits=Limits(total_bytes=2 << 20))
    assert len(result.inputs.texts) <= 4
    (cap,) = [p for p in result.problems if "cap" in p.message]
    assert "not read" in cap.message and "node" in cap.file


# 8: two runs in one folder --------------------------------------------------------------

def two_rank_run(root: Path, run_id: str | None, numel: int, world: int = 2) -> None:
    for rank in range(world):
        w = RankWriter(root, rank, world)
        if run_id is not None:
            w.records[0]["run_id"] = run_id
        w.coll(numel=numel if rank else 1024).coll().write()


def test_two_runs_in_one_folder_are_refused_naming_both(tmp_path):
    two_rank_run(tmp_path / "job-a", "run-a", numel=1024)
    two_rank_run(tmp_path / "job-b", "run-b", numel=1024)
    res = cli("analyze", str(tmp_path))
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "run-a" in res.stderr and "run-b" in res.stderr
    assert str(tmp_path / "job-a") in res.stderr
    code, doc = cli_json("analyze", str(tmp_path))
    assert code == 2 and doc["outcome"] == "mixed_runs" and doc["findings"] == []
    assert sorted(r["run_id"] for r in doc["runs"]) == ["run-a", "run-b"]


def test_a_scale_test_root_is_refused_and_each_stage_analyses_alone(tmp_path):
    two_rank_run(tmp_path / "stage-1", "job-7", numel=1024, world=1)
    two_rank_run(tmp_path / "stage-2", "job-7", numel=4096)  # the same id: DDIAG_RUN_ID
    code, doc = cli_json("analyze", str(tmp_path))
    assert code == 2 and doc["outcome"] == "mixed_runs"
    assert sorted(Path(r["path"]).name for r in doc["runs"]) == ["stage-1", "stage-2"]
    assert cli("analyze", str(tmp_path / "stage-1")).exit_code == 0
    code, doc = cli_json("analyze", str(tmp_path / "stage-2"))
    assert code == 1 and doc["findings"][0]["category"] == "shape_mismatch"


def test_logs_without_a_run_id_from_one_run_still_merge(tmp_path):
    two_rank_run(tmp_path, None, numel=4096)
    code, doc = cli_json("analyze", str(tmp_path))
    assert code == 1 and doc["outcome"] == "findings" and len(doc["runs"]) == 1


# 10, 12: exit codes ---------------------------------------------------------------------

def test_a_detector_that_raises_is_said_on_the_terminal_and_exits_3(tmp_path, monkeypatch):
    from diag.analyze import detectors

    def broken(inputs):
        raise RuntimeError("boom")

    # No real detector may raise on purpose: put a broken one among them.
    monkeypatch.setattr(detectors, "DETECTORS", [broken, *detectors.DETECTORS])
    two_rank_run(tmp_path, "r", numel=1024)
    res = cli("analyze", str(tmp_path))
    assert res.exit_code == 3 and "no findings" not in res.output
    assert "broken" in res.output and "boom" in res.output
    code, doc = cli_json("analyze", str(tmp_path))
    assert code == 3 and doc["outcome"] == "detector_failed" and doc["detector_errors"]


@pytest.mark.parametrize("make", [
    lambda d: None,                                                       # an empty folder
    lambda d: (d / "empty.log").write_bytes(b""),                         # an empty file
    lambda d: (d / "junk.bin").write_bytes(bytes(range(7, 127)) * 3 + b"\xff\xfe" * 400),
    lambda d: (d / "core").write_bytes(os.urandom(300)),                  # binary junk
    lambda d: (d / "fr.pkl").write_bytes(b"\x80\x04\x95garbage"),         # a corrupt pickle
    lambda d: write_events(d / "events" / "rank00000.jsonl", {"rank": "one", "world_size": 2}),
], ids=["empty_dir", "empty_file", "binary", "urandom", "corrupt_pickle", "bad_header"])
def test_nothing_to_analyse_exits_2_never_0(tmp_path, make):
    make(tmp_path)
    res = cli("analyze", str(tmp_path))
    assert res.exit_code == 2 and "nothing to analyse" in res.stderr, res.output
    code, doc = cli_json("analyze", str(tmp_path))
    assert code == 2 and doc["outcome"] == "nothing_to_analyse"


def test_a_single_empty_file_is_nothing_to_analyse(tmp_path):
    (tmp_path / "x.log").write_text("\n\n  \n")
    res = cli("analyze", str(tmp_path / "x.log"))
    assert res.exit_code == 2 and "nothing to analyse" in res.stderr


def test_a_healthy_log_is_looked_at_and_exits_0(tmp_path):
    (tmp_path / "train.log").write_text("epoch 1 loss 0.5\nepoch 2 loss 0.4\n")
    code, doc = cli_json("analyze", str(tmp_path))
    assert code == 0 and doc["outcome"] == "clean"
    assert "analyze" in cli("analyze", "--help").output and "3" in cli("analyze", "--help").output


# 11: an unreadable folder ---------------------------------------------------------------

def test_an_unreadable_subfolder_is_a_problem(tmp_path):
    (tmp_path / "train.log").write_text("epoch 1 loss 0.5\n")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "rank0.log").write_text(f"{OOM_LINE}\n")
    cmd = [DDIAG, "analyze", str(tmp_path), "--json"]
    if os.geteuid() == 0:
        # root reads any folder: run it without the capabilities that let it, in a folder
        # that is someone else's.
        os.chown(private, 65534, 65534)
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    else:
        private.chmod(0)
    try:
        res = run(cmd, timeout=60)
    finally:
        private.chmod(0o700)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    (problem,) = doc["problems"]
    assert problem["file"] == str(private) and "not read" in problem["message"]


# 13: wrongly typed values ---------------------------------------------------------------

@pytest.mark.parametrize("header", [
    {"rank": "one", "world_size": 2}, {"rank": [0], "world_size": 2},
    {"rank": True, "world_size": 2}, {"rank": -1, "world_size": 2},
    {"rank": 0, "world_size": "2"}, {"rank": 0, "world_size": 0},
    {"rank": 0, "world_size": 2, "host": ["a"]}, {"rank": 0, "world_size": 2, "run_id": {}},
    {"rank": 5, "world_size": 2},
], ids=lambda h: "-".join(f"{k}={v!r}" for k, v in h.items()))
def test_wrongly_typed_headers_are_problems_for_analyze_and_summary(tmp_path, header):
    write_events(tmp_path / "events" / "rank00000.jsonl", header,
                 [{"kind": "collective", "op": "all_reduce", "group": "0", "seq": 1}])
    RankWriter(tmp_path, 1, 2).coll().write()
    for verb in ("analyze", "summary"):
        code, doc = cli_json(verb, str(tmp_path))
        assert code in (0, 1), (verb, doc)
        bad = [p for p in doc["problems"] if p["file"].endswith("rank00000.jsonl")]
        assert bad and bad[0]["line"] == 1


@pytest.mark.parametrize("record", [
    {"group": {"a": 1}, "seq": 1}, {"group": ["0"], "seq": 1}, {"group": "0", "seq": "1"},
    {"group": "0", "seq": [1]}, {"group": "0", "seq": 1, "rank": "x"},
], ids=["group_dict", "group_list", "seq_str", "seq_list", "rank_str"])
def test_wrongly_typed_collectives_are_skipped_with_their_line(tmp_path, record):
    RankWriter(tmp_path, 0, 2).coll().write()
    write_events(tmp_path / "events" / "rank00001.jsonl", {"rank": 1, "world_size": 2},
                 [{"kind": "collective", "op": "all_reduce", **record}])
    for verb in ("analyze", "summary"):
        code, doc = cli_json(verb, str(tmp_path))
        assert code in (0, 1)
        (bad,) = [p for p in doc["problems"] if p["file"].endswith("rank00001.jsonl")]
        assert bad["line"] == 2


def test_summary_with_no_readable_rank_exits_2(tmp_path):
    write_events(tmp_path / "events" / "rank00000.jsonl", {"rank": "one", "world_size": 2})
    res = cli("summary", str(tmp_path))
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "rank00000.jsonl" in res.output


# small ones -----------------------------------------------------------------------------

def test_problems_without_a_line_print_no_none_and_schema_errors_name_the_file_once(tmp_path):
    (tmp_path / "fr.pkl").write_bytes(b"\x80\x04\x95garbage")
    path = write_events(tmp_path / "events" / "rank00001.jsonl",
                        {"rank": 1, "world_size": 2, "schema": 99})
    RankWriter(tmp_path, 0, 2).coll().write()
    out = cli("analyze", str(tmp_path)).output
    assert ":None:" not in out and f"{tmp_path / 'fr.pkl'}: corrupt pickle" in out
    _, problems = read_events(path)
    assert str(path) not in problems[0].message and "upgrade ddiag" in problems[0].message
    assert out.count(str(path)) == 1
