"""Slurm: srun's per-task exit lines, slurmstepd's cancellation banner, node failures, and
slurmstepd's reports of a step over its memory limit.

One of these per line, in this order (a line never carries two).
"""

from __future__ import annotations

from diag.analyze.catalog.spec import Example, Signature, Source, const, group

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


def _memory(id_: str, weak: bool, pattern: str, source: Source, example: str,
            near_miss: str) -> Signature:
    return Signature(
        id=id_, signal="oom", oneof="oom", prefilter=("xceeded",), pattern=pattern,
        fields={"device": const("host"), "weak": const(weak), "tried": const(None),
                "gpu": const(None)},
        source=source, examples=(Example(example, {"device": "host", "weak": weak}),),
        near_misses=(near_miss,))


# The step's memory limit (--mem, --mem-per-cpu): slurmstepd kills a step over it itself,
# or reports after the step that the cgroup's limit was hit, which may or may not have
# killed anything (a hint).
MEMORY = (
    _memory("slurm.memory_limit_kill", False,
            r"exceeded (?:virtual )?memory limit \(\d+ > \d+\), being killed",
            Source(SLURM, "src/common/slurm_jobacct_gather.c", "jobacct_gather_handle_mem_limit",
                   "'%ps exceeded memory limit (%lu > %lu), being killed'; before 20.02 'Job %u "
                   "exceeded ...'"),
            "slurmstepd: error: StepId=88123.0 exceeded memory limit (68719476736 > "
            "64424509440), being killed", "exceeded memory limit (soft)"),
    _memory("slurm.memory_limit_hit", True, r"Exceeded (?:step|job) memory limit",
            Source(SLURM, "src/plugins/task/cgroup/task_cgroup_memory.c",
                   "task_cgroup_memory_check_oom",
                   "before 18.08: 'Exceeded step memory limit at some point.' from the "
                   "cgroup's failcnt; the step may still have succeeded"),
            "slurmstepd: error: Exceeded step memory limit at some point.",
            "slurmstepd: error: Exceeded time limit"),
)

ENTRIES += MEMORY
