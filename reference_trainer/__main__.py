"""``python -m reference_trainer``: parse, build, train, close. See docs/reference-trainer.md."""

from __future__ import annotations

import json
import os
import sys
import time

import diag
from diag.runtime import flight_recorder
from diag.format.rundir import training_run_dir
from reference_trainer import config, distributed
from reference_trainer.trainer import Trainer


def main(argv: list[str] | None = None) -> int:
    cfg = config.parse(argv)
    started = time.monotonic()
    try:
        env = distributed.setup(cfg.device, cfg.timeout_s)
    except ValueError as exc:  # a --device this host cannot serve
        print(f"python -m reference_trainer: error: {exc}", file=sys.stderr)
        return 2
    run_dir = training_run_dir(cfg.out)
    diag.init(run_dir)
    flight_recorder.install(flight_recorder.dump_path(run_dir, env.rank))
    try:
        trainer = Trainer(cfg, env)
        steps_per_s = trainer.train()
        if cfg.save_params:
            trainer.save_params()
        summary = trainer.summary(steps_per_s, time.monotonic() - started) if cfg.json else None
    except BaseException:
        flight_recorder.dump()  # what this rank had issued when it failed
        raise
    flight_recorder.dump()
    diag.shutdown()
    distributed.close()
    if summary is not None and env.rank == 0:
        print(json.dumps({**summary, "run_dir": str(run_dir)}), flush=True)
    return 0


def _exit(code: int) -> None:
    """Leave without the interpreter's finalisation once everything is written: gloo's
    threads can abort a rank there ("terminate called without an active exception", one
    run in six on this machine, after every rank had finished and closed its logs), which
    would turn a good run into exit -6. Failures still raise and exit the usual way."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
