"""The reference trainer: a small GPT trained with a known parallelism (DDP, pipeline,
ZeRO-1/2/3) and switchable faults, instrumented with ddiag. ``python -m reference_trainer``."""
