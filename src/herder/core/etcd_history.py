"""etcd's history kept short: the etcd master compacts what is older than `KEEP` seconds.

etcd keeps every revision of every key until it is compacted, and by default nothing compacts
it (`--auto-compaction-retention` is 0): its database grows with each change until it reaches
its quota (2 GiB by default), where etcd raises the NOSPACE alarm and refuses every write. At
50,000 instances one new generation of the config (an import, a restore, a change too big for
one transaction) is ~80 MB of history, and each job some kilobytes (its records, the head,
the objects it touched). So the elected masterd compacts: every `EVERY` seconds it notes
etcd's revision, and compacts to the newest revision it noted at least `KEEP` seconds ago,
as etcd's periodic auto-compaction would (docs/compat.md). Readers read at the head's
current revision; one that follows from a revision compacted away reads the whole config
again (`store_etcd`), so only a read lasting longer than `KEEP` is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from herder.core import etcd

log = logging.getLogger(__name__)

KEEP = 600.0  # seconds of history kept (etcd's periodic mode with a 10-minute retention)
EVERY = 60.0  # seconds between two marks


def due(marks: deque[tuple[float, int]], now: float, keep: float) -> int | None:
    """The revision to compact to: the newest mark at least `keep` old (those marks are
    dropped), or None while no mark is that old."""
    target = None
    while marks and marks[0][0] <= now - keep:
        target = marks.popleft()[1]
    return target


@dataclass
class HistoryCompactor:
    """Marks etcd's revision at each `step`, and compacts to the one marked `keep` ago."""

    client: etcd.EtcdClient
    key: str  # a key the client may read (the config's head): its count carries the revision
    keep: float = KEEP
    marks: deque[tuple[float, int]] = field(default_factory=deque)

    def step(self, now: float) -> int | None:
        """One round: the revision compacted to, if any."""
        target = due(self.marks, now, self.keep)
        self.marks.append((now, self.client.revision(self.key)))
        if target is None:
            return None
        if self.client.compact(target):
            log.info("compacted etcd's history before revision %d", target)
        return target


async def keep_short(compactor: HistoryCompactor, clock: Callable[[], float],
                     stop: asyncio.Event, every: float = EVERY) -> None:
    """`compactor.step` every `every` seconds until `stop` (a failed round is logged and
    tried again next time)."""
    while not stop.is_set():
        try:
            await asyncio.to_thread(compactor.step, clock())
        except etcd.EtcdError as err:
            log.warning("cannot compact etcd's history: %s", err)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)
