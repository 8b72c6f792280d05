"""torchelastic (torchrun)'s agent lines. The failure summary block (``Root Cause`` /
``Failures:`` and its ``key : value`` entries) spans lines and stays code, in textlog.py.
"""

from __future__ import annotations

from diag.analyze.catalog.spec import Example, Signature, Source

TORCH = "pytorch/pytorch"
API = "torch/distributed/elastic/multiprocessing/api.py"

ENTRIES = (
    Signature(
        id="elastic.worker_failed", signal="elastic_worker_failed", prefilter=("exitcode:",),
        pattern=r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+) "
                r"\(pid: (?P<pid>\d+)\)",
        fields={"exitcode": int, "local_rank": int, "pid": int},
        source=Source(TORCH, API, "SubprocessContext._poll",
                      "the first failure of the agent's workers"),
        examples=(Example("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: "
                          "-9) local_rank: 0 (pid: 1234) of binary: /usr/bin/python3",
                          {"exitcode": -9, "local_rank": 0, "pid": 1234}),),
        near_misses=("worker exitcode: 0",)),
    Signature(
        id="elastic.closing_signal", signal="elastic_closing", prefilter=("closing signal",),
        pattern=r"Sending process (?P<pid>\d+) closing signal (?P<signal>SIG\w+)",
        fields={"pid": int, "signal": str},
        source=Source(TORCH, API, "MultiprocessContext._close",
                      "and SubprocessContext._close: the agent stops the surviving workers"),
        examples=(Example("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process "
                          "1235 closing signal SIGTERM", {"pid": 1235, "signal": "SIGTERM"}),),
        near_misses=("closing signal handlers",)),
)
