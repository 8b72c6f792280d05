"""Runs shared across the trainer tests: each configuration is launched once per session."""

from __future__ import annotations

from typing import Callable

import pytest

from tests.trainer.runner import Launch, launch

STEPS = 12
# name -> (ranks, arguments); ranks 0 means the trainer alone, without a launcher.
RUNS: dict[str, tuple[int, tuple[str, ...]]] = {
    "ddp_alone_b16": (0, ("--batch", "16", "--save-params", "PARAMS")),
    "ddp": (2, ("--batch", "8", "--save-params", "PARAMS")),
    "zero1": (2, ("--mode", "zero1", "--batch", "8", "--save-params", "PARAMS")),
    "zero2": (2, ("--mode", "zero2", "--batch", "8", "--save-params", "PARAMS")),
    "zero3": (2, ("--mode", "zero3", "--batch", "8", "--save-params", "PARAMS")),
    # One pipeline replica of 2 stages takes the whole global batch of 16.
    "gpipe": (2, ("--mode", "pipeline", "--schedule", "gpipe", "--pp", "2",
                  "--microbatches", "4", "--batch", "16")),
    # Hybrid: 2 stages x 2 replicas, each replica taking 8 of the global 16.
    "1f1b_hybrid": (4, ("--mode", "pipeline", "--schedule", "1f1b", "--pp", "2",
                        "--microbatches", "2", "--batch", "8")),
}


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Callable[[str], Launch]:
    """``trained(name)``: the finished run ``RUNS[name]``, launched on first use."""
    cache: dict[str, Launch] = {}

    def get(name: str) -> Launch:
        if name not in cache:
            ranks, args = RUNS[name]
            run_dir = tmp_path_factory.mktemp(name)
            args = tuple(str(run_dir / "params.pt") if a == "PARAMS" else a for a in args)
            result = launch(ranks, run_dir / "run", "--steps", str(STEPS), "--json", *args)
            assert result.returncode == 0, result.why()
            cache[name] = result
        return cache[name]

    return get
