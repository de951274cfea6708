"""herder's random choices (retry jitter, lock back-off, uid order, confd peers) from one
generator of its own: threads that jitter never move the global `random` state, a program's
or a test's seeded sequence (Hypothesis warns when it moves under its strategies)."""

from __future__ import annotations

import random

RNG = random.Random()


def spread(seconds: float) -> float:
    """A retry pause of about `seconds`: uniformly 0.5x to 1.5x, so retries do not align."""
    return seconds * (0.5 + RNG.random())
