"""Detectors over structured inputs (event logs, heartbeats, Flight Recorder), built
with record factories; no processes."""

from __future__ import annotations

import json
import pickle

from diag.analyze import analyze
from tests.analyze.factories import T0, RankWriter, fr_dump, fr_entry


def top(path):
    result = analyze(path)
    assert result.detector_errors == []
    return result.findings[0] if result.findings else None, result


def healthy(tmp_path, world=4, steps=10, late=None, data=None):
    writers = [RankWriter(tmp_path, r, world) for r in range(world)]
    for s in range(steps):
        for w in writers:
            lag = (late or {}).get(w.rank, 0.0)
            d = (data or {}).get(w.rank, 0.01)
            w.step_rec(t=T0 + s * 0.1 + 0.09, dur=0.1, phases={"data": d, "forward": 0.03})
            w.coll(t=T0 + s * 0.1 + 0.05 + lag)
    return writers


def test_healthy_run_has_no_findings(tmp_path):
    for w in healthy(tmp_path):
        w.close().write()
    finding, result = top(tmp_path)
    assert finding is None and result.missing_ranks == []


def test_hang_names_the_rank_that_never_joined(tmp_path):
    writers = healthy(tmp_path)
    for w in writers:
        w.write()
        if w.rank == 2:
            w.heartbeat(span="data")  # stuck in its data loader, no collective pending
        else:
            w.pending()
    finding, result = top(tmp_path)
    assert finding.category.value == "rank_hang"
    assert finding.culprit.ranks == (2,) and finding.culprit.hosts == ("node2",)
    assert (finding.details["missed_seq"], finding.details["group"]) == (11, "0")
    assert "all_reduce" in finding.title  # the collective it never joined, by name
    victims = [f for f in result.findings if not f.root_cause]
    assert victims and victims[0].details["waiting"] == [0, 1, 3]


def test_laggard_busy_in_a_marked_span_is_a_timeout_too_short(tmp_path):
    for w in healthy(tmp_path):
        w.write()
        w.heartbeat(span="prepare_data") if w.rank == 0 else w.pending()
    finding, _ = top(tmp_path)
    assert finding.category.value == "timeout_too_short" and finding.culprit.ranks == (0,)


def test_extra_collective_on_one_of_two_ranks(tmp_path):
    a, b = (RankWriter(tmp_path, r, 2) for r in range(2))
    for _ in range(5):
        a.coll(), b.coll()
    a.coll(op="barrier", numel=None)  # rank 0 only: the checkpoint barrier
    a.coll(), b.coll()
    a.write(), b.write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "collective_mismatch"
    assert finding.culprit.ranks == (0,)


def test_rank_waiting_alone_after_the_others_finished(tmp_path):
    a, b = (RankWriter(tmp_path, r, 2) for r in range(2))
    for _ in range(5):
        a.coll(), b.coll()
    a.write().pending(op="barrier")
    b.close().write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "collective_mismatch" and finding.culprit.ranks == (0,)


def test_shape_mismatch_names_the_rank_with_the_novel_size(tmp_path):
    a, b = (RankWriter(tmp_path, r, 2) for r in range(2))
    for i in range(6):
        a.coll(numel=4), b.coll(numel=5 if i == 3 else 4)
    a.write(), b.write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "shape_mismatch" and finding.culprit.ranks == (1,)


def test_majority_decides_with_three_or_more_ranks(tmp_path):
    ws = [RankWriter(tmp_path, r, 3) for r in range(3)]
    for w in ws:
        w.coll(numel=8), w.coll(numel=16 if w.rank == 2 else 8)
        w.write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "shape_mismatch" and finding.culprit.ranks == (2,)


def test_all_gather_size_rule(tmp_path):
    ws = [RankWriter(tmp_path, r, 2) for r in range(2)]
    for w in ws:
        w.coll(op="all_gather_into_tensor", numel=10, out_numel=20 if w.rank == 0 else 30,
               group_size=2)
        w.write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "shape_mismatch" and finding.culprit.ranks == (1,)


def test_first_failure_is_the_culprit_and_comm_errors_are_victims(tmp_path):
    for w in healthy(tmp_path):
        if w.rank == 2:
            w.exception("ValueError", "bad sample 17", t=T0 + 5)
        else:
            w.exception("RuntimeError", "[../gloo/transport/tcp/pair.cc:534] Connection "
                        "closed by peer [10.0.0.3]:5112", t=T0 + 4.9 + w.rank)
        w.write()
    finding, result = top(tmp_path)
    assert finding.category.value == "other" and finding.culprit.ranks == (2,)
    assert [f.root_cause for f in result.findings] == [True, False]


def test_oom_is_named(tmp_path):
    for w in healthy(tmp_path, world=2):
        if w.rank == 1:
            w.exception("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB",
                        t=T0 + 3)
        w.write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "oom" and finding.culprit.ranks == (1,)


def test_nan_first_step_and_rank_before_it_spreads(tmp_path):
    for w in healthy(tmp_path):
        w.step_rec(loss="nan" if w.rank == 3 else 1.0,
                   nonfinite={"param": "blocks.0.attn.weight", "kind": "nan"})
        w.step_rec(loss="nan", nonfinite={"param": "embed.weight", "kind": "nan"})
        w.write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "nan_inf" and finding.culprit.ranks == (3,)
    assert finding.details == {"step": 10, "param": "blocks.0.attn.weight"}


def test_compute_straggler_arrives_last_and_waiters_are_not_blamed(tmp_path):
    for w in healthy(tmp_path, steps=20, late={1: 0.03}):
        w.close().write()
    finding, result = top(tmp_path)
    assert finding.category.value == "straggler" and finding.culprit.ranks == (1,)
    assert finding.details["kind"] == "compute"
    assert len(result.findings) == 1


def test_data_straggler_is_told_apart(tmp_path):
    for w in healthy(tmp_path, steps=20, late={3: 0.04}, data={3: 0.05}):
        w.close().write()
    finding, _ = top(tmp_path)
    assert finding.culprit.ranks == (3,) and finding.details["kind"] == "data loading"


def test_small_jitter_is_not_a_straggler(tmp_path):
    for w in healthy(tmp_path, steps=20, late={1: 0.002}):
        w.close().write()
    assert top(tmp_path)[0] is None


def test_flight_recorder_only_hang(tmp_path):
    world = 4
    for rank in range(world):
        entries = [fr_entry(s) for s in range(1, 9)]
        if rank != 3:
            entries.append(fr_entry(9, done=False))
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(fr_dump(entries, world)))
    finding, result = top(tmp_path)
    assert finding.category.value == "rank_hang" and finding.culprit.ranks == (3,)
    assert result.sources["fr_dumps"] == [0, 1, 2, 3]


def test_flight_recorder_json_dump_with_gloo_empty_pg_key(tmp_path):
    world = 2
    for rank in range(world):
        doc = fr_dump([fr_entry(s, op="all_reduce") for s in range(1, 4)] +
                      ([fr_entry(4, done=False)] if rank == 0 else []), world)
        doc["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[0, 1]"}}
        (tmp_path / f"rank{rank:05d}.json").write_text(json.dumps(doc))
    finding, _ = top(tmp_path)
    assert finding.category.value == "rank_hang" and finding.culprit.ranks == (1,)


def test_missing_and_corrupt_inputs_are_reported_not_fatal(tmp_path):
    ws = healthy(tmp_path, world=3)
    ws[0].close().write()
    ws[1].close().write()
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "rank00002.pkl").write_bytes(b"\x80\x04\x95garbage")
    finding, result = top(tmp_path)
    assert result.missing_ranks == [2]
    assert any("corrupt pickle" in p.message for p in result.problems)


def test_malicious_pickle_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {marker}",))

    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(Exploit()))
    _, result = top(tmp_path)
    assert not marker.exists()
    assert any("refusing to load global" in p.message for p in result.problems)


def test_nan_sent_into_a_reduction_beats_a_spread_loss(tmp_path):
    for w in healthy(tmp_path, world=2):
        w.step_rec(loss="nan", nonfinite={"param": "w", "kind": "nan"},
                   sent_nonfinite={"op": "all_reduce", "seq": 11} if w.rank == 1 else None)
        w.write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "nan_inf" and finding.culprit.ranks == (1,)


def test_slow_node_from_a_link_probe(tmp_path):
    links = [{"src": a, "dst": b, "gbit_per_s": 0.19 if "node4" in (a, b) else 2.1,
              "slow": "node4" in (a, b)} for a in ("node1", "node2", "node4")
             for b in ("node1", "node2", "node4") if a != b]
    doc = {"format": "ddiag.probe_links", "schema": 1, "median_gbit_per_s": 2.1,
           "slow_links": [[x["src"], x["dst"]] for x in links if x["slow"]],
           "slow_nodes": ["node4"], "links": links}
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "links.json").write_text(json.dumps(doc))
    finding, _ = top(tmp_path)
    assert finding.category.value == "slow_link" and finding.culprit.hosts == ("node4",)
    assert "190 Mbit/s" in finding.title


def test_pipeline_straggler_is_named_and_its_waiting_neighbour_is_not(tmp_path):
    """2 stages x 2 replicas: DP groups "1" = [0, 2] (stage 0) and "2" = [1, 3] (stage 1);
    the world group meets only after the flush, when everyone is in step. Rank 3 computes
    0.3 s longer; rank 2 (stage 0, same replica) waits on it through the pipeline and so
    reaches its DP all_reduce as late, with no more work of its own."""
    ws = [RankWriter(tmp_path, r, 4) for r in range(4)]
    for step in range(20):
        t = T0 + step
        for w in ws:
            late = 0.3 if w.rank in (2, 3) else 0.0
            work = 0.33 if w.rank == 3 else 0.03
            waits = 0.3 if w.rank in (0, 1) else 0.0  # in the DP all_reduce, for 2 and 3
            w.step_rec(t=t, dur=0.35, phases={"data": 0.001, "forward": work, "backward": waits},
                       comm_s=waits)
            w.coll(t=t + 0.01 + late, group="1" if w.rank in (0, 2) else "2", group_size=2)
            w.coll(t=t + 0.34, group="0", group_size=4)
    for w in ws:
        w.close().write()
    finding, result = top(tmp_path)
    assert finding.category.value == "straggler" and finding.culprit.ranks == (3,)
    assert finding.details["kind"] == "compute"
    waiting = [f for f in result.findings if f.culprit.ranks == (2,)]
    assert [(f.severity.name, f.root_cause) for f in waiting] == [("INFO", False)]


def _pyspy(run_dir, rank: int, frames: list[tuple[str, str]]) -> None:
    """A py-spy --json dump of the rank's main thread, innermost frame first."""
    doc = [{"pid": 1000 + rank, "thread_id": 1, "thread_name": "MainThread", "frames": [
        {"name": name, "filename": path, "short_filename": path.rsplit("/", 1)[-1], "line": 1}
        for name, path in frames]}]
    (run_dir / "stacks").mkdir(exist_ok=True)
    (run_dir / "stacks" / f"rank{rank:05d}.json").write_text(json.dumps(doc))


def test_pipeline_hang_blames_the_stopped_stage_not_its_waiting_neighbour(tmp_path):
    """DP groups "1" = [0, 2] and "2" = [1, 3]. Rank 3 stops in its data loader; rank 2,
    its pipeline neighbour, blocks in a p2p wait for it and so also never reaches its DP
    all_reduce: both groups are held up, by different ranks."""
    ws = [RankWriter(tmp_path, r, 4) for r in range(4)]
    for w in ws:
        for step in range(4):
            w.step_rec(t=T0 + step)
            w.coll(t=T0 + step + 0.5, group="1" if w.rank in (0, 2) else "2", group_size=2)
        if w.rank in (0, 1):
            w.pending(group="1" if w.rank == 0 else "2", span="backward")
        w.write()
    site = "/venv/lib/python3.11/site-packages/torch/distributed/pipelining/schedules.py"
    _pyspy(tmp_path, 2, [("_wait_batch_p2p", site), ("forward_backward", "/work/train.py")])
    _pyspy(tmp_path, 3, [("read_shard", "/work/data.py"), ("forward_backward", "/work/train.py")])
    finding, result = top(tmp_path)
    assert finding.category.value == "rank_hang" and finding.culprit.ranks == (3,)
    waiting = [f for f in result.findings if f.culprit.ranks == (2,)]
    assert [f.root_cause for f in waiting] == [False]
    assert "_wait_batch_p2p" in waiting[0].title


def test_nan_passed_down_a_pipeline_is_blamed_on_its_origin(tmp_path):
    """Rank 3 (last stage) makes the NaN; its backward hands it to rank 2 (first stage);
    both then feed it into their data-parallel all_reduce in the same step."""
    for w in healthy(tmp_path):
        bad = {"param": "embed.weight", "kind": "nan"}
        if w.rank == 3:
            w.step_rec(loss="nan", nonfinite=bad, sent_nonfinite={"op": "all_reduce", "seq": 9})
        elif w.rank == 2:
            w.step_rec(loss=None, nonfinite=bad, sent_nonfinite={"op": "all_reduce", "seq": 9})
        else:
            w.step_rec(loss=None if w.rank == 0 else 1.0, nonfinite=bad)
        w.write()
    finding, _ = top(tmp_path)
    assert finding.category.value == "nan_inf" and finding.culprit.ranks == (3,)


def test_nan_sent_first_in_time_wins_when_sends_are_timed(tmp_path):
    for w in healthy(tmp_path):
        if w.rank in (1, 2):  # rank 2's forward send reached rank 1, whose loss went NaN
            w.step_rec(loss="nan" if w.rank == 1 else None,
                       sent_nonfinite={"op": "isend" if w.rank == 2 else "all_reduce",
                                       "seq": 4, "t": T0 + (1 if w.rank == 2 else 2)})
        else:
            w.step_rec(loss=1.0)
        w.write()
    finding, _ = top(tmp_path)
    assert finding.culprit.ranks == (2,)


def test_extra_collective_in_a_pipeline_is_found_across_groups(tmp_path):
    """Rank 3 enters a barrier on the world group that nobody else issues; its DP peer
    (rank 1) waits for it in their all_reduce, rank 2 waits on it through the pipeline,
    and rank 0 waits for rank 2. No group shows two ops at one seq, yet rank 3 is alone
    in a collective the world group never ran before."""
    ws = [RankWriter(tmp_path, r, 4) for r in range(4)]
    dp = {0: "1", 2: "1", 1: "2", 3: "2"}
    for w in ws:
        for step in range(4):
            w.step_rec(t=T0 + step)
            w.coll(t=T0 + step + 0.5, group=dp[w.rank], group_size=2)
            w.coll(t=T0 + step + 0.6, numel=1, group="0", group_size=4)
        if w.rank == 3:
            w.pending(op="barrier", group="0", span="checkpoint")
        elif w.rank in (0, 1):
            w.pending(group=dp[w.rank], span="backward")
        w.write()
    finding, result = top(tmp_path)
    assert finding.category.value == "collective_mismatch" and finding.culprit.ranks == (3,)
    assert "barrier" in finding.title
    assert [f.culprit.ranks for f in result.findings if f.root_cause] == [(3,)]


def test_hang_after_a_shape_mismatch_is_its_symptom(tmp_path):
    ws = [RankWriter(tmp_path, r, 3) for r in range(3)]
    for w in ws:
        w.step_rec()
        w.coll(numel=2 if w.rank == 2 else 1)  # rank 2 disagrees on the size
        if w.rank != 2:
            w.coll()
            w.pending()  # the others went on; rank 2 is stuck after the bad all_reduce
        w.write()
    finding, result = top(tmp_path)
    assert finding.category.value == "shape_mismatch" and finding.culprit.ranks == (2,)
    assert [f.category.value for f in result.findings if f.root_cause] == ["shape_mismatch"]


def test_a_wrong_variable_is_not_also_reported_as_differing(tmp_path):
    """check-env: GLOO_SOCKET_IFNAME=eth9 fails on node2; that it differs from node1's
    eth0 restates the same fault."""
    from diag.analyze.detectors.config import _restates
    from diag.checkenv.types import fail, warn

    wrong = fail("net.gloo_ifname", "no such interface eth9", "fix", nodes=("node2",),
                 env_var="GLOO_SOCKET_IFNAME")
    differs = warn("cross.env", "GLOO_SOCKET_IFNAME differs", "fix", nodes=("node2",),
                   env_var="GLOO_SOCKET_IFNAME")
    other = warn("cross.env", "NCCL_ALGO differs", "fix", nodes=("node2",), env_var="NCCL_ALGO")
    assert _restates(differs, [wrong, differs, other]) and not _restates(other, [wrong, other])


def test_gloo_size_mismatch_with_a_size_header_is_a_diverged_call_sequence(tmp_path) -> None:
    # 8 bytes on one side: an object collective's one-int64 size header met another collective
    from diag.analyze import analyze
    from diag.verdict import Category

    line = ("[rank1]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/"
            "pair.cc:456] op.preamble.length <= op.nbytes. {} vs {}. Received data size doesn't "
            "match expected size. Is there a distributed collective mismatch in your code?\n")
    header, shapes = tmp_path / "header.txt", tmp_path / "shapes.txt"
    header.write_text(line.format(8, 4))
    shapes.write_text(line.format(4096, 1024))
    assert analyze(header).findings[0].category is Category.COLLECTIVE_MISMATCH
    top = analyze(shapes).findings[0]
    assert top.category is Category.SHAPE_MISMATCH and "different collectives" in top.title


def test_fingerprints_of_another_structure_or_a_size_header_are_different_collectives(
        tmp_path) -> None:
    from diag.analyze import analyze
    from diag.verdict import Category

    opts = ("TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided "
            "(default), requires_grad=false (default), pinned_memory=false (default), "
            "memory_format=(nullopt)))")
    one_side = tmp_path / "one.txt"
    one_side.write_text(
        "[rank3]: RuntimeError: Detected mismatch between collectives on ranks. Rank 3 is "
        "running inconsistent collective: CollectiveFingerPrint(SequenceNumber=88, "
        f"OpType=ALLREDUCE, TensorShape=[1024, 4], TensorDtypes=Float, {opts}\n")
    header = tmp_path / "header.txt"
    header.write_text(
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=40, OpType=BROADCAST, TensorShape=[1], "
        f"TensorDtypes=Long, {opts}, but Rank 0 is running collective: CollectiveFingerPrint("
        "SequenceNumber=40, OpType=BROADCAST, TensorShape=[3, 224, 224], TensorDtypes=Float, "
        f"{opts}.\n")
    for log in (one_side, header):
        top = analyze(log).findings[0]
        assert top.category is Category.COLLECTIVE_MISMATCH, (log.name, top.title)


def test_a_bare_nccl_version_line_belongs_to_the_host_printing_around_it(tmp_path) -> None:
    # NCCL prints its version without the host:pid:tid prefix at some debug levels
    from diag.analyze import analyze
    from diag.verdict import Category

    log = tmp_path / "log.txt"
    log.write_text("".join(
        f"{host}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using ens7:10.9.0.{i}<0>\n"
        f"{host}:{pid}:{pid} [0] NCCL INFO cudaDriverVersion 12040\n"
        f"NCCL version {version}+cuda12.4\n[... excerpt gap ...]\n"
        for i, (host, pid, version) in enumerate(
            (("gpu-7", 4410, "2.21.5"), ("gpu-8", 3312, "2.18.1"), ("gpu-9", 2208, "2.21.5")))))
    top = analyze(log).findings[0]
    assert top.category is Category.VERSION_MISMATCH and top.culprit.hosts == ("gpu-8",)
