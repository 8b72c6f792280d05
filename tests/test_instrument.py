"""The decorator in one process: step contents, spans, grad checks, collectives, safety."""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import diag
from diag.runtime import instrument
from diag.format.events import read_run_events
from tests.util import REPO


@pytest.fixture
def run_dir(tmp_path):
    instrument._reset()
    diag.init(tmp_path)
    yield tmp_path
    instrument._reset()


def records(run_dir, kind):
    diag.shutdown()
    logs, problems = read_run_events(run_dir)
    assert problems == []
    return logs[0].of_kind(kind)


@pytest.fixture
def one_rank_group(tmp_path):
    """A gloo process group of this process alone, destroyed afterwards."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_step_records_shapes_loss_phases_and_grad_norm(run_dir):
    model = torch.nn.Linear(4, 1)

    @diag.log_step(model=model)
    def step(x, batch):
        with diag.span("forward"):
            loss = model(x).pow(2).mean()
        loss.backward()
        return {"loss": loss}

    with diag.span("data"):
        x = torch.ones(8, 4)
    step(x, batch={"ids": torch.zeros(8, 3, dtype=torch.long), "note": "not a tensor"})
    (rec,) = records(run_dir, "step")
    assert rec["step"] == 0 and rec["rank"] == 0
    assert rec["args"] == [
        {"name": "arg0", "shape": [8, 4], "dtype": "float32"},
        {"name": "batch.ids", "shape": [8, 3], "dtype": "int64"},
    ]
    assert set(rec["phases"]) == {"data", "forward"}
    expected = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert rec["grad_norm"] == pytest.approx(float(expected), rel=1e-5)
    assert rec["loss"] == pytest.approx(float(model(x).pow(2).mean().detach()), rel=1e-5)


def test_arg_shapes_reads_one_container_level_and_stops_at_the_cap():
    t = torch.zeros(2, 3)
    got = instrument.shape_fields(instrument.arg_shapes(
        (t, [t, "x", torch.ones(1, dtype=torch.int8)], 7, {"a": t}),
        {"y": (t,), "z": t, "w": "no"}))
    assert [(r["name"], r["shape"], r["dtype"]) for r in got] == [
        ("arg0", [2, 3], "float32"), ("arg1[0]", [2, 3], "float32"),
        ("arg1[2]", [1], "int8"), ("arg3.a", [2, 3], "float32"),
        ("y[0]", [2, 3], "float32"), ("z", [2, 3], "float32")]
    many = instrument.shape_fields(instrument.arg_shapes(tuple([t] * 40), {"k": t}))
    assert len(many) == instrument.MAX_ARG_TENSORS
    assert many[-1]["name"] == f"arg{instrument.MAX_ARG_TENSORS - 1}"


def test_first_nonfinite_parameter_is_named(run_dir):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))

    @diag.log_step(model=model)
    def step():
        model(torch.ones(1, 2)).sum().backward()
        model[1].weight.grad[0, 0] = float("inf")
        model[1].bias.grad[0] = float("nan")

    step()
    (rec,) = records(run_dir, "step")
    assert rec["nonfinite"] == {"param": "1.weight", "kind": "inf"}
    assert rec["grad_norm"] == "nan"  # inf and nan together sum to nan


def test_non_phase_span_outside_a_step_is_its_own_record(run_dir):
    with diag.span("checkpoint"):
        pass
    (rec,) = records(run_dir, "span")
    assert rec["name"] == "checkpoint" and rec["dur_s"] >= 0


def test_user_exception_passes_through_and_is_recorded(run_dir):
    @diag.log_step
    def step():
        raise ValueError("bad batch 7")

    with pytest.raises(ValueError, match="bad batch 7"):
        step()
    (rec,) = records(run_dir, "exception")
    assert rec["type"] == "ValueError" and "bad batch 7" in rec["traceback"]


def test_instrumentation_errors_never_reach_training(run_dir, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("instrumentation bug")

    monkeypatch.setattr(instrument, "arg_shapes", broken)

    @diag.log_step
    def step(x):
        return x * 2

    assert step(torch.ones(1)).item() == 2
    assert instrument._state.internal_errors == 1


def test_collectives_are_recorded_and_p2p_ops_still_validate(run_dir, one_rank_group):
    t = torch.ones(6)
    dist.all_reduce(t)
    dist.all_gather_object([None], {"a": 1})  # runs two all_gathers inside
    dist.barrier()
    dist.P2POp(dist.isend, t, 0)  # P2POp checks its op against the originals
    recs = records(run_dir, "collective")
    assert [(r["op"], r["seq"]) for r in recs] == [
        ("all_reduce", 1), ("all_gather_object", 2), ("barrier", 3)]
    assert recs[0]["in_numel"] == 6 and recs[0]["in_bytes"] == 24
    assert recs[0]["torch_seq"] < recs[1]["torch_seq"] < recs[2]["torch_seq"]


@pytest.mark.parametrize("option", [{"grad_every": 0}, {"flush_interval_s": 0}])
def test_init_rejects_a_bad_option_by_name(option):
    instrument._reset()
    (name, value), = option.items()
    with pytest.raises(ValueError, match=f"{name} must be .*, got: {value}"):
        diag.init(**option)


def test_heartbeat_names_the_collective_in_flight_then_the_last_one(run_dir, one_rank_group):
    state, inside = instrument._state, {}

    def all_reduce(tensor, op=None, group=None, async_op=False):
        inside.update(state.heartbeat())

    state.recorder.wrap("all_reduce", all_reduce)(torch.ones(2, 3))
    after = state.heartbeat()
    pending = inside["pending"]
    assert {k: pending[k] for k in ("op", "seq", "in_numel", "in_dtype", "in_shape")} == {
        "op": "all_reduce", "seq": 1, "in_numel": 6, "in_dtype": "float32", "in_shape": [2, 3]}
    assert after["pending"] is None
    assert after["last_collective"]["seq"] == 1
    assert after["last_collective"]["t"] >= pending["t"]


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("DDIAG_DISABLE", "1")

    def step():
        return 1

    assert diag.log_step(step) is step


NO_TORCH = """
import sys
sys.modules["torch"] = None  # any `import torch` now raises ImportError
from diag.cli import main
import diag.analyze.summary, diag.format.events, diag.report.terminal, diag.format.rundir
sys.argv = ["ddiag"] + sys.argv[1:]
main()
"""


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["summary", "--help"]])
def test_cli_and_analysis_never_import_torch(args):
    res = subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "ddiag" in res.stdout or "Usage" in res.stdout


def test_analyze_runs_without_torch(tmp_path):
    from tests.analyze.test_detectors import healthy

    for w in healthy(tmp_path / "run", steps=20, late={1: 0.03}):
        w.close().write()
    (tmp_path / "run" / "nccl.log").write_text(
        "node1:11:11 [0] NCCL INFO NET/IB : No device found.\n")
    res = subprocess.run([sys.executable, "-c", NO_TORCH, "analyze", str(tmp_path / "run"),
                          "--json", "--html", str(tmp_path / "r.html"), "--trace",
                          str(tmp_path / "t.json")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr  # findings, and no ImportError on the way
    assert '"straggler"' in res.stdout and (tmp_path / "r.html").exists()


def test_rank_feeding_nan_into_a_reduction_is_recorded(run_dir, one_rank_group):
    model = torch.nn.Linear(2, 1)

    @diag.log_step(model=model)
    def step(poison: bool):
        model(torch.ones(1, 2)).sum().backward()
        dist.all_reduce(torch.ones(3))
        dist.all_reduce(torch.tensor([float("nan")]) if poison else torch.ones(1))

    step(False)
    step(True)
    recs = records(run_dir, "step")
    assert recs[0]["sent_nonfinite"] is None
    assert recs[1]["sent_nonfinite"] == {"op": "all_reduce", "seq": 4}


def test_a_step_that_raised_leaves_no_nan_check_to_the_next(run_dir, one_rank_group):
    model = torch.nn.Linear(2, 1)

    @diag.log_step(model=model)
    def step(fail: bool):
        model(torch.ones(1, 2)).sum().backward()
        if fail:
            dist.all_reduce(torch.tensor([float("nan")]))
            raise ValueError("bad batch")

    with pytest.raises(ValueError):
        step(True)
    dist.all_reduce(torch.tensor([float("inf")]))  # between steps: not a step's input
    step(False)
    recs = records(run_dir, "step")
    assert [r["sent_nonfinite"] for r in recs] == [None]


def test_exception_in_a_span_outside_a_step_is_recorded(run_dir):
    with pytest.raises(TimeoutError):
        with diag.span("checkpoint"):
            raise TimeoutError("barrier timed out")
    (rec,) = records(run_dir, "exception")
    assert rec["span"] == "checkpoint" and rec["type"] == "TimeoutError"


def test_forked_child_does_not_write_the_parents_queue(run_dir):
    import os

    diag.record("mine", n=1)
    pid = os.fork()
    if pid == 0:  # child: a DataLoader worker would be here
        from diag.runtime import eventlog

        eventlog.flush_all()
        os._exit(0)
    os.waitpid(pid, 0)
    assert len(records(run_dir, "mine")) == 1


def test_ddp_grad_norm_comes_from_the_reduced_buckets(run_dir, one_rank_group):
    torch.manual_seed(0)
    inner = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    inner[0].bias.requires_grad_(False)  # frozen: not in any bucket, not in the norm
    model = torch.nn.parallel.DistributedDataParallel(inner)
    seen = []

    @diag.log_step(model=model)
    def step(x):
        model.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        seen.append(list(instrument._state.recorder.buckets.norms))
        grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.cat(grads)))

    expected = [step(torch.randn(4, 8)) for _ in range(3)]
    recs = records(run_dir, "step")
    assert all(seen) and sum(numel for numel, _ in seen[0]) == 8 * 8 + 8 * 1 + 1
    assert [r["grad_norm"] for r in recs] == pytest.approx(expected, rel=1e-5)
    assert all(r["nonfinite"] is None for r in recs)


def test_grad_check_trusts_buckets_only_when_they_cover_every_trainable_parameter():
    model = torch.nn.Linear(3, 1)  # 4 trainable elements
    model(torch.ones(1, 3)).sum().backward()
    walked = float(torch.linalg.vector_norm(torch.cat([model.weight.grad[0], model.bias.grad])))
    buckets = instrument.bucket_total([(3, torch.tensor(3.0)), (1, torch.tensor(4.0))])
    assert buckets == (4, pytest.approx(5.0))
    assert instrument.bucket_total([(3, 3.0), (1, 4.0)]) == (4, 5.0)  # CPU: read already
    assert math.isnan(instrument.bucket_total([(3, 3.0), (1, float("nan"))])[1])
    assert instrument.grad_check(model, buckets) == (5.0, None)
    assert instrument.grad_check(model, (3, 5.0))[0] == pytest.approx(walked)
    assert instrument.grad_check(model, instrument.bucket_total([]))[0] == pytest.approx(walked)
    # a non-finite bucket sends the check to the parameters, to name the first bad one
    model.bias.grad[0] = float("nan")
    total, bad = instrument.grad_check(model, (4, float("nan")))
    assert bad == {"param": "bias", "kind": "nan"}


def test_a_bucket_call_reads_as_the_full_record_in_the_heartbeat():
    from diag.runtime.collectives import BucketPlan, CollectiveRecorder, Deferred, _bucket_record

    rec = CollectiveRecorder(lambda r: None, lambda: {"rank": 0, "step": 3, "t": 10.0})
    fixed = {"kind": "collective", "op": "all_reduce", "group": "0", "in_numel": 5,
             "in_dtype": "float32", "in_shape": [5], "rank": 0, "pid": 1}
    plan = BucketPlan(fixed, "0", 2, 5, True, True, None)
    rec.pending = Deferred((_bucket_record, plan, 3, True, 10.0, 100.0, 7))
    assert rec.in_flight() == {"op": "all_reduce", "group": "0", "seq": 7, "t": 10.0,
                               "in_numel": 5, "in_dtype": "float32", "in_shape": [5]}
    rec.last = Deferred((_bucket_record, plan, 3, True, 10.0, 100.0, 7, 0.5, 12))
    rec.pending = None
    assert rec.in_flight() is None
    assert rec.last_done() == {"op": "all_reduce", "group": "0", "seq": 7, "t": 10.5}
    assert rec.last.record()["torch_seq"] == 12

@pytest.mark.parametrize("kind", ["header", "close", "step", "exception"])
def test_a_record_of_a_reserved_kind_is_dropped_and_the_rank_still_reads(run_dir, caplog, kind):
    @diag.log_step
    def step():
        return 1.0

    step()
    diag.record(kind, rank=7, schema=99)
    diag.record(kind)
    step()
    assert [r["step"] for r in records(run_dir, "step")] == [0, 1]
    logs, _ = read_run_events(run_dir)
    assert list(logs) == [0] and logs[0].header["rank"] == 0
    assert len(logs[0].of_kind(kind)) == {"step": 2, "close": 1}.get(kind, 0)  # ddiag's own
    assert all(r.get("rank") == 0 for r in logs[0].records)
    warned = [r for r in caplog.records if r.name == "ddiag" and repr(kind) in r.getMessage()]
    assert len(warned) == 1


def test_a_step_returning_an_int_beyond_64_bits_keeps_its_record(run_dir):
    @diag.log_step
    def step(value):
        return value

    step(10**400)
    step({"loss": -(10**400)})
    step(3)
    diag.record("mine", big=10**400, nested={"ids": [2**64, 2**64 - 1]})
    assert [r["loss"] for r in records(run_dir, "step")] == ["inf", "-inf", 3.0]
    logs, problems = read_run_events(run_dir)
    assert problems == []
    (mine,) = logs[0].of_kind("mine")
    assert mine["big"] == str(10**400)
    assert mine["nested"] == {"ids": [str(2**64), 2**64 - 1]}


def _sgd_step(model, opt):
    @diag.log_step(model=model)
    def step(x):
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()  # the gradients are gone by the end of the step
        return loss

    return step


def test_gradients_zeroed_inside_the_step_are_still_checked(run_dir):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    x = torch.randn(8, 4)
    replay = copy.deepcopy(model)
    replay(x).pow(2).mean().backward()
    expected = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in replay.parameters()]))
    step = _sgd_step(model, torch.optim.SGD(model.parameters(), lr=0.1))
    step(x)
    bad = x.clone()
    bad[0, 0] = float("nan")
    step(bad)
    ok, nan = records(run_dir, "step")
    assert ok["grad_norm"] == pytest.approx(float(expected), rel=1e-5)
    assert ok["nonfinite"] is None
    assert nan["grad_norm"] == "nan"
    assert nan["nonfinite"] == {"param": "0.weight", "kind": "nan"}


def test_an_optimizer_of_other_parameters_leaves_the_check_to_the_step_end(run_dir):
    model, other = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1)

    @diag.log_step(model=model)
    def step():
        model(torch.ones(1, 2)).sum().backward()
        other_opt.step()  # before model's gradients are final: must not be where they are read
        model.weight.grad[0, 0] = float("inf")

    step()
    (rec,) = records(run_dir, "step")
    assert rec["nonfinite"] == {"param": "weight", "kind": "inf"}


def test_gradients_gone_at_the_step_end_without_an_optimizer_warn_once(run_dir, caplog):
    model = torch.nn.Linear(2, 1)

    @diag.log_step(model=model)
    def step():
        model(torch.ones(1, 2)).sum().backward()
        with torch.no_grad():  # a hand-written update: no torch.optim step to hook
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None

    for _ in range(3):
        step()
    assert all("grad_norm" in r and r["grad_norm"] is None for r in records(run_dir, "step"))
    warned = [r for r in caplog.records if r.name == "ddiag" and r.levelname == "WARNING"]
    assert len(warned) == 1 and "zero_grad" in warned[0].getMessage()


def test_the_quickstart_loop_trains_on_every_batch_and_checks_its_gradients(
        tmp_path, monkeypatch):
    """The quickstart's step 2, run as written on a real model and loader."""
    text = (REPO / "docs" / "quickstart.md").read_text()
    code = text.split("## 2.")[1].split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    instrument._reset()
    model = torch.nn.Linear(3, 1)
    loader = [(torch.randn(n, 3), torch.randn(n, 1)) for n in range(1, 7)]  # sizes tell them apart
    try:
        exec(code, {"model": model, "loss_fn": torch.nn.functional.mse_loss, "loader": loader,
                    "opt": torch.optim.SGD(model.parameters(), lr=0.1)})
        diag.shutdown()
        logs, problems = read_run_events(next(tmp_path.glob("runs/*")))
    finally:
        instrument._reset()
    steps = logs[0].of_kind("step")
    assert [s["args"][0]["shape"][0] for s in steps] == [1, 2, 3, 4, 5, 6]
    assert all(isinstance(s["grad_norm"], float) and s["grad_norm"] > 0 for s in steps)
    assert all("data" in s["phases"] for s in steps)
