"""The order in which the queue's workers take jobs (`RunQueue`; pure, no locking of its own).

A queued job waits in a heap by (priority, id): the lowest priority number first, the oldest
among equals. A job taken from it either starts (`start`, until `done`) or is held back
(`park`, with the reason: a dependency not finished, a PAUSE or RATE_LIMIT filter rule) until
something happens that may let it go (`unpark_all`: a job ended, the rules changed). A change of
a job's priority pushes it again; the stale entry is skipped when it comes up.
"""

from __future__ import annotations

import heapq


class RunQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int]] = []  # (priority, job id), stale entries included
        self._queued: dict[int, int] = {}  # job id -> its priority, while not started
        self._parked: dict[int, str] = {}  # job id -> why it is held back
        self._running: set[int] = set()

    def add(self, job_id: int, priority: int) -> None:
        self._queued[job_id] = priority
        heapq.heappush(self._heap, (priority, job_id))

    def reprioritize(self, job_id: int, priority: int) -> None:
        """A queued job's new priority (nothing for a job already started)."""
        if job_id in self._queued and self._queued[job_id] != priority:
            self._queued[job_id] = priority
            if job_id not in self._parked:
                heapq.heappush(self._heap, (priority, job_id))

    def pop(self) -> int | None:
        """The next queued job to consider (neither parked nor started), or None."""
        while self._heap:
            priority, job_id = heapq.heappop(self._heap)
            if self._queued.get(job_id) == priority and job_id not in self._parked:
                return job_id
        return None

    def park(self, job_id: int, why: str) -> None:
        self._parked[job_id] = why

    def unpark_all(self) -> None:
        for job_id in self._parked:
            heapq.heappush(self._heap, (self._queued[job_id], job_id))
        self._parked.clear()

    def start(self, job_id: int) -> None:
        del self._queued[job_id]
        self._running.add(job_id)

    def done(self, job_id: int) -> None:
        self._running.discard(job_id)

    def forget(self, job_id: int) -> None:
        """A queued job that ended without starting (canceled, rejected)."""
        self._queued.pop(job_id, None)
        self._parked.pop(job_id, None)

    @property
    def queued(self) -> list[int]:
        return sorted(self._queued)

    @property
    def parked(self) -> dict[int, str]:
        return dict(self._parked)

    @property
    def running(self) -> frozenset[int]:
        return frozenset(self._running)
