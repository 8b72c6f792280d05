"""``ddiag lab``: a real multi-node cluster on one machine.

Each node is a network namespace on a private bridge; a real Slurm (munge, slurmctld, one
slurmd per node) schedules jobs across them. Modules: ``spec`` (names, addresses, options;
pure), ``state`` (state dir and state.json), ``netns`` (ip/tc), ``slurm`` (munge, slurm.conf,
daemons), ``procs`` (finding the lab's processes), ``cluster`` (up/down/status), ``cli``.
Nothing here imports torch.
"""

from diag.lab.cluster import down, env_vars, status, up
from diag.lab.spec import LabError, LabSpec

__all__ = ["LabError", "LabSpec", "down", "env_vars", "status", "up"]
