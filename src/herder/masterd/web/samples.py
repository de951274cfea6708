"""An hour of live samples per node, for the node page's charts (`GET
/2/herder/nodes/NAME/samples`): masterd takes one every `INTERVAL` seconds from its live
figures cache (`masterd.livecache`, the nodes' `node_info`), and keeps `KEEP` seconds of them.

`record` is pure (the snapshot in, samples kept); `sample_forever` is masterd's background task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from herder.core import livefigures, model

if TYPE_CHECKING:
    from herder.masterd.livecache import LiveCache, Snapshot

log = logging.getLogger("herder.masterd")
INTERVAL = 10.0  # seconds between two samples
KEEP = 3600.0  # seconds of samples kept per node


def sample_of(info: livefigures.NodeInfo | None, error: str | None,
              when: float) -> dict[str, Any]:
    """One sample: wall time, memory (MiB), storage (MiB, all reporting units but PVs),
    CPUs, running instances; a node without figures has only `error`."""
    if info is None:
        return {"t": when, "error": error or "no answer"}
    units = [u for u in info.storage if u.type != livefigures.STORAGE_LVM_PV]
    return {"t": when, "mem_total": info.memory_total,
            "mem_used": info.memory_total - info.memory_free,
            "disk_total": sum(u.storage_size for u in units),
            "disk_used": sum(u.storage_size - u.storage_free for u in units),
            "cpus": info.cpu_total, "instances": len(info.instances or {})}


class NodeSamples:
    def __init__(self, *, keep: float = KEEP, interval: float = INTERVAL) -> None:
        self.keep = keep
        self.interval = interval
        self._by_node: dict[str, deque[dict[str, Any]]] = {}

    def record(self, config: model.ConfigData, snapshot: Snapshot, when: float) -> None:
        for uuid in snapshot.asked:
            samples = self._by_node.setdefault(
                uuid, deque(maxlen=int(self.keep / self.interval) + 1))
            samples.append(sample_of(snapshot.info(uuid), snapshot.error(uuid), when))
        for uuid in set(self._by_node) - set(config.nodes):  # removed nodes
            del self._by_node[uuid]

    def of(self, uuid: str, since: float = 0.0) -> list[dict[str, Any]]:
        return [s for s in self._by_node.get(uuid, ()) if s["t"] >= since]


async def sample_forever(samples: NodeSamples, live: LiveCache,
                         config: Callable[[], model.ConfigData | None],
                         stop: asyncio.Event) -> None:
    """masterd's task: a sample of every node each `interval` seconds."""
    while not stop.is_set():
        current = config()
        if current is not None:
            try:
                snapshot = await live.asnapshot(current)
                samples.record(current, snapshot, time.time())
            except Exception:  # a bug must not end the task: logged, the next round tries again
                log.exception("cannot take the nodes' samples")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=samples.interval)
