"""What a snapshot of every rank's stack says (diag/analyze/stackgroups.py: verdict,
odd_ones, role_of), on stacks built as ``py-spy dump --json`` gives them (absolute paths,
qualified names, the thread's ``active``); no processes. The real-rank versions of these
scenarios are in tests/test_stacks_mistakes.py."""

from __future__ import annotations

from diag.analyze import stackgroups
from diag.analyze.stackgroups import group, odd_ones, role_of, verdict
from diag.verdict import Basis, Category, Severity

SITE = "/opt/venv/lib/python3.11/site-packages"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"
DDP = f"{SITE}/torch/nn/parallel/distributed.py"
MODULE = f"{SITE}/torch/nn/modules/module.py"
TRAIN = "/home/u/train.py"

# innermost first, as py-spy lists them
_WRAPPER = ("_exception_logger.<locals>.wrapper", f"{SITE}/torch/distributed/c10d_logger.py", 83)
_TRAIN_LOOP = (("train", TRAIN, 82), ("main", TRAIN, 104), ("<module>", TRAIN, 109))
BARRIER_AFTER_SAVE = (("barrier", C10D, 5356), _WRAPPER, ("save_checkpoint", TRAIN, 58),
                      ("train", TRAIN, 88), *_TRAIN_LOOP[1:])
BUFFER_BROADCAST = (
    ("DistributedDataParallel._distributed_broadcast_coalesced", DDP, 2363),
    ("DistributedDataParallel._default_broadcast_coalesced", DDP, 2451),
    ("DistributedDataParallel._sync_module_buffers", DDP, 2429),
    ("DistributedDataParallel._sync_buffers", DDP, 2425),
    ("DistributedDataParallel._pre_forward", DDP, 1782),
    ("DistributedDataParallel.forward", DDP, 1886),
    ("Module._call_impl", MODULE, 1789), ("Module._wrapped_call_impl", MODULE, 1778),
    *_TRAIN_LOOP)
BACKWARD = (("_engine_run_backward", f"{SITE}/torch/autograd/graph.py", 841),
            ("backward", f"{SITE}/torch/autograd/__init__.py", 364),
            ("Tensor.backward", f"{SITE}/torch/_tensor.py", 625), ("train", TRAIN, 84),
            *_TRAIN_LOOP[1:])
EVAL_ALL_REDUCE = (("all_reduce", C10D, 3252), _WRAPPER, ("evaluate", TRAIN, 69),
                   ("train", TRAIN, 90), *_TRAIN_LOOP[1:])
METRIC_BROADCAST = (("broadcast", C10D, 2881), _WRAPPER, ("log_metrics", TRAIN, 120),
                    ("train", TRAIN, 91), *_TRAIN_LOOP[1:])
OBJECT_BROADCAST = (("broadcast", C10D, 2881), _WRAPPER,
                    ("broadcast_object_list", C10D, 3570), _WRAPPER,
                    ("pick_best", TRAIN, 140), ("train", TRAIN, 92), *_TRAIN_LOOP[1:])
STORE_WAIT = (("get", f"{SITE}/torch/distributed/elastic/utils/store.py", 31),
              ("synchronize", f"{SITE}/torch/distributed/elastic/utils/store.py", 64),
              ("wait_for_peers", TRAIN, 150), ("train", TRAIN, 93), *_TRAIN_LOOP[1:])
_LIB = "/usr/lib/python3.11"
DATALOADER = (("_PollLikeSelector.select", f"{_LIB}/selectors.py", 415),
              ("wait", f"{_LIB}/multiprocessing/connection.py", 947),
              ("Queue.get", f"{_LIB}/multiprocessing/queues.py", 113),
              ("_MultiProcessingDataLoaderIter._try_get_data",
               f"{SITE}/torch/utils/data/dataloader.py", 1291),
              ("_BaseDataLoaderIter.__next__", f"{SITE}/torch/utils/data/dataloader.py", 725),
              ("train", TRAIN, 81), *_TRAIN_LOOP[1:])
SAVING = (("_save_snapshot", TRAIN, 63), ("train", TRAIN, 92), *_TRAIN_LOOP[1:])


def pyspy_doc(frames: tuple, pid: int = 4242, active: bool = False) -> list[dict]:
    """A ``py-spy dump --json`` document: a worker thread, then the main thread."""
    feeder = {"pid": pid, "thread_name": "QueueFeederThread", "active": False,
              "frames": [{"name": "Condition.wait", "filename": f"{_LIB}/threading.py",
                          "line": 327}]}
    return [feeder, {"pid": pid, "thread_name": "MainThread", "active": active,
                     "frames": [{"name": n, "filename": f, "line": ln, "locals": None}
                                for n, f, ln in frames]}]


def snapshot(by_rank: dict[int, tuple], active: frozenset = frozenset()) -> list:
    stacks = [stackgroups.from_pyspy(pyspy_doc(frames, 4000 + r, r in active), r,
                                     f"stacks/rank{r:05d}.json", "node1")
              for r, frames in by_rank.items()]
    return group(stacks)


# ---------------------------------------------------------------------------------------
# who issued the collective a rank waits in


def test_roles_say_who_issued_the_collective_and_which_frame_says_so() -> None:
    def role(frames: tuple) -> tuple[str, str | None]:
        found, frame = role_of(snapshot({0: frames})[0].frames)
        return found, frame.func if frame else None

    assert role(BARRIER_AFTER_SAVE) == ("control", "barrier")
    assert role(OBJECT_BROADCAST) == ("control", "broadcast_object_list")  # not its broadcast
    assert role(STORE_WAIT)[0] == "control"
    assert role(BUFFER_BROADCAST) == ("training",
                                      "DistributedDataParallel._distributed_broadcast_coalesced")
    assert role(BACKWARD) == ("training", "_engine_run_backward")
    fsdp = ((("foreach_all_gather",
              f"{SITE}/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", 250),
             ("FSDPParamGroup.unshard",
              f"{SITE}/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", 301),
             ("forward", "/home/u/model.py", 40)))
    assert role(fsdp)[0] == "training"
    assert role(EVAL_ALL_REDUCE) == ("issued", "evaluate")  # the user's frame that called it


# ---------------------------------------------------------------------------------------
# every rank waits, in different collectives


def test_rank_0_alone_in_a_barrier_after_its_save_is_the_culprit() -> None:
    found = verdict(snapshot({0: BARRIER_AFTER_SAVE, 1: BUFFER_BROADCAST}))
    assert found.category is Category.COLLECTIVE_MISMATCH and found.culprit.ranks == (0,)
    assert found.details["decided_by"] == "role" and found.basis is Basis.LINE
    assert found.details["user_frame"] == {"func": "save_checkpoint", "file": TRAIN, "line": 58}
    assert "save_checkpoint (u/train.py:58)" in found.title and "barrier" in found.fix
    # without buffers, rank 1 waits in backward (DDP's reducer): the same verdict
    found = verdict(snapshot({0: BARRIER_AFTER_SAVE, 1: BACKWARD}))
    assert found.culprit.ranks == (0,) and found.details["decided_by"] == "role"


def test_the_side_is_decided_whichever_rank_makes_the_mistake() -> None:
    found = verdict(snapshot({0: BUFFER_BROADCAST, 1: BARRIER_AFTER_SAVE}))
    assert found.culprit.ranks == (1,)
    found = verdict(snapshot({0: BACKWARD, 1: STORE_WAIT}))
    assert found.culprit.ranks == (1,) and "wait_for_peers" in found.title


def test_an_eval_all_reduce_on_rank_0_only_is_off_the_training_loop() -> None:
    found = verdict(snapshot({0: EVAL_ALL_REDUCE, 1: BUFFER_BROADCAST}))
    assert found.category is Category.COLLECTIVE_MISMATCH and found.culprit.ranks == (0,)
    assert found.details["user_frame"]["func"] == "evaluate"
    assert found.basis is Basis.HEURISTIC  # issued vs training: less sure than a barrier


def test_two_collectives_the_users_code_called_name_no_side() -> None:
    found = verdict(snapshot({0: EVAL_ALL_REDUCE, 1: METRIC_BROADCAST}))
    assert found.category is Category.COLLECTIVE_MISMATCH
    assert found.culprit.ranks == () and found.details["decided_by"] is None
    assert found.severity is Severity.CRITICAL and found.basis is Basis.HEURISTIC


def test_a_majority_decides_before_the_roles() -> None:
    # three ranks in backward, rank 2 in a barrier: rank 2, and the roles agree
    found = verdict(snapshot({0: BACKWARD, 1: BACKWARD, 2: BARRIER_AFTER_SAVE, 3: BACKWARD}))
    assert found.culprit.ranks == (2,) and found.details["decided_by"] == "majority"
    assert found.basis is Basis.MINORITY
    # three ranks in the end-of-epoch barrier, rank 3 still in backward (an extra batch):
    # rank 3, less sure
    found = verdict(snapshot({0: BARRIER_AFTER_SAVE, 1: BARRIER_AFTER_SAVE,
                              2: BARRIER_AFTER_SAVE, 3: BACKWARD}))
    assert found.culprit.ranks == (3,) and found.basis is Basis.LINE


def test_an_even_split_is_decided_by_the_roles() -> None:
    found = verdict(snapshot({0: BARRIER_AFTER_SAVE, 1: BUFFER_BROADCAST,
                              2: BARRIER_AFTER_SAVE, 3: BUFFER_BROADCAST}))
    assert found.culprit.ranks == (0, 2)


def test_one_collective_reached_from_two_call_sites_is_no_mismatch() -> None:
    # a rank a moment ahead at the next all_reduce of the loop: nothing says who is wrong
    later = tuple(("train", TRAIN, 95) if f[0] == "evaluate" else f for f in EVAL_ALL_REDUCE)
    groups = snapshot({0: EVAL_ALL_REDUCE, 1: later})
    assert len(groups) == 2 and odd_ones(groups) is None


# ---------------------------------------------------------------------------------------
# a minority elsewhere than in a collective


def test_the_rank_in_its_dataloader_is_named_with_its_frame() -> None:
    found = verdict(snapshot({0: BUFFER_BROADCAST, 1: DATALOADER}))
    assert found.category is Category.RANK_HANG and found.culprit.ranks == (1,)
    assert "data loading" in found.title and "train (u/train.py:81)" in found.title
    assert found.details["user_frame"]["line"] == 81
    assert any("rank 1: train (/home/u/train.py:81)" in e.text for e in found.evidence)


def test_a_rank_idle_in_its_own_code_is_blocked_and_the_fix_names_the_timeout() -> None:
    found = verdict(snapshot({0: SAVING, 1: BUFFER_BROADCAST}))
    assert found.category is Category.RANK_HANG and found.culprit.ranks == (0,)
    assert found.details["groups"][1]["state"] == "io"  # py-spy: the thread is idle
    assert "_save_snapshot" in found.title and "timeout" in found.fix
    busy = verdict(snapshot({0: SAVING, 1: BUFFER_BROADCAST}, active=frozenset({0})))
    assert busy.details["groups"][1]["state"] == "compute" and busy.culprit.ranks == (0,)


# ---------------------------------------------------------------------------------------
# every rank in one collective


def test_every_rank_in_one_collective_is_a_note_naming_no_rank() -> None:
    groups = snapshot({r: BUFFER_BROADCAST for r in range(4)})
    assert odd_ones(groups) is None
    note = verdict(groups)
    assert note.severity is Severity.INFO and note.culprit.ranks == () and not note.root_cause
    assert "stall of the job's communication" in note.title
    partial = verdict(snapshot({0: BACKWARD, 1: BACKWARD}), missing=(2, 3))
    assert "not captured: ranks 2, 3" in partial.title
    assert partial.details["not_captured"] == [2, 3]


def test_ranks_doing_their_own_work_get_no_verdict() -> None:
    assert verdict(snapshot({0: SAVING, 1: SAVING})) is None
    assert verdict(snapshot({0: SAVING, 1: DATALOADER})) is None


def test_the_ranks_of_the_world_without_a_stack_are_not_captured() -> None:
    from diag.watch.discover import RankProcess
    from diag.watch.stacks import StackCapture, StacksResult, not_captured

    def capture(rank: int, ok: bool) -> StackCapture:
        proc = RankProcess(100 + rank, rank, rank, 4, "1", "node1", "python train.py")
        return StackCapture(proc, None, None if ok else "py-spy: permission denied")

    caps = [capture(0, True), capture(1, False)]  # ranks 2, 3: on another host
    stacks = [stackgroups.Stack(0, ())]
    assert not_captured(caps, stacks) == (1, 2, 3)
    note = verdict(snapshot({0: BACKWARD}), missing=(1, 2, 3))
    assert not StacksResult(".", caps, [], note).names_a_cause  # a note is no cause: exit 0
