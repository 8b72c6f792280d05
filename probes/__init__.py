"""``ddiag probe``: measure links, collectives and compute across the job's own ranks.

``launch`` starts ranks (torchrun locally, srun + torchrun on Slurm) or finds the job we
already run in; ``links``, ``collectives`` and ``compute`` measure inside the ranks and
analyse the numbers with pure functions; ``render`` prints the tables.
"""
