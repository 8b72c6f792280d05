"""Thread stacks pasted as text (diag/analyze/stacktext.py) and what the stacks detector
(diag/analyze/detectors/stacks.py) makes of them; plus the traceback details rules read
(frame files and source lines), Ray's line prefix and the rules keyed to where an
exception was raised. Tiny logs built from lines; no files, no processes."""

from __future__ import annotations

from types import SimpleNamespace

from diag.analyze.detectors import config, failure, stacks
from diag.analyze.inputs import TextLog
from diag.analyze.textlog import extract, parse_line
from diag.verdict import Basis, Category


def signals(*lines: str) -> list:
    return extract(TextLog("job.log", list(lines)))


def threads(*lines: str) -> list:
    return [s for s in signals(*lines) if s.kind == "thread_stack"]


def funcs(sig) -> list[str]:
    return [f["func"] for f in sig.fields["frames"]]


def findings(detect, *lines: str) -> list:
    return detect(SimpleNamespace(signals=signals(*lines)))


def pyspy(pid: int, *frames: str, name: str = "MainThread") -> list[str]:
    return [f"Process {pid}: /usr/bin/python3 -u train.py", "Python v3.11.4 (/usr/bin/python3)",
            "", f'Thread {pid} (active): "{name}"', *[f"    {f}" for f in frames]]


def comm_init(pid: int, rank: int, world: int = 4) -> str:
    return (f"node2:{pid}:{pid + 90} [{rank}] NCCL INFO ncclCommInitRank comm 0x55aa{rank} "
            f"rank {rank} nranks {world} cudaDev {rank} busId 1b000 - Init COMPLETE")


ALL_REDUCE = ("all_reduce (torch/distributed/distributed_c10d.py:2288)",
              "wrapper (torch/distributed/c10d_logger.py:79)", "log_metrics (train.py:120)",
              "main (train.py:300)")

# ---------------------------------------------------------------------------------------
# The parser


def test_pyspy_dump_threads_frames_and_pid() -> None:
    found = threads(*pyspy(3101, *ALL_REDUCE), 'Thread 3170 (idle): "pin_memory"',
                    "    get (multiprocessing/queues.py:113)", "after the dump")
    assert [t.fields["thread"] for t in found] == ["MainThread", "pin_memory"]
    main = found[0]
    assert main.fields["pid"] == 3101 and main.fields["format"] == "py-spy"
    assert funcs(main) == ["all_reduce", "wrapper", "log_metrics", "main"]
    assert main.fields["frames"][0] == {"func": "all_reduce", "line": 2288, "at": 5,
                                        "file": "torch/distributed/distributed_c10d.py"}
    assert found[0].fields["dump"] == found[1].fields["dump"]


def test_pyspy_locals_and_native_frames_stay_in_the_thread() -> None:
    (main,) = threads('Thread 0x7000B3A1 (active+gil): "MainThread"',
                      "    ncclAllReduce (libnccl.so.2)", "    step (train.py:88)",
                      "        Arguments:", "            batch: <dict at 0x7f1>",
                      "    main (train.py:140)")
    assert funcs(main) == ["ncclAllReduce", "step", "main"]
    assert main.fields["frames"][0]["line"] is None and main.fields["status"] == "active+gil"


def test_faulthandler_all_threads_and_current_thread() -> None:
    found = threads(
        "Fatal Python error: Segmentation fault", "",
        "Thread 0x00007f01aa7fe640 (most recent call first):",
        '  File "/usr/lib/python3.10/threading.py", line 320 in wait', "",
        "Current thread 0x00007f02c1d4b740 (most recent call first):",
        '  File "/x/ops.py", line 14 in fused_kernel', '  File "/x/train.py", line 9 in <module>',
        "", "Extension modules: numpy.core._multiarray_umath (total: 1)")
    assert [t.fields["current"] for t in found] == [False, True]
    assert funcs(found[1]) == ["fused_kernel", "<module>"]
    assert found[0].fields["dump"] == found[1].fields["dump"]


def test_faulthandler_frames_without_header_and_single_stack_form() -> None:
    (cut,) = threads('  File "/x/a.py", line 3 in wait', '  File "/x/b.py", line 7 in run')
    assert funcs(cut) == ["wait", "run"]
    (one,) = threads("Stack (most recent call first):", '  File "/x/c.py", line 1 in f',
                     "  <no Python frame>")
    assert funcs(one) == ["f"] and one.fields["current"]


def test_a_traceback_frame_is_not_a_faulthandler_frame() -> None:
    assert not threads("Traceback (most recent call last):",
                       '  File "/x/a.py", line 3, in wait', "RuntimeError: boom")


def test_two_processes_dumps_and_a_repeated_thread_id_are_separate_dumps() -> None:
    head = "Thread 0x00007f0000000001 (most recent call first):"
    found = threads(head, '  File "/x/a.py", line 3 in f', "", head,
                    '  File "/x/a.py", line 4 in g')
    assert len({t.fields["dump"] for t in found}) == 2


def test_prefixed_dumps_stay_with_their_rank() -> None:
    found = threads("[rank0]:Thread 0x00007f0000000001 (most recent call first):",
                    "[rank1]:Thread 0x00007f0000000001 (most recent call first):",
                    '[rank0]:  File "/x/a.py", line 3 in barrier',
                    '[rank1]:  File "/x/a.py", line 9 in load')
    assert {t.rank: funcs(t) for t in found} == {0: ["barrier"], 1: ["load"]}


def test_pyspy_pid_takes_its_rank_from_nccls_init_line() -> None:
    (main,) = threads(comm_init(7001, 3), *pyspy(7001, *ALL_REDUCE))
    assert main.rank == 3


# ---------------------------------------------------------------------------------------
# Tracebacks: files and source lines; Ray's prefix


def test_traceback_keeps_files_and_source_lines() -> None:
    (exc,) = [s for s in signals(
        "Traceback (most recent call last):",
        '  File "/srv/app/main.py", line 40, in <module>', "    run()",
        '  File "/site-packages/lib/io.py", line 7, in run',
        "    t = torch.ones(1, device=dev)", "        ^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "RuntimeError: CUDA error: invalid device ordinal") if s.kind == "exception"]
    assert exc.fields["frames"] == ["<module>", "run"]
    assert [f["code"] for f in exc.fields["stack"]] == ["run()", "t = torch.ones(1, device=dev)"]
    assert exc.fields["stack"][1]["file"] == "/site-packages/lib/io.py"


def test_ray_prefix_is_peeled_and_keeps_pid_and_ip() -> None:
    line = parse_line(1, "(WorkerDict pid=4711, ip=10.1.2.3)   File \"/x.py\", line 1, in f")
    assert (line.proc, line.host, line.body) == (4711, "10.1.2.3", '  File "/x.py", line 1, in f')
    assert parse_line(1, "(pid=88) hello").proc == 88
    assert parse_line(1, "(VllmWorker rank=1 pid=90) hello").body == "hello"
    assert parse_line(1, "(see pid=12 above) hello").proc is None


def test_ray_workers_interleaved_tracebacks_stay_apart() -> None:
    sigs = signals("(A pid=1) Traceback (most recent call last):",
                   "(B pid=2) Traceback (most recent call last):",
                   '(A pid=1)   File "/x/a.py", line 1, in fa',
                   '(B pid=2)   File "/x/b.py", line 2, in fb',
                   "(A pid=1) ValueError: a", "(B pid=2) KeyError: b")
    got = {s.fields["pid"]: s.fields["frames"] for s in sigs if s.kind == "exception"}
    assert got == {1: ["fa"], 2: ["fb"]}


# ---------------------------------------------------------------------------------------
# The stacks detector


def _four_ranks(odd_frames: tuple) -> list[str]:
    lines = [comm_init(7000 + r, r) for r in range(4)]
    for r in range(4):
        lines += pyspy(7000 + r, *(odd_frames if r == 1 else ALL_REDUCE))
    return lines


def test_the_rank_outside_the_collective_is_the_odd_one_out() -> None:
    (f,) = findings(stacks.detect_text, *_four_ranks((
        "wait (threading.py:320)", "get (queue.py:171)",
        "_try_get_data (torch/utils/data/dataloader.py:1133)", "train (train.py:90)")))
    assert (f.category, f.culprit.ranks) == (Category.RANK_HANG, (1,))
    assert "_try_get_data" in f.title and all(e.line for e in f.evidence)


def test_a_rank_in_another_collective_is_a_mismatch() -> None:
    (f,) = findings(stacks.detect_text, *_four_ranks((
        "broadcast (torch/distributed/distributed_c10d.py:1977)",
        "wrapper (torch/distributed/c10d_logger.py:79)", "sync_params (train.py:60)")))
    assert (f.category, f.culprit.ranks) == (Category.COLLECTIVE_MISMATCH, (1,))


def test_identical_stacks_or_a_lone_waiter_name_no_one() -> None:
    assert not findings(stacks.detect_text, *_four_ranks(ALL_REDUCE))
    lines = [comm_init(7000 + r, r) for r in range(4)]
    busy = ("forward (model.py:40)", "step (train.py:88)")
    for r in range(4):
        lines += pyspy(7000 + r, *(ALL_REDUCE if r == 0 else busy))
    assert not findings(stacks.detect_text, *lines)  # rank 0 waits for the other three


def test_the_launcher_agent_is_not_a_rank() -> None:
    agent = pyspy(6999, "_invoke_run (torch/distributed/elastic/agent/server/api.py:871)",
                  "main (torch/distributed/run.py:901)")
    # the agent is no odd one out: what is left is one rank's dump, waiting in a collective
    # for a rank nobody dumped, which names no one
    (f,) = findings(stacks.detect_text, *agent, *pyspy(7000, *ALL_REDUCE))
    assert f.culprit.ranks == () and "7000" in f.title and "6999" not in f.title
    assert "not dumped" in f.title


def test_zero3_fetch_from_a_forward_hook_is_unequal_forward_counts() -> None:
    (f,) = findings(stacks.detect_text,
                    "Thread 0x00007f3b0a9ff740 (most recent call first):",
                    '  File "/e/deepspeed/runtime/zero/partition_parameters.py", line 745 in wait',
                    '  File "/e/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 344 '
                    'in fetch_sub_module',
                    '  File "/e/deepspeed/runtime/zero/parameter_offload.py", line 360 in '
                    '_pre_forward_module_hook',
                    '  File "/e/torch/nn/modules/module.py", line 1562 in _call_impl',
                    '  File "/e/transformers/generation/utils.py", line 2215 in generate')
    assert (f.category, f.culprit.ranks, f.basis) == (Category.COLLECTIVE_MISMATCH, (), Basis.LINE)


def test_zero3_frames_without_a_forward_hook_are_not_that() -> None:
    # one process's dump in the optimizer step: busy in its own code, not unequal forwards
    (f,) = findings(stacks.detect_text,
                    "Thread 0x00007f3b0a9ff740 (most recent call first):",
                    '  File "/e/deepspeed/runtime/zero/stage3.py", line 90 in step',
                    '  File "/e/train.py", line 9 in main')
    assert f.category is Category.RANK_HANG and "busy in its own code" in f.title


# ---------------------------------------------------------------------------------------
# Rules keyed to where an exception was raised, and to CPython's and torchrun's lines


def _ordinal(*frames: tuple[str, str, str]) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for path, func, code in frames:
        lines += [f'  File "{path}", line 10, in {func}', f"    {code}"]
    return lines + ["RuntimeError: CUDA error: invalid device ordinal"]


def test_invalid_ordinal_in_device_selection_is_the_launch() -> None:
    (f,) = findings(config.detect_text, *_ordinal(
        ("/w/train.py", "setup", "torch.cuda.set_device(args.local_rank)"),
        ("/py/site-packages/torch/cuda/__init__.py", "set_device",
         "torch._C._cuda_setDevice(device)")))
    assert f.category is Category.ENV_MISCONFIG


def test_invalid_ordinal_elsewhere_is_the_code_that_computed_it() -> None:
    (f,) = findings(config.detect_text, *_ordinal(
        ("/py/site-packages/kvlib/xfer.py", "pull", "buf = torch.empty(n, device=dev)")))
    assert f.category is Category.OTHER and "kvlib/xfer.py" in f.title
    (bare,) = findings(config.detect_text, "RuntimeError: CUDA error: invalid device ordinal")
    assert bare.category is Category.ENV_MISCONFIG  # nothing says where: the common cause


def test_local_rank_spelling_decides_the_argparse_finding() -> None:
    def top(arg: str):
        (f,) = findings(failure.detect_text, f"train.py: error: unrecognized arguments: {arg}")
        return f.category, f.basis
    assert top("--local-rank=1") == (Category.VERSION_MISMATCH, Basis.EMITTER)
    assert top("--local_rank=1") == (Category.ENV_MISCONFIG, Basis.LINE)
    assert top("--fp16") == (Category.ENV_MISCONFIG, Basis.HEURISTIC)


def test_the_agents_signal_decides_the_finding() -> None:
    def top(sig: str, *more: str):
        found = findings(failure.detect_text, f"Received {sig} death signal, shutting down "
                         "workers", *more)
        return [(f.category, f.basis) for f in found]
    assert top("1") == [(Category.ENV_MISCONFIG, Basis.EMITTER)]
    assert top("Signals.SIGINT") == [(Category.OTHER, Basis.HEURISTIC)]
    assert top("15") == [(Category.OTHER, Basis.LINE)]
    cancelled = "slurmstepd: error: *** JOB 77 ON gpu3 CANCELLED AT 2025-02-01T10:00:00 ***"
    assert (Category.OTHER, Basis.LINE) not in top("15", cancelled)  # the sender is known


def test_progress_after_the_dumps_means_they_were_a_sample() -> None:
    lines = _four_ranks(("wait (threading.py:320)", "get (queue.py:171)",
                         "_try_get_data (torch/utils/data/dataloader.py:1133)"))
    assert findings(stacks.detect_text, *lines)
    assert not findings(stacks.detect_text, *lines, "step 5200/10000 loss 1.93")


def test_a_segfault_names_the_crashing_frame_and_an_abort_does_not() -> None:
    crash = ("[rank3]:Fatal Python error: Segmentation fault", "[rank3]:",
             "[rank3]:Current thread 0x00007f02c1d4b740 (most recent call first):",
             '[rank3]:  File "/x/ext/ops.py", line 14 in fused_rope',
             '[rank3]:  File "/x/model.py", line 80 in forward')
    (f,) = findings(failure.detect_text, *crash)
    assert (f.category, f.culprit.ranks) == (Category.OTHER, (3,)) and "fused_rope" in f.title
    assert not findings(failure.detect_text, "[rank1]:Fatal Python error: Aborted")


def test_invalid_ordinal_in_start_up_code_is_still_the_launch() -> None:
    (f,) = findings(config.detect_text, *_ordinal(
        ("/w/train.py", "<module>", "main()"), ("/w/train.py", "main", "model.to(device)")))
    assert f.category is Category.ENV_MISCONFIG


def test_the_same_collective_from_another_call_site_names_no_one() -> None:
    assert not findings(stacks.detect_text, *_four_ranks((
        "all_reduce (torch/distributed/distributed_c10d.py:2288)",
        "wrapper (torch/distributed/c10d_logger.py:79)", "clip_grads (train.py:75)")))


def test_two_unmapped_dumps_in_different_collectives_name_the_barrier_process() -> None:
    # pasted py-spy dumps with no NCCL line to map pids to ranks: the culprit is a process
    barrier = ("barrier (torch/distributed/distributed_c10d.py:4710)",
               "wrapper (torch/distributed/c10d_logger.py:79)", "save_checkpoint (train.py:58)",
               "main (train.py:90)")
    backward = ("_engine_run_backward (torch/autograd/graph.py:841)",
                "backward (torch/autograd/__init__.py:364)", "main (train.py:84)")
    (f,) = findings(stacks.detect_text, *pyspy(7001, *backward), *pyspy(7000, *barrier))
    assert f.category is Category.COLLECTIVE_MISMATCH
    assert f.title.startswith("process 7000 waits in barrier")
    assert "7000" in f.evidence[0].text  # the culprit's dump is quoted first
