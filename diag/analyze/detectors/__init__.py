"""Every detector, one module per question: ``analyze`` ranks what they return.

A detector is ``detect(inputs: Inputs) -> list[Finding]``: pure, no printing, no I/O.
A question's module holds ``detect``, over ddiag's structured inputs (event logs,
heartbeats, Flight Recorder dumps, probe and check-env documents), and ``detect_text``,
over the signals parsed from text logs (diag/analyze/textlog.py), where it has them.

    hang       a rank stopped and the others wait for it
    mismatch   ranks disagree on a collective's op or sizes
    failure    the rank that crashed first (OOM, an exception, a hardware error)
    nan        the rank where non-finite values appeared first
    straggler  a rank consistently last at collectives
    network    peers that cannot reach each other, slow links
    config     the job's configuration and environment (addresses, ports, versions, check-env)
    settings   a setting printed in the log and a failure in the subsystem it governs
    emitted    what a message the emitter templates know says happened (the generic rule)
"""

from __future__ import annotations

from diag.analyze.detectors import (config, emitted, failure, hang, mismatch, nan, network,
                                    settings, stacks, straggler)

# In this order, findings that rank equal keep the order they have always had.
DETECTORS: list = [
    hang.detect, mismatch.detect, failure.detect, nan.detect, straggler.detect, network.detect,
    stacks.detect, config.detect_text, network.detect_text, mismatch.detect_text, hang.detect_text,
    stacks.detect_text,
    failure.detect_text, nan.detect_text, straggler.detect_text, config.detect,
    settings.detect_text, emitted.detect_text,
]
