"""Names shared by the instrumentation and the analysis, importable without torch."""

# Spans with these names that close outside a step (the usual ``for batch in loader``)
# belong to the step that follows; any other name is an event of its own (eval, ckpt).
STEP_PHASES = frozenset({"data", "forward", "backward", "optimizer"})
