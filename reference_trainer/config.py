"""Keyword-only config dataclasses for the reference trainer, and the command line that fills them.

Checks that need only the values live in ``__post_init__``; checks that need the world
size (pipeline degree, fault ranks) live in ``TrainerConfig.check_world`` and run once
the process group exists. Every error names the flag, the value and the fix.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from reference_trainer.faults import FaultSpec, parse_faults

MODES = ("ddp", "pipeline", "zero1", "zero2", "zero3")
SCHEDULES = ("gpipe", "1f1b")
DEVICES = ("cpu", "cuda", "auto")
# Faults may also come from the environment, so that a blind test's run directory (whose
# event headers carry argv) does not name the fault it holds.
INJECT_ENV = "REFERENCE_TRAINER_INJECT"


def _positive(flag: str, value: int | float) -> None:
    if value <= 0:
        raise ValueError(f"{flag} must be > 0, got: {value}")


@dataclass(kw_only=True, frozen=True)
class ModelConfig:
    """A small GPT-style decoder."""

    layers: int = 2
    """Transformer blocks; a pipeline needs at least one per stage."""
    width: int = 64
    """Hidden size; must be a multiple of ``heads``."""
    heads: int = 4
    """Attention heads per block."""
    seq_len: int = 32
    """Tokens per sample, and the size of the learned position table."""
    vocab: int = 128
    """Token ids are in [0, vocab)."""

    def __post_init__(self) -> None:
        for flag, value in (("--layers", self.layers), ("--width", self.width),
                            ("--heads", self.heads), ("--seq-len", self.seq_len)):
            _positive(flag, value)
        if self.vocab < 2:
            raise ValueError(f"--vocab must be >= 2, got: {self.vocab}")
        if self.width % self.heads:
            raise ValueError(f"--width {self.width} is not a multiple of --heads "
                             f"{self.heads}; pick a width divisible by the head count")


@dataclass(kw_only=True, frozen=True)
class DataConfig:
    """Synthetic token data, identical for a given seed whatever the parallelism."""

    batch: int = 8
    """Micro-batch per data-parallel rank (per pipeline replica in pipeline mode)."""
    samples: int = 65536
    """Dataset length; the sampler's permutation depends on it, so keep it fixed when
    comparing runs of different world sizes."""
    loader_workers: int = 0
    """DataLoader worker processes per rank; 0 loads in the training process."""
    seed: int = 0
    """Seeds the model's initial weights, the data and the sampler's shuffle."""

    def __post_init__(self) -> None:
        _positive("--batch", self.batch)
        _positive("--samples", self.samples)
        if self.loader_workers < 0:
            raise ValueError(f"--loader-workers must be >= 0, got: {self.loader_workers}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got: {self.seed}")


@dataclass(kw_only=True, frozen=True)
class ParallelConfig:
    """How the model and the batch are spread over ranks."""

    mode: str = "ddp"
    """ddp | pipeline | zero1 (ZeRO-1 over DDP) | zero2 | zero3 (FSDP2)."""
    pp: int = 2
    """Pipeline stages (pipeline mode); the world size must be a multiple of it."""
    schedule: str = "gpipe"
    """Pipeline schedule: gpipe | 1f1b."""
    microbatches: int = 2
    """Micro-batches per pipeline step; must divide --batch."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}, got: {self.mode!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"--schedule must be one of {', '.join(SCHEDULES)}, "
                             f"got: {self.schedule!r}")
        _positive("--pp", self.pp)
        _positive("--microbatches", self.microbatches)


@dataclass(kw_only=True, frozen=True)
class TrainerConfig:
    """One training run."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """The network."""
    data: DataConfig = field(default_factory=DataConfig)
    """The input pipeline."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """The parallelism."""
    steps: int = 20
    """Optimizer steps to run."""
    lr: float = 3e-3
    """AdamW learning rate."""
    device: str = "cpu"
    """cpu (gloo) | cuda (NCCL, one GPU per local rank) | auto (cuda when available)."""
    out: Path | None = None
    """Run directory; default $DDIAG_RUN_DIR, else ./ddiag-run."""
    timeout_s: float = 300.0
    """Process-group timeout: how long a rank waits in a collective before it fails."""
    json: bool = False
    """Print a one-line JSON summary on stdout from rank 0 at the end."""
    save_params: Path | None = None
    """Rank 0 saves the final full parameters here (torch.save), for comparisons."""
    faults: tuple[FaultSpec, ...] = ()
    """Faults to inject (--inject, and $REFERENCE_TRAINER_INJECT)."""

    def __post_init__(self) -> None:
        _positive("--steps", self.steps)
        _positive("--lr", self.lr)
        _positive("--timeout-s", self.timeout_s)
        if self.device not in DEVICES:
            raise ValueError(f"--device must be one of {', '.join(DEVICES)}, "
                             f"got: {self.device!r}")
        if self.parallel.mode == "pipeline":
            self._check_pipeline()
        for fault in self.faults:
            fault.check_steps(self.steps)

    def _check_pipeline(self) -> None:
        par = self.parallel
        if self.data.batch % par.microbatches:
            raise ValueError(f"--batch {self.data.batch} is not divisible by --microbatches "
                             f"{par.microbatches}; each micro-batch must be the same size")
        if self.model.layers < par.pp:
            raise ValueError(f"--layers {self.model.layers} is fewer than --pp {par.pp}; "
                             f"every stage needs at least one block")

    def check_world(self, world_size: int) -> None:
        """The checks that need the world size; raises naming the flag and the fix."""
        if self.parallel.mode == "pipeline" and world_size % self.parallel.pp:
            raise ValueError(f"--pp {self.parallel.pp} does not divide world size "
                             f"{world_size}; launch a multiple of {self.parallel.pp} ranks")
        if self.save_params and self.parallel.mode == "pipeline":
            raise ValueError("--save-params is not supported with --mode pipeline "
                             "(each stage holds only its own blocks)")
        for fault in self.faults:
            fault.check_world(world_size)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reference_trainer", usage="%(prog)s [options] (under torchrun, or alone)",
        description="A small GPT trained with a known parallelism and switchable faults, "
                    "instrumented with ddiag. Run it under torchrun (or alone).")
    p.add_argument("--mode", default="ddp", choices=MODES, help="parallelism")
    p.add_argument("--schedule", default="gpipe", choices=SCHEDULES, help="pipeline schedule")
    p.add_argument("--pp", type=int, default=2, help="pipeline stages (pipeline mode)")
    p.add_argument("--microbatches", type=int, default=2, help="micro-batches per pipeline step")
    p.add_argument("--device", default="cpu", choices=DEVICES,
                   help="cpu uses gloo; cuda/auto use NCCL with one GPU per local rank")
    _add_model_args(p)
    _add_run_args(p)
    return p


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", type=int, default=2, help="transformer blocks")
    p.add_argument("--width", type=int, default=64, help="hidden size")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--seq-len", type=int, default=32, help="tokens per sample")
    p.add_argument("--vocab", type=int, default=128, help="vocabulary size")


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=20, help="optimizer steps")
    p.add_argument("--batch", type=int, default=8, help="per-rank micro-batch (samples)")
    p.add_argument("--samples", type=int, default=65536, help="synthetic dataset length")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed for weights, data and shuffle")
    p.add_argument("--loader-workers", type=int, default=0, help="DataLoader workers per rank")
    p.add_argument("--out", type=Path, default=None,
                   help="run directory (default: $DDIAG_RUN_DIR or ./ddiag-run)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="process-group timeout")
    p.add_argument("--json", action="store_true", help="print a JSON summary from rank 0")
    p.add_argument("--save-params", type=Path, default=None,
                   help="rank 0 saves the final full parameters to this file")
    p.add_argument("--inject", action="append", default=[], metavar="KIND:rank=R[:step=S][:arg=V]",
                   help="inject a fault (repeatable); see docs/reference-trainer.md")


def parse(argv: list[str] | None = None) -> TrainerConfig:
    """Command line (and $REFERENCE_TRAINER_INJECT) to a validated config."""
    parser = build_parser()
    args = parser.parse_args(argv)
    injects = [*args.inject, *_env_injects()]
    try:
        cfg = from_args(args, injects)
        # The launcher has announced the world size already; fail before any rank
        # builds a process group that the other ranks would then wait on.
        cfg.check_world(int(os.environ.get("WORLD_SIZE", "1")))
        return cfg
    except ValueError as exc:
        parser.error(str(exc))  # exits 2 with the usage line, like any argparse error


def _env_injects() -> list[str]:
    raw = os.environ.get(INJECT_ENV, "")
    return [part.strip() for part in raw.replace(";", ",").split(",") if part.strip()]


def from_args(args: argparse.Namespace, injects: list[str]) -> TrainerConfig:
    return TrainerConfig(
        model=ModelConfig(layers=args.layers, width=args.width, heads=args.heads,
                          seq_len=args.seq_len, vocab=args.vocab),
        data=DataConfig(batch=args.batch, samples=args.samples,
                        loader_workers=args.loader_workers, seed=args.seed),
        parallel=ParallelConfig(mode=args.mode, pp=args.pp, schedule=args.schedule,
                                microbatches=args.microbatches),
        steps=args.steps, lr=args.lr, device=args.device, out=args.out,
        timeout_s=args.timeout_s, json=args.json, save_params=args.save_params,
        faults=parse_faults(injects),
    )
