"""``ddiag scale-test``: staged 1 -> 2 -> 4 -> N runs of the reference trainer (or of the
user's own command) that show where performance falls off, and why."""
