"""Test program: one instrumented rank that advertises a Flight Recorder dump handler and
then idles forever, as a rank blocked with no peers does. Its run directory comes from
DDIAG_RUN_DIR only (no argument), the way a user's launcher may set it."""

from __future__ import annotations

import os
import threading

import diag
from diag.runtime import flight_recorder


def main() -> None:
    flight_recorder.enable()
    diag.init()
    rank = int(os.environ.get("RANK", "0"))
    flight_recorder.install(flight_recorder.dump_path(os.environ["DDIAG_RUN_DIR"], rank))
    diag.record("ready")  # opens the event log and starts the heartbeat
    threading.Event().wait()


if __name__ == "__main__":
    main()
