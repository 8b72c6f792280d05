"""Every frame that issues a collective is a ``collective`` state, read off the installed
torch (diag/analyze/catalog/collective_frames.tsv, frames_census.py).

As PyTorch's Flight Recorder analyzer tests every collective name, these tests walk
torch.distributed.distributed_c10d's ``__all__`` and every function the census finds in
torch's collective APIs and their users (DDP, FSDP2, pipelining, the store), put each at the
top of a synthetic py-spy stack and ask ``state_of``. A row taken out of the TSV fails here.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from pathlib import Path

import pytest

from diag.analyze.catalog import collective_frames, frames_census
from diag.analyze.stackgroups import Frame, state_of

torch_c10d = pytest.importorskip("torch.distributed.distributed_c10d")

SITE = "/opt/venv/lib/python3.11/site-packages"
USER = Frame("train_step", "/home/u/train.py", 40)
ROOT = frames_census.torch_root()
FOUND = frames_census.census(ROOT)
ISSUING_C10D = {f.function for f in FOUND if f.path == frames_census.C10D}


def _state(func: str, path: str, *outer: Frame) -> tuple[str, Frame | None]:
    return state_of((Frame(func, f"{SITE}/{path}", 1), *outer, USER))


def _collective_at_top(func: str, path: str) -> bool:
    state, at = _state(func, path)
    return state == "collective" and at is not None and at.func == func


# ---------------------------------------------------------------------------------------
# the enumeration: every collective of the installed torch



def _public_functions() -> list[str]:
    """__all__'s functions: its classes, constants and C++ builtins are no Python frame."""
    with warnings.catch_warnings():  # looking at the deprecated reduce_op warns
        warnings.simplefilter("ignore", FutureWarning)
        return sorted(n for n in torch_c10d.__all__
                      if inspect.isfunction(obj := getattr(torch_c10d, n))
                      and obj.__module__ == torch_c10d.__name__)


PUBLIC = _public_functions()


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_function_of_distributed_c10d_is_a_collective_iff_it_issues_one(
        name: str) -> None:
    expected = name in ISSUING_C10D
    assert _collective_at_top(name, frames_census.C10D) is expected, (
        f"{name}: the census says it {'issues' if expected else 'issues no'} collective; "
        f"{'add' if expected else 'remove'} its row in collective_frames.tsv")


def test_the_census_finds_the_collectives_everyone_knows() -> None:
    assert {"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast",
            "barrier", "monitored_barrier", "send", "recv", "isend", "irecv",
            "batch_isend_irecv", "all_gather_object", "broadcast_object_list",
            "send_object_list", "new_group", "init_process_group",
            "_store_based_barrier"} <= ISSUING_C10D
    assert not ISSUING_C10D & {"get_rank", "get_world_size", "is_initialized", "get_backend"}
    assert len(FOUND) >= 120 and len(PUBLIC) >= 50  # reading nothing must not pass


@pytest.mark.parametrize("found", FOUND, ids=lambda f: f"{f.path[6:]}:{f.function}")
def test_every_issuing_function_the_census_finds_is_a_collective_frame(
        found: frames_census.Found) -> None:
    # py-spy >= 0.4 names a method by its qualname; tracebacks, faulthandler and older
    # py-spy by the function alone
    for func in {found.function, found.function.rsplit(".", 1)[-1]}:
        assert _collective_at_top(func, found.path), (
            f"{found.path} {found.function} calls {', '.join(found.calls)}: "
            "add it to collective_frames.tsv")


def test_every_method_of_process_group_and_backend_is_known_to_the_census() -> None:
    from torch._C._distributed_c10d import Backend, ProcessGroup

    methods = {m for cls in (ProcessGroup, Backend) for m in dir(cls) if not m.startswith("__")}
    unknown = methods - frames_census.COMM_METHODS - frames_census.LOCAL_METHODS
    assert not unknown, f"say in frames_census whether these communicate: {sorted(unknown)}"


@functools.cache
def _defined(path: str) -> set[str]:
    return {q for q, _ in frames_census._functions(frames_census._parse(ROOT / path))}


def test_every_torch_row_names_a_function_of_the_installed_torch() -> None:
    # a renamed or mistyped row would never match a frame
    missing = [f"{e.path} {e.function}" for e in collective_frames.entries()
               if e.library == "torch" and "not in the 2.13 source" not in e.source
               and e.function not in _defined(e.path)]
    assert not missing


# ---------------------------------------------------------------------------------------
# the frames the census reaches only through Python: named, each at the top of a stack

NAMED = [
    # DDP's buffer broadcast in forward (labelled "compute" in a live hang)
    ("torch/nn/parallel/distributed.py", "DistributedDataParallel._sync_buffers"),
    ("torch/nn/parallel/distributed.py", "DistributedDataParallel._sync_module_buffers"),
    ("torch/nn/parallel/distributed.py", "DistributedDataParallel._default_broadcast_coalesced"),
    ("torch/nn/parallel/distributed.py",
     "DistributedDataParallel._distributed_broadcast_coalesced"),
    ("torch/distributed/utils.py", "_sync_module_states"),
    # FSDP2
    ("torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", "foreach_all_gather"),
    ("torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", "foreach_reduce"),
    ("torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup.unshard"),
    ("torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py",
     "FSDPParamGroup.wait_for_unshard"),
    ("torch/distributed/fsdp/_fully_shard/_fully_shard.py", "_UnshardHandleImpl.wait"),
    # pipeline stages
    ("torch/distributed/pipelining/schedules.py", "_sorted_batch_p2p"),
    ("torch/distributed/pipelining/schedules.py", "_batch_p2p"),
    ("torch/distributed/pipelining/schedules.py", "_wait_batch_p2p"),
    ("torch/distributed/pipelining/stage.py", "PipelineStage._recv_meta"),
    # store waits and functional collectives
    ("torch/distributed/rendezvous.py", "_create_c10d_store"),
    ("torch/distributed/elastic/utils/store.py", "barrier"),
    ("torch/distributed/_functional_collectives.py", "wait_tensor"),
    ("torch/distributed/_functional_collectives.py", "AsyncCollectiveTensor.wait"),
    # torch before 2.2
    ("torch/distributed/distributed_c10d.py", "broadcast_multigpu"),
    # read in their repositories (not installed here)
    ("deepspeed/comm/comm.py", "all_reduce"),
    ("deepspeed/runtime/zero/partition_parameters.py", "AllGatherCoalescedHandle.wait"),
    ("deepspeed/runtime/zero/partitioned_param_coordinator.py",
     "PartitionedParameterCoordinator.fetch_sub_module"),
    ("deepspeed/runtime/pipe/p2p.py", "recv"),
    ("megatron/core/distributed/param_and_grad_buffer.py",
     "_ParamAndGradBucketGroup.finish_grad_sync"),
    ("megatron/core/pipeline_parallel/p2p_communication.py", "P2PCommunicator._communicate"),
    ("accelerate/utils/operations.py", "gather"),
    ("accelerate/state.py", "PartialState.wait_for_everyone"),
]


@pytest.mark.parametrize("path,func", NAMED, ids=[f"{p}:{f}" for p, f in NAMED])
def test_a_named_frame_is_a_collective(path: str, func: str) -> None:
    assert _collective_at_top(func, path)
    assert _collective_at_top(func.rsplit(".", 1)[-1], path)


def _frames(*rows: tuple[str, str]) -> tuple[Frame, ...]:
    return tuple(Frame(func, f"{SITE}/{path}", 1) for path, func in rows)


MODULE = "torch/nn/modules/module.py"
DDP = "torch/nn/parallel/distributed.py"


def test_ddp_broadcasting_its_buffers_in_forward_waits_in_a_collective() -> None:
    # py-spy of the live hang: the broadcast is issued from DDP's pre-forward, inside the
    # user's call to the model; the first frame that issues it names the state
    frames = _frames((DDP, "DistributedDataParallel._distributed_broadcast_coalesced"),
                     (DDP, "DistributedDataParallel._default_broadcast_coalesced"),
                     (DDP, "DistributedDataParallel._sync_module_buffers"),
                     (DDP, "DistributedDataParallel._sync_buffers"),
                     (DDP, "DistributedDataParallel._pre_forward"),
                     (DDP, "DistributedDataParallel.forward"),
                     (MODULE, "Module._call_impl"), (MODULE, "Module._wrapped_call_impl"))
    assert state_of(frames + (USER,)) == ("collective", frames[0])


def test_fsdp2_waiting_for_its_all_gather_in_a_pre_forward_hook_is_a_collective() -> None:
    frames = _frames(
        ("torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", "foreach_all_gather_copy_out"),
        ("torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py",
         "FSDPParamGroup.wait_for_unshard"),
        ("torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "FSDPParamGroup.pre_forward"),
        ("torch/distributed/fsdp/_fully_shard/_fsdp_state.py", "FSDPState._pre_forward"),
        (MODULE, "Module._call_impl"))
    assert state_of(frames + (USER,)) == ("collective", frames[0])


def test_a_pipeline_stage_waiting_on_its_recv_is_a_collective() -> None:
    frames = _frames(("torch/distributed/pipelining/schedules.py", "_wait_batch_p2p"),
                     ("torch/distributed/pipelining/schedules.py",
                      "ScheduleGPipe._step_microbatches"),
                     ("torch/distributed/pipelining/schedules.py", "PipelineScheduleSingle.step"))
    assert state_of(frames + (USER,)) == ("collective", frames[0])


def test_pickling_inside_an_object_collective_is_that_collective() -> None:
    frames = _frames((frames_census.C10D, "_object_to_tensor"),
                     (frames_census.C10D, "all_gather_object"),
                     ("torch/distributed/c10d_logger.py", "_exception_logger.<locals>.wrapper"))
    assert state_of(frames + (USER,)) == ("collective", frames[1])


# ---------------------------------------------------------------------------------------
# what stays what it was


def test_compute_in_a_torch_module_under_ddp_forward_is_compute() -> None:
    linear = Frame("Linear.forward", f"{SITE}/torch/nn/modules/linear.py", 125)
    frames = (linear, *_frames((MODULE, "Module._call_impl"),
                               ("torch/nn/modules/container.py", "Sequential.forward"),
                               (MODULE, "Module._call_impl"),
                               (DDP, "DistributedDataParallel._run_ddp_forward"),
                               (DDP, "DistributedDataParallel.forward"),
                               (MODULE, "Module._call_impl")), USER)
    assert state_of(frames) == ("compute", USER)
    model = Frame("forward", "/home/u/model.py", 12)
    assert state_of((linear, model, USER))[0] == "compute"


def test_a_dataloader_wait_stays_data_and_a_local_query_is_no_collective() -> None:
    data = (Frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
            Frame("_MultiProcessingDataLoaderIter._try_get_data",
                  f"{SITE}/torch/utils/data/dataloader.py", 1291), USER)
    assert state_of(data) == ("data", data[1])
    assert _state("get_rank", frames_census.C10D)[0] == "compute"
    assert _state("wrapper", "torch/distributed/c10d_logger.py")[0] == "compute"


def test_a_user_function_named_like_a_collective_is_the_users_code() -> None:
    assert state_of((Frame("all_reduce", "/home/u/comm.py", 3), USER))[0] == "compute"
    assert state_of((Frame("all_reduce", "/home/u/distributed_c10d.py", 3), USER))[0] \
        == "compute"


def test_a_qualified_frame_must_be_the_rows_own_class() -> None:
    path = "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py"
    assert _collective_at_top("SymmMemAllocMixin.__init__", path)  # its barrier
    assert _state("ProcessGroupAllocMixin.__init__", path)[0] == "compute"


# ---------------------------------------------------------------------------------------
# how dumps print a path


@pytest.mark.parametrize("file", [
    f"{SITE}/torch/distributed/distributed_c10d.py",  # py-spy --json, faulthandler
    "torch/distributed/distributed_c10d.py",  # py-spy's text dump
    r"C:\venv\Lib\site-packages\torch\distributed\distributed_c10d.py",
    ".../distributed_c10d.py", "…/torch/distributed/distributed_c10d.py",  # pasted, elided
    "/src/pytorch/torch/distributed/distributed_c10d.py",  # a source checkout
])
def test_a_frame_is_found_however_the_dump_prints_its_path(file: str) -> None:
    assert collective_frames.lookup(file, "all_reduce") is not None


def test_the_hang_detector_reads_barrier_like_kinds_from_the_rows() -> None:
    kinds = {e.function: e.kind for e in collective_frames.entries()
             if e.path == frames_census.C10D}
    assert {kinds[f] for f in ("barrier", "monitored_barrier", "_store_based_barrier",
                               "broadcast_object_list", "new_group")} \
        <= collective_frames.CONTROL_KINDS
    assert kinds["all_reduce"] not in collective_frames.CONTROL_KINDS
    assert kinds["init_process_group"] not in collective_frames.CONTROL_KINDS


def test_the_table_refuses_an_unknown_major_version(tmp_path: Path) -> None:
    bad = tmp_path / "frames.tsv"
    bad.write_text("# ddiag.collective_frames 2\n")
    with pytest.raises(ValueError, match="first line"):
        collective_frames._rows(bad)
