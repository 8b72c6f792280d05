"""ZeRO's savings as the trainer records them: per-rank bytes of parameters, gradients
and optimizer state, from each rank's ``memory`` records in events/*.jsonl."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # the trained runs are launched on gloo ranks (4-8 s each)


def _memory(run) -> dict[int, dict]:
    """Each rank's last memory record (after the last step)."""
    found = {}
    for rank, log in run.logs().items():
        records = log.of_kind("memory")
        assert [r["step"] for r in records] == [0, records[-1]["step"]], rank
        found[rank] = records[-1]
    return found


def _ratios(run, base, field: str) -> list[float]:
    mine, full = _memory(run), _memory(base)
    assert sorted(mine) == sorted(full) == [0, 1]
    return [mine[r][field] / full[r][field] for r in sorted(mine)]


def test_ddp_holds_everything_on_every_rank(trained):
    memory = _memory(trained("ddp"))
    assert memory[0]["param_bytes"] == memory[1]["param_bytes"] > 0
    for rank in (0, 1):
        record = memory[rank]
        assert record["grad_bytes"] == record["param_bytes"]
        # AdamW: two moments per parameter, plus a 4-byte step counter per tensor.
        assert 2 * record["param_bytes"] < record["optimizer_bytes"] < 2.01 * record["param_bytes"]
    assert trained("ddp").summary["memory"][1] == {"rank": 1, **_without_context(memory[1])}


def _without_context(record: dict) -> dict:
    context = {"kind", "rank", "pid", "step", "in_step", "t", "mono"}
    return {k: v for k, v in record.items() if k not in context}


def test_zero1_halves_optimizer_state_only(trained):
    ddp, zero1 = trained("ddp"), trained("zero1")
    assert _ratios(zero1, ddp, "optimizer_bytes") == pytest.approx([0.5, 0.5], abs=0.05)
    assert _ratios(zero1, ddp, "param_bytes") == [1.0, 1.0]
    assert _ratios(zero1, ddp, "grad_bytes") == [1.0, 1.0]
    total = sum(m["optimizer_bytes"] for m in _memory(zero1).values())
    assert total == pytest.approx(_memory(ddp)[0]["optimizer_bytes"], rel=0.01)


@pytest.mark.parametrize("mode", ["zero2", "zero3"])
def test_fsdp_halves_parameters_gradients_and_optimizer_state(trained, mode):
    ddp, sharded = trained("ddp"), trained(mode)
    for field in ("param_bytes", "grad_bytes", "optimizer_bytes"):
        assert _ratios(sharded, ddp, field) == pytest.approx([0.5, 0.5], abs=0.02), field
