"""``ddiag scale-test``: staged 1 -> 2 -> 4 -> N runs of the reference trainer that show
where performance falls off, and why."""
