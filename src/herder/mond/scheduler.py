"""Adaptive collection intervals (design "Mode of operation"). Pure: the clock is injected.

Each collector runs on its own interval, from the cluster config (`data_collectors`), kept
between `min_interval` and `max_interval`. After every run:

- data unchanged since the previous run: the interval grows by `GROW` (up to the maximum);
- data changed: it halves (down to the minimum);
- a slow collector is never run more often than `SLOWNESS` times its own run time, so a
  collector that takes 2 s is not run every second.

A non-adaptive collector (diagnose: maintd polls at its configured interval) keeps `interval`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GROW = 1.5
SHRINK = 0.5
SLOWNESS = 4.0


@dataclass
class Schedule:
    interval: float
    min_interval: float
    max_interval: float
    adaptive: bool = True
    current: float = field(init=False)
    next_due: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.min_interval <= self.interval <= self.max_interval:
            raise ValueError("need 0 < min_interval <= interval <= max_interval")
        self.current = self.interval

    def after_run(self, now: float, *, changed: bool, duration: float) -> float:
        """Record a finished run at `now`; return the next due time."""
        if self.adaptive:
            factor = SHRINK if changed else GROW
            self.current = min(self.max_interval,
                               max(self.min_interval, self.current * factor))
            self.current = max(self.current, min(self.max_interval, duration * SLOWNESS))
        else:
            self.current = self.interval
        self.next_due = now + self.current
        return self.next_due

    def retune(self, interval: float, min_interval: float, max_interval: float,
               adaptive: bool) -> None:
        """New bounds from a changed config; keeps the current interval inside them."""
        if (interval, min_interval, max_interval, adaptive) == (
                self.interval, self.min_interval, self.max_interval, self.adaptive):
            return
        self.interval, self.min_interval, self.max_interval = interval, min_interval, max_interval
        self.adaptive = adaptive
        self.next_due = 0.0  # run soon: a new interval must not wait for the old one to pass
        self.current = interval if not adaptive else min(max_interval,
                                                           max(min_interval, self.current))
