"""The ``ddiag`` command line: the click group and its verbs, one module each
(``analyze``, ``summary``, ``watch``, ``stacks``, ``scale_test``, ``check_env``, ``probe``,
``lab``); ``output`` and ``options`` are what they share. A verb parses, calls its module, renders;
nothing else. Verbs import downward only (never this package's ``__init__``).

Imports here stay light: ``ddiag --help`` and ``--version`` must not import torch.
"""

from __future__ import annotations

import click

from diag import __version__
from diag.cli.analyze import analyze
from diag.cli.check_env import check_env
from diag.cli.lab import lab
from diag.cli.probe import probe
from diag.cli.scale_test import scale_test
from diag.cli.stacks import stacks
from diag.cli.summary import summary
from diag.cli.watch import watch


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddiag")
def main() -> None:
    """Debugging and diagnostics for distributed PyTorch training."""


for _verb in (analyze, check_env, lab, probe, scale_test, stacks, summary, watch):
    main.add_command(_verb)
