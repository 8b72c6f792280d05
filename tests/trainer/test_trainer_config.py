"""--inject parsing and config validation: every error names the flag, the value, the fix."""

from __future__ import annotations

import pytest

from reference_trainer import config
from reference_trainer.config import DataConfig, ModelConfig, ParallelConfig, TrainerConfig
from reference_trainer.faults import KINDS, parse_fault


def test_fault_defaults_and_fields():
    spec = parse_fault("slow_compute:rank=1")
    assert (spec.kind, spec.rank, spec.step, spec.arg) == ("slow_compute", 1, 0, None)
    assert spec.amount == KINDS["slow_compute"][1]
    spec = parse_fault("oom:rank=0:step=3:arg=4096")
    assert (spec.rank, spec.step, spec.amount) == (0, 3, 4096)
    assert parse_fault("shape_mismatch:step=2:rank=1").amount == 1  # any key order


def test_persistent_faults_hold_from_their_step_and_one_shots_fire_once():
    slow, crash = parse_fault("slow_data:rank=0:step=2"), parse_fault("crash:rank=0:step=2")
    assert [slow.active(s) for s in range(4)] == [False, False, True, True]
    assert [crash.active(s) for s in range(4)] == [False, False, True, False]


@pytest.mark.parametrize("text, message", [
    ("boom:rank=1", "--inject boom:rank=1: unknown kind 'boom' (kinds: crash, extra_collective"),
    ("crash:step=1", "--inject crash:step=1: rank=R is required, e.g. crash:rank=1"),
    ("crash:rank=one", "--inject crash:rank=one: rank must be a whole number, got: 'one'"),
    ("crash:rank=-1", "--inject crash:rank=-1: rank must be >= 0, got: -1"),
    ("crash:rank=1:rank=2", "--inject crash:rank=1:rank=2: rank is given twice"),
    ("crash:rank=1:when=3", "--inject crash:rank=1:when=3: 'when=3' is not rank=R, step=S or arg=V"),
    ("hang:rank=0:arg=3", "--inject hang:rank=0:arg=3: hang takes no arg; drop ':arg=3'"),
    ("slow_data:rank=0:arg=0", "--inject slow_data:rank=0:arg=0: arg must be > 0, got: 0"),
    ("slow_data:rank=0:arg=x", "--inject slow_data:rank=0:arg=x: arg must be a number, got: 'x'"),
    ("shape_mismatch:rank=0:arg=1.5",
     "--inject shape_mismatch:rank=0:arg=1.5: arg for shape_mismatch must be a whole number"),
])
def test_bad_inject_values_are_named_with_the_fix(text, message):
    with pytest.raises(ValueError) as err:
        parse_fault(text)
    assert str(err.value).startswith(message)


def test_fault_rank_and_step_are_checked_against_the_run():
    spec = parse_fault("slow_compute:rank=9")
    with pytest.raises(ValueError) as err:
        spec.check_world(2)
    assert str(err.value) == ("--inject slow_compute:rank=9: rank 9 is outside world size 2 "
                              "(ranks 0..1)")
    spec.check_world(10)
    with pytest.raises(ValueError, match=r"step 20 is past the last step 19 \(--steps 20"):
        TrainerConfig(steps=20, faults=(parse_fault("crash:rank=0:step=20"),))


@pytest.mark.parametrize("build, message", [
    (lambda: ModelConfig(width=30, heads=4), "--width 30 is not a multiple of --heads 4"),
    (lambda: ModelConfig(layers=0), "--layers must be > 0, got: 0"),
    (lambda: DataConfig(batch=0), "--batch must be > 0, got: 0"),
    (lambda: ParallelConfig(mode="fsdp"), "--mode must be one of ddp, pipeline, zero1"),
    (lambda: ParallelConfig(schedule="zb"), "--schedule must be one of gpipe, 1f1b"),
    (lambda: TrainerConfig(device="tpu"), "--device must be one of cpu, cuda, auto"),
    (lambda: TrainerConfig(parallel=ParallelConfig(mode="pipeline", microbatches=3)),
     "--batch 8 is not divisible by --microbatches 3"),
    (lambda: TrainerConfig(model=ModelConfig(layers=1),
                           parallel=ParallelConfig(mode="pipeline", pp=2)),
     "--layers 1 is fewer than --pp 2"),
])
def test_config_errors_name_the_flag(build, message):
    with pytest.raises(ValueError) as err:
        build()
    assert str(err.value).startswith(message)


def test_world_size_checks():
    cfg = TrainerConfig(parallel=ParallelConfig(mode="pipeline", pp=2))
    cfg.check_world(4)
    with pytest.raises(ValueError, match="--pp 2 does not divide world size 3"):
        cfg.check_world(3)


def test_command_line_and_environment_faults(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(config.INJECT_ENV, "nan:rank=1:step=2; crash:rank=0:step=4")
    cfg = config.parse(["--mode", "zero3", "--steps", "6", "--inject", "slow_data:rank=1:arg=0.5"])
    assert cfg.parallel.mode == "zero3" and cfg.steps == 6
    assert [(f.kind, f.rank, f.step) for f in cfg.faults] == [
        ("slow_data", 1, 0), ("nan", 1, 2), ("crash", 0, 4)]
    with pytest.raises(SystemExit) as exit_info:
        config.parse(["--inject", "slow_compute:rank=9"])
    assert exit_info.value.code == 2
    assert "--inject slow_compute:rank=9: rank 9 is outside world size 2" in capsys.readouterr().err


def test_configs_are_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        ModelConfig(2, 64)  # noqa - positional on purpose
    with pytest.raises(AttributeError):
        TrainerConfig().steps = 3  # type: ignore[misc]
    assert isinstance(TrainerConfig().faults, tuple)


def test_a_device_the_host_lacks_fails_with_the_fix(tmp_path):
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    done = subprocess.run([sys.executable, "-m", "reference_trainer", "--device", "cuda",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--device cuda: no CUDA device is visible" in done.stderr
    assert "use --device cpu" in done.stderr
