"""The trainer's parts without processes: data, sampler sharding, stage cuts, memory
accounting and the fault actions themselves."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

from reference_trainer import memory
from reference_trainer.config import DataConfig, ModelConfig
from reference_trainer.data import StepTaggedSampler, SyntheticTokens, sample_tokens
from reference_trainer.faults import DataFaults, Faults, burn_compute, parse_fault
from reference_trainer.model import build_model, cut_stage, loss_fn, stage_layers

MODEL = ModelConfig(layers=3, width=32, heads=4, seq_len=16, vocab=64)


def test_a_sample_is_a_function_of_seed_and_index_alone():
    a = sample_tokens(seed=3, index=17, seq_len=16, vocab=64)
    assert torch.equal(a, sample_tokens(seed=3, index=17, seq_len=16, vocab=64))
    assert not torch.equal(a, sample_tokens(seed=3, index=18, seq_len=16, vocab=64))
    assert not torch.equal(a, sample_tokens(seed=4, index=17, seq_len=16, vocab=64))
    steps = (a[1:] - a[:-1]) % 64
    assert len(set(steps.tolist())) == 1  # learnable: a progression mod vocab


def _step_indices(dp_size: int, batch: int, step: int) -> set[int]:
    """The global batch of ``step``: the union of every data-parallel rank's batch."""
    dataset = SyntheticTokens(MODEL, DataConfig(batch=batch, samples=512), DataFaults())
    found: set[int] = set()
    for rank in range(dp_size):
        inner = DistributedSampler(dataset, num_replicas=dp_size, rank=rank, seed=0,
                                   drop_last=True)
        keys = list(StepTaggedSampler(inner, batch))
        found |= {index for index, s, _ in keys if s == step}
        assert [s for _, s, _ in keys[:batch + 1]] == [0] * batch + [1]
    return found


@pytest.mark.parametrize("step", [0, 5])
def test_the_global_batch_does_not_depend_on_the_world_size(step):
    one = _step_indices(dp_size=1, batch=8, step=step)
    assert len(one) == 8
    assert one == _step_indices(dp_size=2, batch=4, step=step) == _step_indices(4, 2, step)


def test_stages_cover_every_block_once():
    for layers, stages in [(3, 2), (4, 4), (7, 3)]:
        covered = [i for s in range(stages) for i in stage_layers(layers, s, stages)]
        assert covered == list(range(layers))


def test_stage_cuts_compose_to_the_whole_model():
    tokens = torch.randint(0, MODEL.vocab, (2, MODEL.seq_len))
    whole = build_model(MODEL, seed=1)
    first, last = cut_stage(build_model(MODEL, 1), 0, 2), cut_stage(build_model(MODEL, 1), 1, 2)
    assert first.head is None and last.tok_embed is None
    assert set(first.layers) == {"0", "1"} and set(last.layers) == {"2"}
    names = {n for n, _ in whole.named_parameters()}
    stage_names = [n for m in (first, last) for n, _ in m.named_parameters()]
    assert sorted(stage_names) == sorted(names)  # same names, nothing lost or doubled
    torch.testing.assert_close(last(first(tokens)), whole(tokens))


def test_memory_counts_parameters_gradients_and_adam_state():
    model = build_model(MODEL, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert memory.param_bytes(model) == params and memory.grad_bytes(model) == 0
    tokens = torch.randint(0, MODEL.vocab, (2, MODEL.seq_len))
    loss_fn(model(tokens), tokens).backward()
    opt.step()
    assert memory.grad_bytes(model) == params
    n_params = len(list(model.parameters()))
    # exp_avg and exp_avg_sq per parameter, plus a float32 step counter each.
    assert memory.optimizer_bytes(opt) == 2 * params + 4 * n_params
    assert memory.rss_bytes() > 0


def test_slow_compute_is_compute_not_sleep():
    wall, cpu = time.monotonic(), time.process_time()
    burn_compute(0.3, torch.device("cpu"))
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert 0.3 <= wall < 1.0
    # A sleep would use ~0 CPU; a shared, loaded machine may give us well under a core.
    assert cpu > 0.1 * wall


def test_slow_data_delays_each_batch_from_its_step():
    faults = DataFaults(delay_s=0.4, delay_from=1)
    started = time.monotonic()
    for _ in range(4):
        faults.before_item(step=0, first_of_batch=False, batch=4)
    assert time.monotonic() - started < 0.05
    started = time.monotonic()
    for _ in range(4):
        faults.before_item(step=1, first_of_batch=False, batch=4)
    assert 0.38 <= time.monotonic() - started < 0.8


def _faults(text: str) -> Faults:
    return Faults((parse_fault(text),), rank=1, device=torch.device("cpu"))


def test_crash_is_a_real_index_error_at_its_step_only():
    faults = _faults("crash:rank=1:step=2")
    faults.in_forward(1)
    with pytest.raises(IndexError, match="out of bounds"):
        faults.in_forward(2)
    faults.in_forward(3)
    Faults((parse_fault("crash:rank=0:step=2"),), rank=1, device="cpu").in_forward(2)


def test_oom_is_the_cpu_allocators_own_error():
    with pytest.raises(RuntimeError, match="DefaultCPUAllocator: can't allocate memory"):
        _faults("oom:rank=1:step=0").in_forward(0)


def test_nan_poisons_activations_from_its_step():
    faults, out = _faults("nan:rank=1:step=2"), torch.ones(3)
    faults.in_forward(1)
    assert torch.isfinite(faults.poison_output(None, (), out)).all()
    faults.in_forward(2)
    assert torch.isnan(faults.poison_output(None, (), out)).all()


def test_shape_mismatch_and_extra_collective_fire_at_their_step():
    assert [_faults("shape_mismatch:rank=1:step=1:arg=3").metrics_extra(s) for s in range(3)] == [0, 3, 0]
    assert [_faults("extra_collective:rank=1:step=0").extra_collective(s) for s in range(2)] == [True, False]
    hang = _faults("hang:rank=1:step=4").data_faults()
    assert hang.hang_step == 4 and hang.delay_s == 0


BLOCKED_GRANDCHILD = """
import os, sys, time
from reference_trainer.faults import block_forever
pid = os.fork()
if pid == 0:
    block_forever()
print(pid, flush=True)
time.sleep(0.3)
"""


def test_a_blocked_loader_does_not_outlive_its_parent():
    out = subprocess.run([sys.executable, "-c", BLOCKED_GRANDCHILD], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    child = int(out.split()[0])
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}"), "the blocked child outlived its parent"
