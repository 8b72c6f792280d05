"""Click parameter types and option sets that several commands share."""

from __future__ import annotations

import math

import click

from diag.launch import GROUP_TIMEOUT_S, LAUNCHERS


class Seconds(click.FloatRange):
    """A timeout: more than 0 and finite (nan and inf pass a range check but break the
    launcher's and gloo's timers)."""

    name = "seconds"

    def __init__(self) -> None:
        super().__init__(min=0, min_open=True)

    def convert(self, value, param, ctx) -> float:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds; give one > 0", param, ctx)
        return seconds


def launch_options(fn):
    """The options ``probe`` and ``check-env --all-ranks`` share to start ranks."""
    for option in reversed([
        click.option("--launcher", type=click.Choice(LAUNCHERS), default=None,
                     help="Start the ranks: local = torchrun on this host, slurm = srun with "
                          "one torchrun per node. Omit inside torchrun/srun."),
        click.option("--nodes", default=1, show_default=True, help="Nodes (slurm)."),
        click.option("--nproc-per-node", default=1, show_default=True, help="Ranks per node."),
        click.option("--env-on", "env_on", multiple=True, metavar="NODE:VAR=VALUE",
                     callback=_check_env_on,
                     help="Set VAR on one node only, to rehearse a misconfiguration. "
                          "Repeatable."),
        click.option("--master-port", type=click.IntRange(1, 65535), default=None,
                     help="Port of the rendezvous store (default: a free one)."),
        click.option("--timeout", "launch_timeout", default=300.0, show_default=True,
                     type=Seconds(), help="Seconds before a launched job is stopped."),
        click.option("--group-timeout", default=GROUP_TIMEOUT_S, show_default=True,
                     type=Seconds(),
                     help="Seconds ranks wait for each other to form the process group."),
    ]):
        fn = option(fn)
    return fn


def _check_env_on(ctx, param, values: tuple[str, ...]) -> tuple[str, ...]:
    """Refuse a malformed NODE:VAR=VALUE as a usage error, even where it is not used."""
    from diag.launch import LaunchError, parse_env_on

    try:
        parse_env_on(values)
    except LaunchError as err:
        raise click.BadParameter(str(err).removeprefix("--env-on "), ctx, param) from None
    return values


def resolve_launch(opts: dict, in_job: bool = True):
    """(LaunchSpec, None) with --launcher; else (None, the job we run in, or None)."""
    from diag.cli.output import fail
    from diag.launch import LaunchError, LaunchSpec, job_env, parse_env_on

    try:
        if opts["launcher"]:
            return LaunchSpec(opts["launcher"], opts["nodes"], opts["nproc_per_node"],
                              parse_env_on(opts["env_on"]), opts["master_port"],
                              opts["launch_timeout"]), None
        return None, job_env() if in_job else None
    except LaunchError as err:
        fail(str(err))


def job_target_options(fn):
    """--pid and --slurm-job: a job that imports nothing of ddiag, by one of its processes
    here or by its Slurm job id (``ddiag stacks``, ``ddiag watch``)."""
    fn = click.option("--slurm-job", "slurm_job", default=None, metavar="JOBID",
                      help="A running Slurm job: on each of its nodes (srun --overlap), the "
                           "ranks among the processes Slurm tracks for it.")(fn)
    return click.option("--pid", "pid", type=int, default=None,
                        help="A process of the job: its launcher (torchrun's agent, "
                             "accelerate, deepspeed, mpirun) or a rank. The ranks are found "
                             "among its descendants by RANK/LOCAL_RANK/WORLD_SIZE in their "
                             "environment.")(fn)

