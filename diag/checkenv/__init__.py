"""``ddiag check-env``: find launcher, network and host misconfigurations before training.

Facts are collected at the edge (``collect``), checked by pure functions (``checks_*``),
merged across ranks (``report``) and rendered by the CLI.
"""
