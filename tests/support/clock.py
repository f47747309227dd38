"""A clock a test moves by hand, for the worker, the monitor and the store exporter.

Everything in the loop takes ``clock: Callable[[], float]``; handing it this one makes settle,
idle and lease windows pass in an instant instead of in real seconds::

    clock = Clock()
    monitor = Monitor(rules, store=store, clock=clock, ...)
    clock.advance(60)  # the spans are settled now

The default start is a fixed instant, so timestamps in a failure message repeat from run to
run; suites whose spans carry real wall-clock times start it at ``time.time()``.
"""

from __future__ import annotations

T0 = 1_800_000_000.0


class Clock:
    """The time a component reads: it moves only when a test moves it."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
