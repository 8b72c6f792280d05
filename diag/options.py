"""Click parameter types that several commands share."""

from __future__ import annotations

import math

import click


class Seconds(click.FloatRange):
    """A timeout: more than 0 and finite (nan and inf pass a range check but break the
    launcher's and gloo's timers)."""

    name = "seconds"

    def __init__(self) -> None:
        super().__init__(min=0, min_open=True)

    def convert(self, value, param, ctx) -> float:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds; give one > 0", param, ctx)
        return seconds
