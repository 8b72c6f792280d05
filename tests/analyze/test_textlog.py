"""Line parsers of diag/analyze/textlog.py, one message family at a time, plus hostile
input. Each test builds a tiny log from lines; no files, no processes."""

from __future__ import annotations


from hypothesis import given, settings
from hypothesis import strategies as st

from diag.analyze.inputs import TextLog
from diag.analyze.textlog import extract, parse_line, parse_time


def signals(*lines: str) -> list:
    return extract(TextLog("job.log", list(lines)))


def one(kind: str, *lines: str):
    found = [s for s in signals(*lines) if s.kind == kind]
    assert len(found) == 1, [(s.kind, s.fields) for s in signals(*lines)]
    return found[0]


def kinds(*lines: str) -> set[str]:
    return {s.kind for s in signals(*lines)}


# ---------------------------------------------------------------------------------------
# prefixes: rank, host, pid, time


def test_torch_rank_prefix_is_the_global_rank() -> None:
    line = parse_line(1, "[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] boom")
    assert line.rank == 3 and line.body.startswith("[E1218")


def test_tee_prefix_is_a_local_rank_promoted_on_one_host() -> None:
    sig = one(
        "oom", "[default2]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert sig.rank == 2 and sig.fields["local_rank"] == 2


def test_tee_prefix_is_not_promoted_when_the_log_spans_hosts() -> None:
    sigs = signals(
        "n1:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "n2:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
        "[trainer1]:torch.OutOfMemoryError: CUDA out of memory.",
    )
    assert next(s for s in sigs if s.kind == "oom").rank is None


def test_mpirun_tag_and_pdsh_host_and_srun_label() -> None:
    assert parse_line(1, "[1,5]<stderr>:RuntimeError: x").rank == 5
    line = parse_line(1, "worker-3: [rank12]: RuntimeError: x")
    assert (line.host, line.rank) == ("worker-3", 12)
    assert parse_line(1, "7: step 10 loss 2.0").local_rank == 7


def test_bracketed_rank_forms() -> None:
    assert parse_line(1, "[PG ID 2 PG GUID 9 Rank 7] Exception detected").rank == 7
    assert parse_line(1, "[PG 0 (default_pg) Rank 1] Timeout at NCCL work: 3").rank == 1
    assert parse_line(1, "[E ProcessGroupNCCL.cpp:475] [Rank 4] Watchdog caught").rank == 4


def test_error_words_are_not_taken_for_hosts() -> None:
    line = parse_line(1, "RuntimeError: rank3: something")
    assert line.host is None and line.body.startswith("RuntimeError")


def test_nccl_prefix_host_pid_and_rank_from_the_init_line() -> None:
    sigs = signals(
        "gpu7:4242:4242 [1] NCCL INFO NET/IB : No device found.",
        "gpu7:4242:4300 [1] NCCL INFO comm 0x55 rank 9 nranks 16 cudaDev 1 busId 2000 - "
        "Init COMPLETE",
    )
    ib = next(s for s in sigs if s.kind == "nccl_ib_no_device")
    assert (ib.host, ib.fields["pid"], ib.rank) == ("gpu7", 4242, 9)


def test_nccl_warn_with_leading_timestamp() -> None:
    sig = one(
        "nccl_socket_family",
        "[2026-03-18 11:13:09] host:28471:28499 [0] misc/socket.cc:537 NCCL WARN "
        "ncclSocketInit: connecting to address  with family 1 is neither AF_INET(2) nor "
        "AF_INET6(10)",
    )
    assert sig.host == "host" and sig.time == parse_time("2026-03-18 11:13:09")


def test_time_formats() -> None:
    iso = parse_time("2024-05-01T10:00:00.5Z x")
    assert parse_time("2024-05-01 10:00:00,500 - INFO") == iso
    assert parse_time("2024-05-01_10:00:00") == iso - 0.5
    glog = parse_time("[E0501 10:00:00.5 ProcessGroupNCCL.cpp:1]", year=2024)
    assert glog == iso
    assert parse_time("no time here") is None
    assert parse_time("2024-13-45 99:99:99") is None


def test_glog_year_comes_from_an_earlier_iso_stamp() -> None:
    sigs = signals(
        "2023-12-18 20:00:00 start",
        "[rank0]:[E1218 20:27:21.4 ProcessGroupNCCL.cpp:629] [Rank 0] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
        "OpType=BROADCAST, "
        "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.",
    )
    timeout = next(s for s in sigs if s.kind == "watchdog_timeout")
    assert timeout.time == parse_time("2023-12-18 20:27:21.4")


# ---------------------------------------------------------------------------------------
# NCCL


def test_nccl_env_version_bootstrap_and_net() -> None:
    sigs = signals(
        "h:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
        "h:1:1 [0] NCCL INFO NCCL version 2.18.5+cuda12.2",
        "h:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>",
        "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.3<0> [1]eth1:10.1.0.3<0>",
        "h:1:1 [0] NCCL INFO Using network Socket",
        "h:1:1 [0] NCCL INFO cudaDriverVersion 12080",
    )
    by = {s.kind: s.fields for s in sigs}
    assert by["env"]["var"] == "NCCL_SOCKET_IFNAME" and by["env"]["value"] == "eth0"
    assert [s.fields["version"] for s in sigs if s.kind == "version"] == ["2.18.5", "12.8"]
    assert by["nccl_bootstrap"] == {"iface": "eth0", "addr": "10.0.0.3", "pid": 1}
    nets = [s.fields for s in sigs if s.kind == "nccl_net"]
    assert nets[0]["ifaces"] == [("eth0", "10.0.0.3"), ("eth1", "10.1.0.3")]
    assert {n["transport"] for n in nets} == {"Socket"}


def test_nccl_connect_failures_with_errno() -> None:
    new = one(
        "nccl_connect_failed",
        "node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: "
        "Connect to 10.0.0.4<56849> returned 113(No route to host) errno 115(Operation now "
        "in progress)",
    )
    assert new.fields == {
        "addr": "10.0.0.4",
        "port": 56849,
        "errno": 113,
        "reason": "No route to host",
        "pid": 240,
    }
    old = one(
        "nccl_connect_failed",
        "a:1:2 [0] include/socket.h:403 NCCL WARN Net : Connect to "
        "192.168.1.3<4501> failed : Connection refused",
    )
    assert (old.fields["errno"], old.fields["port"]) == (111, 4501)
    retry = one(
        "nccl_connect_failed",
        "a:1:2 [0] NCCL WARN Call to connect returned Connection timed out, retrying",
    )
    assert retry.fields["errno"] == 110


def test_nccl_cuda_failure_and_result_codes() -> None:
    sig = one(
        "nccl_cuda_failure", "transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'"
    )
    assert sig.fields == {"error": "invalid argument", "src": "transport/nvls.cc"}
    err = one(
        "nccl_error",
        "RuntimeError: NCCL error in: ../ProcessGroupNCCL.cpp:1269, unhandled system error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.10.3",
    )
    assert err.fields["code"] == "system"
    assert "version" in kinds(
        "RuntimeError: NCCL error in: x.cpp:1, internal error, NCCL version 2.10.3"
    )


def test_nccl_interface_problems() -> None:
    assert "nccl_no_interface" in kinds(
        "h:1:1 [0] bootstrap.cc:46 NCCL WARN Bootstrap : no socket interface found"
    )
    assert "nccl_no_interface" in kinds(
        "h:1:1 [0] NCCL WARN NET/Socket : No interface found in the same subnet "
        "as remote address 10.0.0.1<4100>"
    )
    assert "nccl_socket_family" in kinds(
        "e6:31:31 [0] include/socket.h:311 WARN Socket creation failed : "
        "Address family not supported by protocol"
    )
    assert "nccl_ib_no_device" in kinds(
        "e6:31:31 [0] misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]"
    )


def test_nccl_ib_truncation_duplicate_gpu_shm() -> None:
    ib = one(
        "nccl_ib_error",
        "g:4:5 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.3.1.7<54212> with status=12 opcode=0 len=0 vendor err 129 (Send)",
    )
    assert (ib.fields["peer"], ib.fields["status"]) == ("10.3.1.7", 12)
    trunc = one(
        "nccl_truncated",
        "h:1:1 [0] NCCL WARN NET/Socket : peer 10.0.0.2<33421> message truncated : "
        "receiving 1048576 bytes instead of 65536",
    )
    assert trunc.fields["got"] == 1048576
    dup = one(
        "nccl_duplicate_gpu",
        "w:3:3 [0] init.cc:801 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 "
        "both on CUDA device 1000",
    )
    assert dup.fields["ranks"] == [1, 0]
    assert "shm_error" in kinds(
        "a:88:131 [1] include/shm.h:28 NCCL WARN Error while creating shared memory "
        "segment /dev/shm/nccl-ZqGx8a (size 9637888)"
    )


def test_channels_over_the_network_are_reported_once_per_process() -> None:
    lines = [
        f"h:1:2 [0] NCCL INFO Channel {c:02d}/02 : 7[7] -> 8[0] [send] via NET/Socket/0"
        for c in range(4)
    ]
    assert [s.kind for s in signals(*lines)] == ["nccl_channel_net"]


# ---------------------------------------------------------------------------------------
# watchdog, desync, DETAIL fingerprints, monitoredBarrier


def test_watchdog_new_format() -> None:
    sig = one(
        "watchdog_timeout",
        "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, "
        "NumelIn=131072000, "
        "NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing "
        "out.",
    )
    assert sig.rank == 0
    assert {k: sig.fields[k] for k in ("seq", "op", "numel_in", "timeout_ms", "ran_ms")} == {
        "seq": 1,
        "op": "BROADCAST",
        "numel_in": 131072000,
        "timeout_ms": 600000,
        "ran_ms": 600081,
    }


def test_watchdog_old_format_and_blocking_wait() -> None:
    old = one(
        "watchdog_timeout",
        "[E ProcessGroupNCCL.cpp:737] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1803721 "
        "milliseconds before timing out.",
    )
    assert (old.rank, old.fields["seq"], old.fields["op"]) == (3, None, "ALLREDUCE")
    blocking = one(
        "watchdog_timeout",
        "[E ProcessGroupNCCL.cpp:541] [Rank 1] Work WorkNCCL(SeqNum=3, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) timed out in "
        "blocking wait.",
    )
    assert blocking.fields["blocking"] and blocking.fields["seq"] == 3


def test_watchdog_message_wrapped_over_lines() -> None:
    sig = one(
        "watchdog_timeout",
        "[Rank 2] Watchdog caught collective operation timeout:",
        "  WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000)",
        "  ran for 60090 milliseconds before timing out.",
    )
    assert (sig.rank, sig.fields["seq"], sig.fields["numel_in"], sig.fields["ran_ms"]) == (
        2,
        9,
        1,
        60090,
    )


def test_watchdog_status_lines() -> None:
    a = one(
        "watchdog_status",
        "[PG ID 2 PG GUID 9 Rank 7] Exception (either an error or timeout) detected by "
        "watchdog at work: 4486, last enqueued NCCL work: 4489, last completed NCCL work: "
        "4485.",
    )
    assert (
        a.rank,
        a.fields["at"],
        a.fields["last_enqueued"],
        a.fields["last_completed"],
        a.fields["pg"],
    ) == (7, 4486, 4489, 4485, 2)
    b = one(
        "watchdog_status",
        "[PG ID 1 PG GUID 1 Rank 1]  failure detected by watchdog at work sequence id: 1 "
        "PG status: last enqueued work: 547, last completed work: -1",
    )
    assert (b.fields["at"], b.fields["last_completed"]) == (1, -1)
    c = one(
        "watchdog_status",
        "[PG 0 Rank 5] Received a dump signal. Last enqueued NCCL work: 20, "
        "last completed NCCL work: 20.",
    )
    assert c.fields["last_enqueued"] == 20


def test_desync_reports() -> None:
    assert one(
        "desync_report",
        "\t - To our best knowledge, ranks [3, 5] are the lagging ranks that caused this "
        "timeout. They never joined any collectives",
    ).fields["ranks"] == [3, 5]
    sig = one("desync_report", "\t   - [2] joined but didn't finish collective #17 (count from 1)")
    assert (sig.fields["state"], sig.fields["seq"]) == ("joined_not_finished", 17)


def test_fingerprint_sides() -> None:
    fp = (
        "CollectiveFingerPrint(SequenceNumber=12, OpType={op}, TensorShape=[{n}], "
        "TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), "
        "device=cuda, layout=Strided (default)))"
    )
    sig = one(
        "fingerprint_mismatch",
        "[rank0]: RuntimeError: Detected mismatch between collectives on ranks. "
        f"Rank 0 is running collective: {fp.format(op='ALLREDUCE', n=8)}, "
        f"but Rank 2 is running collective: {fp.format(op='BROADCAST', n=16)}."
        "Collectives differ in the following aspects: Op type: ALLREDUCEvs BROADCAST",
    )
    sides = sig.fields["sides"]
    assert [(s["rank"], s["op"], s["seq"], s["shape"], s["dtype"]) for s in sides] == [
        (0, "ALLREDUCE", 12, "[8]", "Float"),
        (2, "BROADCAST", 12, "[16]", "Float"),
    ]
    assert "Op type" in sig.fields["aspects"]


def test_monitored_barrier_and_training_end() -> None:
    sig = one(
        "monitored_barrier_failed",
        "RuntimeError: Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms",
    )
    assert sig.fields == {"ranks": [1, 3], "timeout_ms": 5000}
    assert "training_end" in kinds("`Trainer.fit` stopped: `max_epochs=3` reached.")


# ---------------------------------------------------------------------------------------
# c10d store and Gloo


def test_store_socket_lines() -> None:
    t = one(
        "store_connect_timeout",
        "The client socket has timed out after 60000ms while trying to connect to "
        "(10.0.0.1, 29500).",
    )
    assert (t.fields["host"], t.fields["port"], t.fields["timeout_ms"]) == (
        "10.0.0.1",
        29500,
        60000,
    )
    old = one(
        "store_connect_timeout",
        "[E socket.cpp:922] [c10d] The client socket has timed out after 1800s "
        "while trying to connect to (gpu-1, 29500).",
    )
    assert old.fields["timeout_ms"] == 1_800_000
    f = one(
        "store_connect_failed",
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to "
        "[::ffff:255.255.0.0]:29500 (errno: 110 - Connection timed out).",
    )
    assert (f.fields["host"], f.fields["errno"]) == ("::ffff:255.255.0.0", 110)
    any_addr = one(
        "store_connect_failed",
        "The client socket has failed to connect to any network address of (node1, 29500).",
    )
    assert any_addr.fields["host"] == "node1"


def test_store_resolution_bind_hostname_missing_env() -> None:
    gai = one(
        "name_resolution_failed",
        "[W socket.cpp:436] [c10d] The IPv4 network addresses of (bad-host, 29500) "
        "cannot be retrieved (gai error: -2 - Name or service not known).",
    )
    assert gai.fields["host"] == "bad-host"
    # a host without IPv6 prints this once and connects over IPv4: only its own signal,
    # which counts when tryConnect's retries print it again and again (config.V6_RETRIES)
    assert kinds(
        "[W socket.cpp:436] [c10d] The IPv6 network addresses of (localhost, 29500) cannot be "
        "retrieved (gai error: -2 - Name or service not known)."
    ) == {"name_resolution_v6"}
    bind = one(
        "store_bind_failed",
        "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    )
    assert bind.fields["port"] == 29500
    assert "hostname_unresolvable" in kinds(
        "[c10d] The hostname of the client socket cannot be retrieved. err=-3"
    )
    assert (
        one(
            "env_missing",
            "ValueError: Error initializing torch.distributed using env:// rendezvous: "
            "environment variable MASTER_ADDR expected, but not set",
        ).fields["var"]
        == "MASTER_ADDR"
    )


def test_gloo_errors() -> None:
    def what(line: str) -> str:
        return one("gloo_error", line).fields["what"]

    assert (
        what(
            "RuntimeError: Gloo connectFullMesh failed with "
            "[../third_party/gloo/gloo/transport/tcp/"
            "pair.cc:144] no error"
        )
        == "connect_full_mesh"
    )
    closed = one(
        "gloo_error",
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
        "[10.0.0.2]:5432",
    )
    assert (closed.fields["what"], closed.fields["peer"], closed.fields["port"]) == (
        "closed_by_peer",
        "10.0.0.2",
        5432,
    )
    assert (
        what(
            "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
            "1800000ms for "
            "recv operation to complete"
        )
        == "timeout"
    )
    iface = one(
        "gloo_error",
        "[enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != "
        "nullptr. Unable to find address for: eth9",
    )
    assert (iface.fields["what"], iface.fields["iface"]) == ("no_iface", "eth9")
    assert (
        one(
            "world_size",
            "[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer "
            "ranks is : 3",
        ).fields["n"]
        == 4
    )


def test_nccl_reset_by_peer_is_not_a_gloo_error() -> None:
    assert "gloo_error" not in kinds(
        "h:1:2 [0] NCCL WARN socketProgressOpt: Call to recv from 10.0.0.2<3456> "
        "failed : Connection reset by peer"
    )


# ---------------------------------------------------------------------------------------
# torchelastic summaries


ELASTIC = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-01-02_03:04:06
  host      : node-a
  rank      : 2 (local_rank: 2)
  exitcode  : -6 (pid: 502)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 502
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-01-02_03:04:05
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 501)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 501
============================================================
node-a:501:501 [1] NCCL INFO NET/IB : No device found.""".splitlines()


def test_elastic_failure_blocks() -> None:
    sigs = signals(*ELASTIC)
    fails = [s for s in sigs if s.kind == "elastic_failure"]
    assert [
        (s.rank, s.host, s.fields["exitcode"], s.fields["pid"], s.fields["root"]) for s in fails
    ] == [(2, "node-a", -6, 502, False), (1, "node-a", -9, 501, True)]
    assert fails[1].fields["signal"] == "SIGKILL" and fails[1].time == parse_time(
        "2024-01-02 03:04:05"
    )
    assert next(s for s in sigs if s.kind == "nccl_ib_no_device").rank == 1  # via its pid


def test_elastic_entries_without_headers_in_a_pasted_excerpt() -> None:
    sigs = signals(
        "  time      : 2024-01-02_03:04:05",
        "  host      : h",
        "  rank      : 3 (local_rank: 3)",
        "  exitcode  : 1 (pid: 9)",
        "  time      : 2024-01-02_03:04:05",
        "  rank      : 4 (local_rank: 0)",
    )
    assert [s.rank for s in sigs if s.kind == "elastic_failure"] == [3, 4]


def test_key_value_lines_outside_a_summary_are_ignored() -> None:
    assert not kinds("  rank      : 3", "  exitcode : 1")


def test_agent_lines() -> None:
    sig = one(
        "elastic_worker_failed",
        "E0314 12:02:42.5 140213 api.py:869] failed (exitcode: -9) local_rank: 0 "
        "(pid: 88410) of binary: /usr/bin/python3",
    )
    assert (sig.fields["exitcode"], sig.fields["pid"]) == (-9, 88410)
    assert (
        one("elastic_closing", "Sending process 88412 closing signal SIGTERM").fields["pid"]
        == 88412
    )


# ---------------------------------------------------------------------------------------
# Python tracebacks


def test_traceback_frames_and_exception() -> None:
    sig = one(
        "exception",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/x/train.py", line 10, in <module>',
        '[rank1]:   File "/x/torch/distributed/distributed_c10d.py", line 1707, in all_reduce',
        "[rank1]:     work.wait()",
        "[rank1]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.",
    )
    assert sig.rank == 1 and sig.fields["type"] == "DistBackendError"
    assert sig.fields["frames"] == ["<module>", "all_reduce"] and sig.fields["in_collective"]


def test_a_traceback_through_ddps_buffer_broadcast_is_in_a_collective() -> None:
    # the frames are keyed by file and function (catalog/collective_frames.tsv): DDP's
    # forward broadcasts its buffers; a user's own all_reduce is no torch collective
    site = "/opt/venv/lib/python3.11/site-packages/torch"
    sig = one(
        "exception",
        "Traceback (most recent call last):",
        '  File "/x/train.py", line 10, in <module>',
        f'  File "{site}/nn/parallel/distributed.py", line 1690, in _sync_buffers',
        f'  File "{site}/nn/parallel/distributed.py", line 2360, in '
        "_distributed_broadcast_coalesced",
        "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.",
    )
    assert sig.fields["in_collective"]
    mine = one("exception", "Traceback (most recent call last):",
               '  File "/x/train.py", line 3, in all_reduce', "RuntimeError: boom")
    assert not mine.fields["in_collective"]


def test_interleaved_tracebacks_stay_with_their_rank() -> None:
    sigs = signals(
        "[rank0]: Traceback (most recent call last):",
        "[rank1]: Traceback (most recent call last):",
        '[rank0]:   File "/x/a.py", line 1, in barrier',
        '[rank1]:   File "/x/a.py", line 2, in load',
        "[rank1]: ValueError: bad",
        "[rank0]: RuntimeError: stuck",
    )
    frames = {s.rank: s.fields["frames"] for s in sigs if s.kind == "exception"}
    assert frames == {0: ["barrier"], 1: ["load"]}


def test_excerpt_starting_mid_traceback_keeps_frames_and_tiny_tensor() -> None:
    sig = one(
        "exception",
        "      flag = <local> tensor([1], dtype=torch.int8)",
        '  File "/usr/lib/torch/distributed/distributed_c10d.py", line 1707, in all_reduce',
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/un",
    )
    assert sig.fields["tiny_tensor"] and sig.fields["in_collective"]


# ---------------------------------------------------------------------------------------
# OOM, NaN, progress, DDP


def test_oom_variants() -> None:
    gpu = one(
        "oom",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 3; 15.78 GiB "
        "total capacity; 14.2 GiB already allocated)",
    )
    assert (gpu.fields["device"], gpu.fields["tried"], gpu.fields["gpu"]) == ("gpu", "20.00 MiB", 3)
    assert one("oom", "RuntimeError: CUDA error: out of memory").fields["device"] == "gpu"
    cpu = one(
        "oom",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate "
        "memory)",
    )
    assert cpu.fields["device"] == "host"
    assert (
        one("oom", "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=12.0.").fields[
            "device"
        ]
        == "host"
    )
    assert one("oom", "Killed").fields["weak"]
    assert "oom" not in kinds("the process was not killed", "Skill issue")


def test_nan_lines_and_near_misses() -> None:
    for line in (
        "step 120 | loss nan | lr 1e-4",
        "{'loss': nan, 'grad_norm': nan}",
        "train/loss: inf",
        "Loss is NaN, stopping training",
        "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",
        "FloatingPointError: Minimum loss scale reached (0.0001).",
        "ValueError: Input contains NaN.",
        "grad_norm=nan at step 7",
    ):
        assert "nan_loss" in kinds(line), line
    for line in (
        "latency 12 nanoseconds",
        "NCCL INFO Using network IB",
        "running inference on 8 GPUs",
        "loss 0.231 (no nan)".replace("(no nan)", ""),
        "Gradient overflow. Skipping step",
    ):
        assert "nan_loss" not in kinds(line), line
    assert one("nan_loss", "step 1200 loss nan").fields["step"] == 1200


def test_progress_bars_and_steps() -> None:
    bar = one("progress", "Preparing data...:  36%|███▌      | 24/67 [23:16<30:00, 41.87s/it]")
    assert bar.fields == {
        "desc": "Preparing data",
        "n": 24,
        "total": 67,
        "elapsed_s": 1396,
        "style": "bar",
    }
    assert (
        one(
            "progress",
            "Map (num_proc=4):  50%|█████     | 5000/10000 [1:02:03<1:00:00, 1.3 examples/s]",
        ).fields["elapsed_s"]
        == 3723
    )
    step = one("progress", " iteration      100/  500000 | consumed samples: 51200")
    assert (step.fields["n"], step.fields["total"], step.fields["style"]) == (100, 500000, "step")


def test_ddp_unused_parameters() -> None:
    sigs = signals(
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting "
        "a new "
        "one. This error indicates that your module has parameters that were not used "
        "in producing loss.",
        "Parameter indices which did not receive grad for rank 1: 12 13",
    )
    assert [s.fields["named_rank"] for s in sigs if s.kind == "ddp_unused_params"] == [None, 1]
    assert "ddp_unused_params" in kinds(
        "RuntimeError: It looks like your LightningModule has parameters that were "
        "not used in producing the loss returned by training_step."
    )


# ---------------------------------------------------------------------------------------
# versions, Slurm, hardware, world size, env, other tools


def test_versions() -> None:
    assert one("version", "PyTorch version: 2.1.0+cu121").fields["version"] == "2.1.0"
    assert one("version", "sglang is using nccl==2.21.5").fields == {
        "component": "nccl",
        "version": "2.21.5",
        "cuda": None,
    }
    assert (
        one(
            "version", "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |"
        ).fields["component"]
        == "nvidia_driver"
    )
    assert "version_error" in kinds(
        "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"
    )
    assert "version" not in kinds("torch = <global> <module 'torch' from '/x/torch/__init__.py'>")


def test_slurm_lines() -> None:
    task = one("slurm_task_exit", "srun: error: node3: task 5: Exited with exit code 1")
    assert (task.fields["node"], task.fields["tasks"]) == ("node3", "5")
    cancel = one(
        "slurm_cancelled",
        "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2024-01-01T10:00:00 "
        "DUE TO TIME LIMIT ***",
    )
    assert cancel.fields["reason"] == "TIME LIMIT"
    assert (
        one("slurm_node_failure", "srun: error: Node failure on node07").fields["node"] == "node07"
    )


def test_hardware_lines() -> None:
    assert (
        one("xid", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.").fields[
            "code"
        ]
        == 79
    )
    assert (
        one(
            "cuda_error", "RuntimeError: CUDA error: an illegal memory access was encountered"
        ).fields["message"]
        == "an illegal memory access was encountered"
    )
    assert "device_mapping_error" in kinds("RuntimeError: CUDA error: invalid device ordinal")


def test_world_size_env_and_other_tools() -> None:
    assert (
        one("world_size", "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/3").fields["n"] == 3
    )
    assert one("nnodes", "torchrun --nnodes=2 --nproc_per_node=8 train.py").fields["n"] == 2
    env = one("env", "export NCCL_IB_DISABLE=0")
    assert (env.fields["var"], env.fields["value"], env.fields["source"]) == (
        "NCCL_IB_DISABLE",
        "0",
        "shell",
    )
    assert not kinds("#export NCCL_IB_DISABLE=1")
    assert (
        one(
            "straggler_report", "MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | MnPwr/Rnk: 1W/1"
        ).fields["max_rank"]
        == 0
    )
    ds = one(
        "comm_timing",
        "rank=0 | comm op: reduce_scatter_base | time (ms): 9.46 | msg size: 678.86 MB | "
        "algbw (Gbps): 1204.52 | busbw (Gbps): 1129.23",
    )
    assert (ds.rank, ds.fields["busbw_gbps"]) == (0, 1129.23)
    assert one("fr_missing_ranks", "missing ranks: {3, 7}").fields["ranks"] == [3, 7]


# ---------------------------------------------------------------------------------------
# hostile input and speed


def test_hostile_lines_never_raise() -> None:
    nasty = [
        "",
        "\x00\x01\x02\xff",
        "\ufffd" * 1000,
        "🔥" * 5000,
        "[" * 10000,
        "Rank " * 20000,
        "WorkNCCL(" + "(" * 5000,
        "Watchdog caught " + "x" * 100000,
        "[rank999999999999999999]: Killed",
        "Detected mismatch between collectives "
        + "Rank 0 is running collective: CollectiveFingerPrint(" * 300,
        "  time      : 2024-99-99_99:99:99",
        "  rank      : x (local_rank: y)",
        "Traceback (most recent call last):",
        '  File "',
        "a:b:c [d] NCCL INFO",
        "0" * 100000,
        "NCCL WARN " + "Connect to " * 3000,
    ]
    result = signals(*nasty)
    assert not [s for s in result if s.kind == "extract_errors"], [s.fields for s in result]
    # what these lines do say is still read: the last-but-one is a tee'd OOM kill
    assert [(s.kind, s.fields.get("weak")) for s in result if s.kind == "oom"] == [("oom", True)]


def test_watchdog_lookahead_at_end_of_file() -> None:
    assert (
        one("watchdog_timeout", "[Rank 0] Watchdog caught collective operation timeout:").fields[
            "seq"
        ]
        is None
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=20))
def test_any_text_extracts_without_a_parser_breaking(lines: list[str]) -> None:
    # extract() never raises by design, so what can fail here is a parser that broke on a
    # line (counted as extract_errors) or a signal that points outside the file
    sigs = signals(*lines)
    assert not [s for s in sigs if s.kind == "extract_errors"], [s.fields for s in sigs]
    assert all(s.file == "job.log" and 1 <= s.line <= len(lines) for s in sigs)


def test_a_line_that_breaks_a_parser_is_skipped_counted_and_the_rest_is_read(
    monkeypatch,
) -> None:
    from diag.analyze import textlog

    feed = textlog.Extractor.feed

    def feed_that_breaks_on_line_2(self, n, raw):
        if n == 2:
            raise ValueError("parser bug")
        return feed(self, n, raw)

    monkeypatch.setattr(textlog.Extractor, "feed", feed_that_breaks_on_line_2)
    sigs = signals("Killed", "Killed", "srun: error: Node failure on node07")
    assert [(s.kind, s.line) for s in sigs] == [
        ("oom", 1),
        ("slurm_node_failure", 3),
        ("extract_errors", 0),
    ]
    assert sigs[-1].fields == {"count": 1}


def test_large_nccl_log_gives_one_channel_signal_per_process() -> None:
    lines = []
    for i in range(40_000):
        r = i % 256
        lines.append(
            f"node{r // 8:03d}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO Channel {i % 32:02d}/32 : "
            f"{r}[{r % 8}] -> {(r + 1) % 256}[0] [send] via NET/IB/0/GDRDMA"
        )
    sigs = signals(*lines)  # its speed is measured in benchmarks/, not asserted here
    assert len(sigs) == 256  # one nccl_channel_net per process


def test_rank_from_a_per_rank_file_name() -> None:
    sigs = extract(TextLog("logs/job_rank_3.out", ["RuntimeError: CUDA error: out of memory"]))
    assert sigs[0].rank == 3
    assert extract(TextLog("logs/console.log", ["Killed"]))[0].rank is None
    assert extract(TextLog("rank0.log", ["[rank2]: Killed"]))[0].rank == 2


def test_ranks_torch_blames_and_store_barrier_and_activity() -> None:
    uid = one(
        "blamed_rank",
        "[rank3]: DistBackendError: [3] is setting up NCCL communicator and "
        "retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but "
        "store->get('0') got error: Socket Timeout",
    )
    assert uid.fields["ranks"] == [0]
    faulty = one(
        "blamed_rank",
        "Rank 2 successfully reached monitoredBarrier, but received errors "
        "while waiting for send/recv from rank 1. Please check rank 1 logs for faulty rank.",
    )
    assert faulty.fields["ranks"] == [1]
    barrier = one(
        "store_wait_clients",
        "RuntimeError: Timed out initializing process group in store "
        "based barrier on rank: 0, for key: store_based_barrier_key:1 (world_size=16, "
        "worker_count=8, timeout=0:30:00)",
    )
    assert (barrier.fields["joined"], barrier.fields["total"]) == (8, 16)
    assert (
        one("activity", "[rank0]: Saving checkpoint to /ckpt/step_500").fields["verb"] == "saving"
    )
    assert "nan_loss" in kinds(
        "Current loss scale already at minimum - cannot decrease scale anymore."
    )


def test_a_label_before_indentation_and_a_loggers_stamp_are_peeled() -> None:
    # a stack dump's frames under srun -l keep their indentation after the label; a
    # logger's "date time | " stamp goes, its time kept
    framed = parse_line(1, '5:   File "/srv/train.py", line 12 in step')
    assert framed.local_rank == 5 and framed.body == '  File "/srv/train.py", line 12 in step'
    stamped = parse_line(2, "2026-01-15 06:21:54 | node7:811:902 [0] NCCL WARN x")
    assert stamped.body.startswith("node7:811:902") and stamped.pid == 811
    assert stamped.time is not None
