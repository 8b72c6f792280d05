"""Every detector, in no particular order: ``analyze`` ranks what they return.

A detector is ``detect(inputs: Inputs) -> list[Finding]``: pure, no printing, no I/O.
"""

from __future__ import annotations

# structured-input detectors (event logs, heartbeats, Flight Recorder)
from diag.analyze.detectors import failures, hangs, mismatch, nan, probe_links, stragglers

DETECTORS: list = [hangs.detect, mismatch.detect, failures.detect, nan.detect,
                   stragglers.detect, probe_links.detect]

# text-log detectors (signals parsed by diag/analyze/textlog.py)
from diag.analyze.detectors import (logs_config, logs_failures, logs_hangs,  # noqa: E402,I001
                                    logs_network, logs_perf)

DETECTORS += [logs_config.detect, logs_network.detect, logs_hangs.detect, logs_failures.detect,
              logs_perf.detect]
# end text-log detectors

# check-env snapshot detector (RUN_DIR/env/rank*.json from ddiag check-env)
from diag.analyze.detectors import env_snapshots  # noqa: E402,I001

DETECTORS += [env_snapshots.detect]
# end check-env snapshot detector
