"""How fast each RAPI user may submit jobs (issue 35: 400 read-only jobs in 7 s from one reader
filled every candidate's queue and delayed a writer's job).

A token bucket per user (a request without a user, with anonymous reads on: per source
address) and kind of job: read-only jobs (instance info, storage and OS queries;
`OpCode.READ_ONLY`) and the others each have their own, so a reader's queries never take a
writer's turn. A submission takes one token; an empty bucket answers how long until the next
(the RAPI's 429 and its Retry-After). The limits are in docs/security.md "Limits".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    burst: int  # submissions at once
    per_second: float  # sustained


READ_ONLY_RATE = Rate(burst=20, per_second=5.0)
WRITE_RATE = Rate(burst=200, per_second=50.0)
MAX_BUCKETS = 10_000  # distinct callers remembered; the fullest (idle) are forgotten first


class SubmissionLimits:
    def __init__(self, read_only: Rate = READ_ONLY_RATE, write: Rate = WRITE_RATE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rates = {True: read_only, False: write}
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, bool], tuple[float, float]] = {}  # tokens, at

    def take(self, caller: str, read_only: bool) -> float:
        """Take a token of `caller`'s bucket for this kind of job: 0.0 when it may submit,
        else the seconds until it may."""
        rate = self.rates[read_only]
        now = self.clock()
        key = (caller, read_only)
        with self._lock:
            tokens, at = self._buckets.get(key, (float(rate.burst), now))
            tokens = min(float(rate.burst), tokens + (now - at) * rate.per_second)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return (1.0 - tokens) / rate.per_second
            self._buckets[key] = (tokens - 1.0, now)
            if len(self._buckets) > MAX_BUCKETS:
                self._forget_idle(now)
            return 0.0

    def _forget_idle(self, now: float) -> None:
        """Drop the buckets that have refilled (a caller unseen since): they hold nothing."""
        for key, (tokens, at) in list(self._buckets.items()):
            rate = self.rates[key[1]]
            if tokens + (now - at) * rate.per_second >= rate.burst:
                del self._buckets[key]

