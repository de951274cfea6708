"""An hour of live samples per node, for the node page's charts (`GET
/2/herder/nodes/NAME/samples`): masterd takes one every `INTERVAL` seconds from its live
figures cache (`masterd.livecache`, the nodes' `node_info`: memory, storage, instances) and
from each node's mond (`GET http://NODE:1815/1/report/all?only=...`, mond's open read API:
`cpu-avg-load`, `diskstats`, `drbd`), and keeps `KEEP` seconds of them.

`record`, `mond_figures` and `io_rates` are pure; `sample_forever` is masterd's background task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp

from herder.core import livefigures, model, untrusted

if TYPE_CHECKING:
    from herder.masterd.livecache import LiveCache, Snapshot

log = logging.getLogger("herder.masterd")
INTERVAL = 10.0  # seconds between two samples
KEEP = 3600.0  # seconds of samples kept per node
MOND_PORT = 1815
MOND_TIMEOUT = 3.0  # seconds for one node's mond
MOND_CONCURRENCY = 16
MOND_REPORTS = "/1/report/all?only=default/cpu-avg-load,storage/diskstats,storage/drbd"
SECTOR = 512  # bytes: /proc/diskstats counts 512-byte sectors whatever the device's
# devices whose I/O is counted: whole disks, not partitions (their disk counts them), nor
# device-mapper (its LVs' I/O is their PVs'), nor RAM disks
PARTITION = re.compile(r"^(?:(?:sd|vd|xvd|hd)[a-z]+\d+|nvme\d+n\d+p\d+|mmcblk\d+p\d+)$")
NOT_COUNTED = re.compile(r"^(?:dm-\d+|ram\d+|zram\d+)$")


def mond_figures(reports: Any) -> dict[str, Any]:
    """From mond's `/1/report/all` answer: `cpu_load` (CPUs busy, mond's `cpu_total`), the
    disk counters (`sectors_read`, `sectors_written`: summed over counted devices), DRBD
    (`drbd_minors`, `drbd_syncing`, `drbd_sync_pct`: the lowest resync percentage)."""
    found: dict[str, Any] = {}
    by_name = {r.get("name"): r.get("data") for r in reports if isinstance(r, dict)} \
        if isinstance(reports, list) else {}
    cpu = by_name.get("cpu-avg-load")
    if isinstance(cpu, dict) and isinstance(cpu.get("cpu_total"), int | float):
        found["cpu_load"] = round(float(cpu["cpu_total"]), 3)
    disks = by_name.get("diskstats")
    if isinstance(disks, list):
        counted = [d for d in disks if isinstance(d, dict) and isinstance(d.get("name"), str)
                   and not PARTITION.match(d["name"]) and not NOT_COUNTED.match(d["name"])]
        found["sectors_read"] = sum(int(d.get("secRead", 0)) for d in counted)
        found["sectors_written"] = sum(int(d.get("secWritten", 0)) for d in counted)
    drbd = by_name.get("drbd")
    if isinstance(drbd, dict) and isinstance(drbd.get("deviceInfos"), list):
        minors = [m for m in drbd["deviceInfos"] if isinstance(m, dict)]
        syncing = [m["syncStatus"].get("percentage") for m in minors
                   if isinstance(m.get("syncStatus"), dict)]
        found["drbd_minors"] = len(minors)
        found["drbd_syncing"] = len(syncing)
        percents = [float(p) for p in syncing if isinstance(p, int | float)]
        found["drbd_sync_pct"] = min(percents) if percents else None
    return found


def io_rates(previous: dict[str, Any] | None, current: dict[str, Any]) -> dict[str, Any]:
    """Bytes per second read and written between two samples' disk counters (nothing without
    two samples with counters; None after a counter went back: the node rebooted)."""
    if previous is None or "sectors_read" not in previous or "sectors_read" not in current:
        return {}
    rates: dict[str, Any] = {"io_read_bps": None, "io_write_bps": None}
    elapsed = current["t"] - previous["t"]
    read = current["sectors_read"] - previous["sectors_read"]
    written = current["sectors_written"] - previous["sectors_written"]
    if elapsed > 0 and read >= 0 and written >= 0:
        rates["io_read_bps"] = round(read * SECTOR / elapsed)
        rates["io_write_bps"] = round(written * SECTOR / elapsed)
    return rates


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

    def record(self, config: model.ConfigData, snapshot: Snapshot, when: float,
               mond: dict[str, dict[str, Any]] | None = None) -> None:
        """One sample per node asked in `snapshot`, with its mond's figures (`mond`: node
        UUID -> `mond_figures`, or `{"mond_error": why}`)."""
        for uuid in snapshot.asked:
            samples = self._by_node.setdefault(
                uuid, deque(maxlen=int(self.keep / self.interval) + 1))
            sample = sample_of(snapshot.info(uuid), snapshot.error(uuid), when)
            sample.update((mond or {}).get(uuid, {}))
            sample.update(io_rates(samples[-1] if samples else None, sample))
            samples.append(sample)
        for uuid in set(self._by_node) - set(config.nodes):  # removed nodes
            del self._by_node[uuid]

    def of(self, uuid: str, since: float = 0.0) -> list[dict[str, Any]]:
        return [s for s in self._by_node.get(uuid, ()) if s["t"] >= since]


async def ask_mond(session: aiohttp.ClientSession, node: model.Node, port: int,
                   limit: asyncio.Semaphore) -> dict[str, Any]:
    url = f"http://{node.primary_ip}:{port}{MOND_REPORTS}"
    try:
        async with limit, session.get(url) as response:
            if response.status != 200:
                return {"mond_error": f"mond answered {response.status}"}
            raw = await response.read()
        return mond_figures(untrusted.loads(raw, what="mond's reports"))
    except (aiohttp.ClientError, TimeoutError, untrusted.BadDocument) as err:
        return {"mond_error": f"mond cannot be asked: {err or type(err).__name__}"}


async def mond_round(config: model.ConfigData, port: int = MOND_PORT
                     ) -> dict[str, dict[str, Any]]:
    """Every wanted node's mond figures, asked at once (at most MOND_CONCURRENCY at a time)."""
    from herder.masterd.livecache import wanted

    nodes = wanted(config)
    limit = asyncio.Semaphore(MOND_CONCURRENCY)
    async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=MOND_TIMEOUT)) as session:
        answers = await asyncio.gather(*(ask_mond(session, n, port, limit) for n in nodes))
    return {n.uuid: a for n, a in zip(nodes, answers, strict=True)}


async def sample_forever(samples: NodeSamples, live: LiveCache,
                         config: Callable[[], model.ConfigData | None],
                         stop: asyncio.Event, mond_port: int | None = MOND_PORT) -> None:
    """masterd's task: a sample of every node each `interval` seconds (`mond_port` None: no
    mond figures)."""
    while not stop.is_set():
        current = config()
        if current is not None:
            try:
                snapshot, mond = await asyncio.gather(
                    live.asnapshot(current),
                    mond_round(current, mond_port) if mond_port else asyncio.sleep(0, {}))
                samples.record(current, snapshot, time.time(), mond)
            except Exception:  # a bug must not end the task: logged, the next round tries again
                log.exception("cannot take the nodes' samples")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=samples.interval)
