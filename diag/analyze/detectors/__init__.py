"""Every detector, in no particular order: ``analyze`` ranks what they return.

A detector is ``detect(inputs: Inputs) -> list[Finding]``: pure, no printing, no I/O.
"""

from __future__ import annotations

# structured-input detectors (event logs, heartbeats, Flight Recorder)
from diag.analyze.detectors import failures, hangs, mismatch, nan, stragglers

DETECTORS: list = [hangs.detect, mismatch.detect, failures.detect, nan.detect,
                   stragglers.detect]

# text-log detectors
