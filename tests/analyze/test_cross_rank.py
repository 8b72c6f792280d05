"""Reasoning across ranks over text logs: NCCL's per-collective trace lined up opCount by
opCount (detectors/mismatch.py detect_text), torch's watchdog dump lines, early syncs that
outlast torch's default timeout, and hardware evidence against victim-based inference
(detectors/hang.py). Every log here is written from the emitters' format strings with
made-up hosts, pids and sizes; none comes from the corpus."""

from __future__ import annotations

from pathlib import Path

from diag.analyze import analyze
from diag.analyze.detectors.mismatch import _distinct_devices, _quoted_numbers
from diag.analyze.signals import Signal
from diag.verdict import Basis, Category, Severity

# ncclDataType_t
INT8, INT64, FP16, FP32, BF16 = 0, 4, 6, 7, 9


def coll(host: str, pid: int, dev: int, op: str, opcount: int, count: int, dtype: int,
         comm: str, nranks: int, root: int = 0, redop: int = 0, quoted: str = "") -> str:
    """One line as NCCL's ncclEnqueueCheck prints it (NCCL_DEBUG_SUBSYS=COLL)."""
    return (f"{quoted}{host}:{pid}:{pid} [{dev}] NCCL INFO {op}: opCount {opcount:x} sendbuff "
            f"0x7f{pid:x}00 recvbuff 0x7f{pid:x}00 count {count} datatype {dtype} op {redop} "
            f"root {root} comm {comm} [nranks={nranks}] stream 0x55{pid:x}")


def init(host: str, pid: int, dev: int, comm: str, rank: int, nranks: int,
         commid: str = "") -> str:
    """ncclCommInitRankFunc's "Init COMPLETE" line (commId since NCCL 2.18)."""
    cid = f" commId {commid}" if commid else ""
    return (f"{host}:{pid}:{pid} [{dev}] NCCL INFO comm {comm} rank {rank} nranks {nranks} "
            f"cudaDev {dev} nvmlDev {dev} busId {dev + 1}b000{cid} - Init COMPLETE")


def findings(tmp_path: Path, lines: list[str]) -> list:
    log = tmp_path / "console.txt"
    log.write_text("\n".join(lines) + "\n")
    result = analyze(log)
    assert not result.detector_errors, result.detector_errors
    return result.findings


def roots(found: list) -> list:
    return [f for f in found if f.root_cause]


# ---------------------------------------------------------------------------------------
# NCCL COLL traces


def _two_node_job(odd_rank: int = 5, odd_op: str = "Broadcast") -> list[str]:
    """8 ranks on two hosts, each process on its own GPU 0 (CUDA_VISIBLE_DEVICES per
    rank), so [dev] says nothing; the init lines map pids to ranks."""
    lines = []
    for rank in range(8):
        host, pid = f"dgx-{rank // 4 + 7}", 40100 + 7 * rank
        lines.append(init(host, pid, 0, f"0x5600{rank:02x}a0", rank, 8))
    for opcount in range(3):
        for rank in range(8):
            host, pid = f"dgx-{rank // 4 + 7}", 40100 + 7 * rank
            op, count, dtype = "AllReduce", 1 << 22, BF16
            if rank == odd_rank and opcount == 2:
                op, count, dtype = odd_op, 131072, FP32
            lines.append(coll(host, pid, 0, op, 0x40 + opcount, count, dtype,
                              f"0x5600{rank:02x}a0", 8))
    return lines


def test_the_rank_with_another_op_at_one_opcount_is_the_culprit(tmp_path):
    top = findings(tmp_path, _two_node_job())[0]
    assert top.category is Category.COLLECTIVE_MISMATCH and top.culprit.ranks == (5,)
    assert top.confidence >= 0.8 and "opCount 42" in top.title
    assert top.culprit.hosts == ("dgx-8",)


def test_the_same_op_and_dtype_with_another_count_that_realigns_is_a_shape_mismatch(tmp_path):
    lines = []
    for opcount, counts in enumerate(([4096] * 4, [4096, 4096, 8192, 4096], [64] * 4)):
        for rank, count in enumerate(counts):
            lines.append(coll("trn-3", 800 + rank, rank, "AllGather", opcount, count, FP16,
                              f"0x61{rank}0", 4))
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.SHAPE_MISMATCH and top.culprit.ranks == (2,)


def test_two_ranks_quoted_blame_the_one_that_is_not_the_lowest(tmp_path):
    lines = [coll("mi250-1", 9100, 0, "AllReduce", 0x1f0 + i, 5000 + i, FP32, "0x5a10", 8)
             for i in range(2)]
    lines += ["[...]"]
    lines += [coll("mi250-1", 9140, 4, "ReduceScatter", 0x1f0 + i, 700, FP32, "0x5b20", 8)
              for i in range(2)]
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.COLLECTIVE_MISMATCH and top.culprit.ranks == (4,)
    assert top.confidence < 0.7  # a tie: rank 0 is only the reference


def test_rccl_globalrank_names_the_rank(tmp_path):
    lines = []
    for rank in range(3):
        op = "AllGather" if rank == 1 else "AllReduce"
        lines.append(coll("node-a", 300 + rank, 0, op, 9, 1024, FP32, f"0x7{rank}", 3)
                     + f" task 0 globalrank {rank}")
    top = findings(tmp_path, lines)[0]
    assert top.culprit.ranks == (1,) and top.category is Category.COLLECTIVE_MISMATCH


def test_lines_quoted_from_per_rank_files_take_the_rank_in_the_file_name(tmp_path):
    # one GPU per process everywhere ([0]), two hosts: only the quoted file names tell
    lines = []
    for rank in range(4):
        host = "gpu-n1" if rank < 2 else "gpu-n2"
        op = "Reduce" if rank == 3 else "AllReduce"
        lines.append(coll(host, (812, 9013, 40117, 7)[rank], 0, op, 0, 10, INT64, f"0x9{rank}",
                          4, quoted=f"logs/job17.worker{rank}.err:"))
    top = findings(tmp_path, lines)[0]
    assert top.culprit.ranks == (3,) and top.category is Category.COLLECTIVE_MISMATCH


def test_communicators_are_compared_only_with_themselves(tmp_path):
    # the same opCount on a 2-rank and on a 4-rank communicator: different collectives
    # by design, not a mismatch
    lines = []
    for rank in range(4):
        lines.append(coll("a100-x", 600 + rank, rank, "AllReduce", 3, 2048, FP32, f"0xa{rank}", 4))
        lines.append(coll("a100-x", 600 + rank, rank, "AllGather", 3, 77, INT8, f"0xb{rank}", 2))
    assert not roots(findings(tmp_path, lines))


def test_send_and_recv_sides_of_a_pair_are_not_a_mismatch(tmp_path):
    lines = [coll("pp-0", 700, 0, "Send", 12, 4096, BF16, "0xc0", 2, root=1),
             coll("pp-0", 701, 1, "Recv", 12, 4096, BF16, "0xc1", 2, root=0)]
    assert not roots(findings(tmp_path, lines))


def test_a_healthy_trace_is_not_a_finding(tmp_path):
    lines = [coll("h1", 10 + r, r, "AllReduce", n, 512, FP32, f"0xd{r}", 4)
             for n in range(5) for r in range(4)]
    assert not roots(findings(tmp_path, lines))


def test_commid_groups_communicators_across_ranks(tmp_path):
    # two 4-rank communicators per process, created in different orders on rank 2: the
    # commId of the init lines, not the order, says which is which
    lines = []
    for rank in range(4):
        order = ("0xfeed", "0xbeef") if rank != 2 else ("0xbeef", "0xfeed")
        for i, cid in enumerate(order):
            lines.append(init("b200", 900 + rank, rank, f"0x{rank}{i}0", rank, 4, commid=cid))
    for rank in range(4):
        order = ("0xfeed", "0xbeef") if rank != 2 else ("0xbeef", "0xfeed")
        for i, cid in enumerate(order):
            op = "AllReduce" if cid == "0xfeed" else "AllGather"
            lines.append(coll("b200", 900 + rank, rank, op, 5, 100, FP32, f"0x{rank}{i}0", 4))
    assert not roots(findings(tmp_path, lines))


def test_a_rank_whose_trace_stops_early_in_a_failing_job_is_the_one_that_hung(tmp_path):
    lines = []
    for opcount in range(6):
        for rank in range(4):
            if rank == 1 and opcount == 5:
                continue
            lines.append(coll("l40s-2", 1200 + rank, rank, "AllReduce", opcount, 1 << 20, FP32,
                              f"0xe{rank}", 4))
    lines.append("[rank0]:[E1201 09:00:00.1 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
                 "collective operation timeout: WorkNCCL(SeqNum=6, OpType=ALLREDUCE, NumelIn="
                 "1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600030 milliseconds "
                 "before timing out.")
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.RANK_HANG and top.culprit.ranks == (1,)


def test_rank_guesses_need_one_name_or_device_per_process():
    def sig(host, pid, dev=None, quoted=None):
        return Signal("nccl_coll", "x", 1, "", host=host,
                      fields={"pid": pid, "dev": dev, "quoted_from": quoted})
    node_files = [sig("h", 1, quoted="node0.log"), sig("h", 2, quoted="node0.log")]
    assert _quoted_numbers(node_files) == {}  # two processes per file: not per rank
    two_numbers = [sig("h", 1, quoted="run1.rank0.txt"), sig("h", 2, quoted="run2.rank1.txt")]
    assert _quoted_numbers(two_numbers) == {}  # which of the two numbers is the rank?
    same_dev = [sig("h", 1, dev=0), sig("h", 2, dev=0)]
    assert _distinct_devices(same_dev) == {}
    two_hosts = [sig("h", 1, dev=0), sig("g", 2, dev=1)]
    assert _distinct_devices(two_hosts) == {}


# ---------------------------------------------------------------------------------------
# Watchdog dump lines: the rank named "from rank N" is a victim

_DUMP = ("[rank{r}]:[E1104 02:10:45.0 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) "
         "Rank {r}] Received a dump signal due to a collective timeout from {src} and we will "
         "try our best to dump the debug info. Last enqueued NCCL work: {enq}, last completed "
         "NCCL work: {done}.This is most likely caused by incorrect usages of collectives, e.g., "
         "wrong sizes used across ranks, the order of collectives is not same for all ranks or "
         "the scheduled collective, for some reason, didn't run.")


def test_the_rank_behind_in_enqueued_work_is_the_culprit_not_the_one_that_fired(tmp_path):
    lines = [_DUMP.format(r=r, src="this local rank" if r == 6 else " rank 6",
                          enq=3100 if r == 2 else 3101, done=3100) for r in range(8)]
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.RANK_HANG and top.culprit.ranks == (2,)


def test_with_two_ranks_the_rank_that_fired_is_the_victim(tmp_path):
    lines = [_DUMP.format(r=1, src="this local rank", enq=412, done=411),
             _DUMP.format(r=0, src=" rank 1", enq=411, done=411)]
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.RANK_HANG and top.culprit.ranks == (0,)


# ---------------------------------------------------------------------------------------
# Early small syncs at torch's default timeout

_WATCHDOG = ("[rank{r}]:[E0612 11:{m:02d}:01.5 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog "
             "caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
             "NumelIn={n}, NumelOut={n}, Timeout(ms)={t}) ran for {ran} milliseconds before "
             "timing out.")


def test_a_single_rank_paste_of_an_early_flag_sync_is_a_timeout_too_short(tmp_path):
    lines = [_WATCHDOG.format(r=3, m=40, seq=2, op="ALLREDUCE", n=1, t=600000, ran=600102)]
    top = roots(findings(tmp_path, lines))[0]
    assert top.category is Category.TIMEOUT_TOO_SHORT and top.culprit.ranks == ()


def test_a_late_one_element_sync_in_a_single_rank_paste_is_a_busy_rank(tmp_path):
    # a one-element all-reduce late in training is a sync or a metric around work some
    # ranks do alone (a rank stuck mid-step leaves the others in the gradient all-reduce);
    # rank 3 waited, rank 0 is the one a script gives such work to: a guess, and said so
    lines = [_WATCHDOG.format(r=3, m=40, seq=48113, op="ALLREDUCE", n=1, t=1800000, ran=1800300)]
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.TIMEOUT_TOO_SHORT and top.culprit.ranks == (0,)
    assert top.basis is Basis.HEURISTIC and top.severity is Severity.WARN


def test_a_late_gradient_sized_collective_is_not_a_busy_rank(tmp_path):
    lines = [_WATCHDOG.format(r=3, m=40, seq=48113, op="ALLREDUCE", n=25557032, t=1800000,
                              ran=1800300)]
    assert all(f.category is not Category.TIMEOUT_TOO_SHORT for f in findings(tmp_path, lines))


def test_an_early_sync_with_a_chosen_timeout_is_not_the_default_rule(tmp_path):
    lines = [_WATCHDOG.format(r=0, m=5, seq=1, op="ALLREDUCE", n=1, t=300000, ran=300050)]
    assert all(f.category is not Category.TIMEOUT_TOO_SHORT for f in findings(tmp_path, lines))


def test_an_early_sync_that_ranks_disagree_on_is_not_a_short_timeout(tmp_path):
    lines = [_WATCHDOG.format(r=r, m=30, seq=2, op="ALLREDUCE", n=1, t=1800000, ran=1800011)
             for r in (0, 1, 2)]
    lines.append(_WATCHDOG.format(r=3, m=30, seq=2, op="BROADCAST", n=5120, t=1800000,
                                  ran=1800011))
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.COLLECTIVE_MISMATCH and top.culprit.ranks == (3,)


# ---------------------------------------------------------------------------------------
# Hardware evidence outranks a victim-based culprit


def test_a_lost_gpu_beside_the_timeouts_is_the_root_cause(tmp_path):
    lines = [_WATCHDOG.format(r=r, m=12, seq=20711, op="ALLREDUCE", n=8388608, t=1800000,
                              ran=1800900 + r) for r in (0, 1, 3, 4, 5, 6, 7)]
    lines += ["admin@gpu-node-4:~$ nvidia-smi",
              "Unable to determine the device handle for GPU 0000:B3:00.0: GPU is lost.  Reboot "
              "the system to recover this GPU"]
    found = findings(tmp_path, lines)
    assert found[0].category is Category.OTHER and "GPU is lost" in found[0].title
    hang = [f for f in found if f.category is Category.RANK_HANG and f.culprit.ranks]
    assert all(not f.root_cause for f in hang)


def test_an_nvml_version_mismatch_is_not_a_lost_gpu(tmp_path):
    lines = [_WATCHDOG.format(r=r, m=12, seq=20711, op="ALLREDUCE", n=8388608, t=1800000,
                              ran=1800900 + r) for r in (0, 1, 3)]
    lines += ["Failed to initialize NVML: Driver/library version mismatch"]
    found = findings(tmp_path, lines)
    assert not any("GPU hardware" in f.title for f in found)


# ---------------------------------------------------------------------------------------
# NCCL's RAS report (ncclras, NCCL 2.24+)

_RAS_HEAD = ["NCCL version 2.27.3+cuda12.9", "", "Errors", "======", "", "Warnings", "========",
             ""]


def test_ras_names_the_rank_that_launched_fewer_operations(tmp_path):
    lines = _RAS_HEAD + [
        "#0-0 (5b01ae77c3d2e419) MISMATCH",
        "  Communicator ranks have different ReduceScatter operation counts",
        "  14 ranks have launched up to operation 6604",
        "  2 ranks have launched up to operation 6603",
        "  Rank 4 -- GPU 4 managed by process 3301 on node h100-a2",
        "  Rank 12 -- GPU 4 managed by process 1870 on node h100-b2"]
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.RANK_HANG and top.culprit.ranks == (4, 12)


def test_ras_a_rank_ahead_issued_an_extra_collective(tmp_path):
    lines = _RAS_HEAD + [
        "#1-0 (0a9c33e1f07b2d66) MISMATCH",
        "  Communicator ranks have different Broadcast operation counts",
        "  7 ranks have launched up to operation 12",
        "  Rank 0 has launched up to operation 13 -- GPU 0 managed by process 918 on node n0"]
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.COLLECTIVE_MISMATCH and top.culprit.ranks == (0,)


def test_ras_missing_ranks_of_an_incomplete_communicator_stopped(tmp_path):
    lines = _RAS_HEAD[:5] + [
        "#0-0 (77aa0c1e2b3d4f50) INCOMPLETE",
        "  Missing communicator data from 1 rank",
        "  Rank 9 -- GPU 1 managed by process 4242 on node gpu-17",
        ""]
    top = findings(tmp_path, lines)[0]
    assert top.category is Category.RANK_HANG and top.culprit.ranks == (9,)


def test_ras_majority_ranks_listed_under_a_count_are_not_outliers(tmp_path):
    # verbose output lists every rank under its group: only the smaller group is odd
    lines = _RAS_HEAD + ["#0-0 (1111222233334444) MISMATCH",
                         "  Communicator ranks have different AllGather operation counts",
                         "  3 ranks have launched up to operation 40"]
    lines += [f"  Rank {r} -- GPU {r} managed by process {100 + r} on node n1" for r in (0, 1, 3)]
    lines += ["  Rank 2 has not launched any operations -- GPU 2 managed by process 102 on "
              "node n1"]
    top = findings(tmp_path, lines)[0]
    assert top.culprit.ranks == (2,) and top.category is Category.RANK_HANG


def test_an_early_sync_every_rank_times_out_in_is_not_a_short_timeout(tmp_path):
    # all four ranks wait in the first barrier: nobody was busy elsewhere (a transport
    # that never connects looks like this)
    lines = [_WATCHDOG.format(r=r, m=31, seq=1, op="BARRIER", n=1, t=1800000, ran=1800020)
             for r in range(4)]
    lines.append("WORLD_SIZE=4")
    assert all(f.category is not Category.TIMEOUT_TOO_SHORT for f in findings(tmp_path, lines))
