"""``python -m diag.cli``: the ``ddiag`` command, for launchers that run modules."""

from diag.cli import main

main()
