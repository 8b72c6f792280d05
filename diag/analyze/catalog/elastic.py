"""torchelastic (torchrun)'s agent lines. The failure summary block (``Root Cause`` /
``Failures:`` and its ``key : value`` entries) spans lines and stays code, in textlog.py.
"""

from __future__ import annotations

from diag.analyze.catalog.spec import Example, Signature, Source, compute

TORCH = "pytorch/pytorch"
API = "torch/distributed/elastic/multiprocessing/api.py"
AGENT = "torch/distributed/elastic/agent/server/api.py"
# the signals the agent handles (multiprocessing/api.py _terminate_process_handler), by
# their Linux numbers: 1.x printed the number, 2.x the enum (Signals.SIGHUP)
SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 9: "SIGKILL", 15: "SIGTERM"}


def _signal(m) -> str:
    num = m.group("num")
    return SIGNAL_NAMES.get(int(num), f"signal {num}") if num else m.group("name")

ENTRIES = (
    Signature(
        # dynamic_rendezvous.py raises it bare (no message) when the join, keep-alive or
        # exit of a rendezvous passes its deadline: the class name is the whole line
        id="elastic.rendezvous_timeout", signal="rendezvous_timeout",
        prefilter=("RendezvousTimeoutError",), pattern=r"\bRendezvousTimeoutError\b",
        source=Source(TORCH, "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py",
                      "_DistributedRendezvousOpExecutor.run",
                      "class in torch/distributed/elastic/rendezvous/api.py: 'Raised when a "
                      "rendezvous did not complete on time'"),
        examples=(Example("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", {}),
                  Example("[rank0]: raise RendezvousTimeoutError()", {})),
        near_misses=("RendezvousClosedError",)),
    Signature(
        id="elastic.worker_failed", signal="elastic_worker_failed", prefilter=("exitcode:",),
        pattern=r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>\d+) "
                r"\(pid: (?P<pid>\d+)\)",
        fields={"exitcode": int, "local_rank": int, "pid": int},
        source=Source(TORCH, API, "SubprocessContext._poll",
                      "the first failure of the agent's workers, '... of binary: <entrypoint>'"),
        also=(Source(TORCH, API, "MultiprocessContext._poll",
                     "a function entrypoint: '... of fn: <name> (start_method: <method>)'"),),
        examples=(Example("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: "
                          "-9) local_rank: 0 (pid: 1234) of binary: /usr/bin/python3",
                          {"exitcode": -9, "local_rank": 0, "pid": 1234}),
                  Example("E0611 10:02:44.120000 8812 torch/distributed/elastic/multiprocessing/"
                          "api.py:702] failed (exitcode: 1) local_rank: 3 (pid: 8830) of fn: main "
                          "(start_method: spawn)", {"exitcode": 1, "local_rank": 3, "pid": 8830})),
        near_misses=("worker exitcode: 0",)),
    Signature(
        id="elastic.closing_signal", signal="elastic_closing",
        prefilter=(("closing signal", "via signal"),),
        pattern=r"(?:Sending|Closing) process (?P<pid>\d+) (?:closing|via) signal "
                r"(?P<signal>SIG\w+)",
        fields={"pid": int, "signal": str},
        source=Source(TORCH, API, "SubprocessContext._close",
                      "'Sending process N closing signal SIGx': the agent stops the surviving "
                      "workers"),
        also=(Source(TORCH, API, "MultiprocessContext._close",
                     "function entrypoints: 'Closing process N via signal SIGx'"),),
        examples=(Example("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process "
                          "1235 closing signal SIGTERM", {"pid": 1235, "signal": "SIGTERM"}),
                  Example("W0611 10:02:44.130000 8812 torch/distributed/elastic/multiprocessing/"
                          "api.py:897] Closing process 8831 via signal SIGTERM",
                          {"pid": 8831, "signal": "SIGTERM"})),
        near_misses=("closing signal handlers",)),
    Signature(
        # the agent itself was signalled: the cause is outside the job (searched, not
        # anchored: a tqdm bar often shares the line)
        id="elastic.death_signal", signal="elastic_death_signal", oneof="death_signal",
        prefilter=("death signal",),
        pattern=r"Received (?:(?P<num>\d+)|(?:Signals\.)?(?P<name>SIG[A-Z]+)) death signal, "
                r"shutting down workers",
        fields={"signal": compute(_signal)},
        source=Source(TORCH, AGENT, "SimpleElasticAgent.run",
                      "on SignalException; sigval printed as 1 or Signals.SIGHUP"),
        examples=(Example("W0302 11:04:19.512000 88213 torch/distributed/elastic/agent/server/"
                          "api.py:704] Received Signals.SIGTERM death signal, shutting down "
                          "workers", {"signal": "SIGTERM"}),
                  Example("Epoch 3/50:  71%|#######   | 712/1000 [09:12<03:43,  1.29it/s]WARNING:"
                          "torch.distributed.elastic.agent.server.api:Received 2 death signal, "
                          "shutting down workers", {"signal": "SIGINT"})),
        near_misses=("Signal 9 (SIGKILL) received by PID 4242",
                     "Received death signal from the scheduler")),
    Signature(
        id="elastic.signal_exception", signal="elastic_death_signal", oneof="death_signal",
        prefilter=("got signal: ",),
        pattern=r"SignalException: Process (?P<pid>\d+) got signal: (?:(?P<num>\d+)|"
                r"(?:Signals\.)?(?P<name>SIG[A-Z]+))",
        fields={"signal": compute(_signal), "pid": int},
        source=Source(TORCH, API, "_terminate_process_handler",
                      "raised in the agent, its traceback ends the launcher's output"),
        examples=(Example("torch.distributed.elastic.multiprocessing.api.SignalException: "
                          "Process 30112 got signal: 1", {"signal": "SIGHUP", "pid": 30112}),),
        near_misses=("worker got signal: 11 (segfault)",)),
)
