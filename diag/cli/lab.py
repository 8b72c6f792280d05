"""``ddiag lab``: the click group; parse, call ``diag.lab.cluster``, render. Nothing else."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING

import click

from diag.lab.spec import DEFAULT_NAME, LabError

if TYPE_CHECKING:
    from diag.lab.cluster import LabStatus
    from diag.lab.state import LabState

NAME_OPTION = click.option(
    "--name", default=DEFAULT_NAME, envvar="DDIAG_LAB", show_default=True,
    help="Lab name (env DDIAG_LAB); picks its prefix, subnet and state dir.")
JSON_OPTION = click.option("--json", "as_json", is_flag=True,
                           help="Print the result as JSON on stdout; logs go to stderr.")


def _log(message: str) -> None:
    click.echo(message, err=True)


def _fail(err: Exception) -> None:
    from diag.cli.output import fail

    fail(str(err))


@click.group()
def lab() -> None:
    """A real multi-node cluster on this machine: network namespaces + Slurm (root).

    \b
    Examples:
      ddiag lab up --nodes 4
      eval "$(ddiag lab env)" && srun -N4 hostname
      ddiag lab down
    """


@lab.command()
@click.option("--nodes", default=4, show_default=True, help="Number of nodes (node1..nodeN).")
@click.option("--slow-link", "slow_links", multiple=True, metavar="nodeK=RATE",
              help="Throttle nodeK's link both ways with tbf, e.g. node4=200mbit. Repeatable.")
@click.option("--broken-iface", "broken", multiple=True, metavar="nodeK",
              help="Take nodeK's eth0 down once Slurm is up (jobs still start). Repeatable.")
@click.option("--timeout", default=60.0, show_default=True,
              help="Seconds to wait for every node to be idle in sinfo.")
@NAME_OPTION
@JSON_OPTION
def up(nodes: int, slow_links: tuple[str, ...], broken: tuple[str, ...], timeout: float,
       name: str, as_json: bool) -> None:
    """Create the nodes and start Slurm; return once every node is idle.

    \b
    Examples:
      ddiag lab up --nodes 4
    """
    from diag.lab import cluster, spec

    try:
        lab_spec = spec.LabSpec(name=name, nodes=nodes,
                                slow_links=spec.parse_slow_links(slow_links, nodes),
                                broken_ifaces=spec.parse_broken_ifaces(broken, nodes))
        cluster.up(lab_spec, timeout=timeout, log=_log)
        result = cluster.status(name)
    except LabError as err:
        _fail(err)
    _render_status(result, as_json)


@lab.command()
@click.argument("links", nargs=-1, required=True, metavar="nodeK=RATE|nodeK=off...")
@NAME_OPTION
@JSON_OPTION
def shape(links: tuple[str, ...], name: str, as_json: bool) -> None:
    """Throttle a running lab's node both ways (nodeK=200mbit), or lift it (nodeK=off).

    \b
    Examples:
      ddiag lab shape node4=200mbit
      ddiag lab shape node4=off
    """
    from diag.lab import cluster, spec

    try:
        nodes = len(_state_of(name).layout.nodes)
        for text in links:
            cluster.shape(name, *spec.parse_shape(text, nodes))
        result = cluster.status(name)
    except LabError as err:
        _fail(err)
    _render_status(result, as_json)


@lab.command("block-port")
@click.argument("ports", nargs=-1, required=True, metavar="nodeK:PORT...")
@click.option("--unblock", is_flag=True, help="Stop dropping these ports.")
@NAME_OPTION
@JSON_OPTION
def block_port(ports: tuple[str, ...], unblock: bool, name: str, as_json: bool) -> None:
    """Drop inbound TCP to PORT on nodeK's fabric link, as a host firewall would.

    \b
    Examples:
      ddiag lab block-port node2:29500
      ddiag lab block-port node2:29500 --unblock
    """
    from diag.lab import cluster, spec

    try:
        nodes = len(_state_of(name).layout.nodes)
        for text in ports:
            cluster.block_port(name, *spec.parse_port_block(text, nodes), blocked=not unblock)
        result = cluster.status(name)
    except LabError as err:
        _fail(err)
    _render_status(result, as_json)


@lab.command()
@NAME_OPTION
@JSON_OPTION
def down(name: str, as_json: bool) -> None:
    """Stop the lab's daemons and remove its namespaces, links and state dir.

    \b
    Examples:
      ddiag lab down
    """
    from diag.lab import cluster

    try:
        report = cluster.down(name, log=_log)
    except LabError as err:
        _fail(err)
    if as_json:
        from diag.cli.output import emit_json

        emit_json(report.to_json())
    elif not report.found_anything:
        _log(f"lab {name}: nothing to remove")
    if report.left_behind:
        _fail(LabError(f"lab {name}: could not remove {', '.join(report.left_behind)}; "
                       "check 'ip link', 'ip netns list' and 'ps', then run down again"))


@lab.command()
@NAME_OPTION
@JSON_OPTION
def status(name: str, as_json: bool) -> None:
    """Show the lab's nodes, addresses, daemons and Slurm node states.

    \b
    Examples:
      ddiag lab status --json
    """
    from diag.lab import cluster

    try:
        result = cluster.status(name)
    except LabError as err:
        _fail(err)
    _render_status(result, as_json)
    sys.exit(0 if result.up else 1)


@lab.command()
@NAME_OPTION
@JSON_OPTION
def env(name: str, as_json: bool) -> None:
    """Print export lines for the lab: eval "$(ddiag lab env)".

    \b
    Examples:
      eval "$(ddiag lab env)"
    """
    from diag.lab import cluster

    try:
        values = cluster.env_vars(_state_of(name))
    except LabError as err:
        _fail(err)
    if as_json:
        from diag.cli.output import emit_json

        emit_json(values)
    else:
        click.echo("\n".join(f"export {k}={shlex.quote(v)}" for k, v in values.items()))


def _state_of(name: str) -> LabState:
    from diag.lab import cluster
    from diag.lab.state import lab_paths, read_state

    cluster.require_prerequisites()
    state = read_state(lab_paths(name))
    if state is None:
        raise LabError(f"no lab named {name!r} is up (no {lab_paths(name).state_json}); "
                       f"start one with 'ddiag lab up --name {name}'")
    return state


def _render_status(result: LabStatus, as_json: bool) -> None:
    if as_json:
        from diag.cli.output import emit_json

        emit_json(result.to_json())
    else:
        click.echo("\n".join(_status_lines(result)))


def _status_lines(result: LabStatus) -> list[str]:
    if result.state is None:
        return [f"lab {result.name}: not up (start it with 'ddiag lab up --name {result.name}')"]
    layout = result.state.layout
    lines = [f"lab {layout.name}: {'up' if result.up else 'DEGRADED'}, {layout.subnet}, "
             f"state in {layout.state_dir}"]
    for node in layout.nodes:
        notes = ([f"slow {node.slow_link.rate}"] if node.slow_link else []) + (
            ["eth0 broken"] if node.broken_iface else []) + (
            [f"drops tcp {','.join(map(str, node.blocked_ports))}"] if node.blocked_ports else [])
        slurm_state = result.slurm_states.get(node.name, "?")
        lines.append(f"  {node.name:8} {node.addr:15} slurm={slurm_state:8} {' '.join(notes)}")
    dead = [d for d, ok in result.alive.items() if not ok]
    if dead:
        lines.append(f"  not running: {', '.join(dead)}; run 'ddiag lab up --name "
                     f"{layout.name}' to start it afresh")
    return lines
