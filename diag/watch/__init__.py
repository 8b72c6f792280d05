"""``ddiag watch``: notice a hang within seconds. ``decide`` judges successive heartbeat
snapshots (pure), ``verify`` checks that a pid is this run's rank before anything acts on
it, ``capture`` takes stacks and Flight Recorder dumps and ends a job, and ``loop`` runs
the watcher beside a live job."""
