"""Open MPI's own messages (mpirun / mpiexec, which Horovod and nccl-tests jobs run under):
its TCP transport meeting the wrong peer, and the launcher naming the first process that
exited.

Open MPI names a process ``[[jobid,vpid],rank]`` (OPAL_NAME_PRINT: ``[[%u,%u],%u]`` of the
jobid's family and local job, then the vpid, which is the MPI rank in the world).
"""

from __future__ import annotations

import re

from diag.analyze.catalog.spec import Example, Implies, Signature, Source
from diag.verdict import Basis, Category

OMPI = "open-mpi/ompi"

WRONG_PEER = Implies(
    Category.WRONG_INTERFACE, Basis.LINE,
    "Open MPI's TCP transport reached a different process than the one it dialled: an "
    "interface with the same address on every host (docker0, virbr0, a bridge) or one the "
    "hosts do not share. Restrict it to the interface the nodes share: mpirun --mca "
    "btl_tcp_if_include <iface> (or --mca btl_tcp_if_exclude lo,docker0,virbr0), and the "
    "same for --mca oob_tcp_if_include.")

# "  Process name: [[11192,1],8]" after "The first process to do so was:"
_PROCESS = re.compile(r"Process name:\s*\[\[\d+,\d+\],(?P<rank>\d+)\]")
_EXIT = re.compile(r"Exit code:\s*(?P<code>-?\d+)")
_FOLLOWING = 6  # lines of the help text the name and exit code sit in


def _first_failure(ex, line, m: re.Match) -> None:
    """The launcher's help text names the first rank to exit non-zero a few lines down."""
    block = [str(raw) for raw in ex.lines[line.n:line.n + _FOLLOWING]]
    name = next((_PROCESS.search(b) for b in block if _PROCESS.search(b)), None)
    code = next((_EXIT.search(b) for b in block if _EXIT.search(b)), None)
    ex.emit("launcher_first_failure", line, rank=int(name.group("rank")) if name else None,
            exit_code=int(code.group("code")) if code else None, launcher="mpirun")


ENTRIES = (
    Signature(
        id="ompi.btl_tcp_unexpected_identifier", signal="mpi_wrong_peer",
        prefilter=("received unexpected process identifier",),
        pattern=r"received unexpected process identifier",
        source=Source(OMPI, "opal/mca/btl/tcp/btl_tcp_endpoint.c",
                      "mca_btl_tcp_endpoint_recv_connect_ack",
                      "BTL_ERROR 'received unexpected process identifier %s'; the same text "
                      "from oob_tcp (tcp_peer_recv_connect_ack) and, before 1.0, ptl_tcp"),
        examples=(Example("[node-b][[22157,1],4][btl_tcp_endpoint.c:626:mca_btl_tcp_endpoint"
                          "_recv_connect_ack] received unexpected process identifier "
                          "[[22157,1],7]"),),
        near_misses=("[node-b] connect-ack header from [[22157,1],7] is okay",),
        implies=WRONG_PEER),
    Signature(
        id="ompi.first_nonzero_exit", signal="launcher_first_failure",
        prefilter=("The first process to do so was",),
        pattern=r"The first process to do so was:?\s*$",
        source=Source(OMPI, "orte/runtime/orte_quit.c", "print_aborted_job",
                      "orte_show_help of help-orterun.txt 'orterun:non-zero-exit': '%s "
                      "detected that one or more processes exited with non-zero status, thus "
                      "causing the job to be terminated. The first process to do so was: "
                      "Process name: %s Exit code: %d' with ORTE_NAME_PRINT(&proc->name); "
                      "PRRTE: help-prun.txt 'prun:non-zero-exit'"),
        examples=(Example("the job to be terminated. The first process to do so was:"),),
        near_misses=("the first process to do so was rank 3",),
        parse=_first_failure),
)
