"""Slurm: srun's per-task exit lines, slurmstepd's cancellation banner, node failures.

One of these per line, in this order (a line never carries two).
"""

from __future__ import annotations

from diag.analyze.catalog.spec import Example, Signature, Source, group

SLURM = "SchedMD/slurm"

ENTRIES = (
    Signature(
        id="slurm.task_exit", signal="slurm_task_exit", oneof="slurm", prefilter=("srun: error:",),
        pattern=r"srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]+): (?P<status>.+)",
        fields={"node": str, "tasks": str, "status": str.strip},
        source=Source(SLURM, "src/srun/launch.c", "_task_finish"),
        examples=(Example("srun: error: node3: task 5: Exited with exit code 1",
                          {"node": "node3", "tasks": "5", "status": "Exited with exit code 1"}),
                  Example("srun: error: node3: tasks 0-3: Killed",
                          {"tasks": "0-3", "status": "Killed"})),
        near_misses=("srun: error: Unable to create step for job 123",)),
    Signature(
        id="slurm.cancelled", signal="slurm_cancelled", oneof="slurm", prefilter=("CANCELLED",),
        pattern=r"\*\*\* (?:JOB|STEP) (?P<job>[\d.]+) ON (?P<node>\S+) CANCELLED AT (?P<at>\S+)"
                r"(?: DUE TO (?P<reason>[A-Z ]+?))?(?: \*\*\*|$)",
        fields={"node": str, "reason": group("reason", str.strip, default="")},
        source=Source(SLURM, "src/slurmd/slurmstepd/req.c", "_handle_signal_container"),
        examples=(Example("slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT "
                          "2024-01-01T10:00:00 DUE TO TIME LIMIT ***",
                          {"node": "node1", "reason": "TIME LIMIT"}),),
        near_misses=("job 123 CANCELLED by user",)),
    Signature(
        id="slurm.node_failure", signal="slurm_node_failure", oneof="slurm",
        prefilter=("ode failure",), pattern=r"[Nn]ode failure on (?P<node>[\w.-]+)",
        fields={"node": str},
        source=Source(SLURM, "src/api/step_launch.c", "_node_fail_handler",
                      "salloc prints the same: src/salloc/salloc.c _node_fail_handler"),
        examples=(Example("srun: error: Node failure on node07", {"node": "node07"}),),
        near_misses=("no node failure so far",)),
)
