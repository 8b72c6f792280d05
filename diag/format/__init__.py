"""The run-directory contract, shared by the producers and the readers: paths
(``rundir``), schema versions (``schema``), record and span names (``names``), the event
and heartbeat readers (``events``, ``heartbeat``), rank ranges (``ranks``) and the safe
ways to open an input (``infile``) or create an output (``outfile``). No torch."""
