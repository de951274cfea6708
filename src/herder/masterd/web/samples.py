"""An hour of live samples per node, for the node page's charts (`GET
/2/herder/nodes/NAME/samples`): masterd takes one every `INTERVAL` seconds from its live
figures cache (`masterd.livecache`, the nodes' `node_info`: memory, storage, instances) and
from each node's mond (`GET http://NODE:1815/1/report/all?only=...`, mond's open read API:
`cpu-avg-load`, `diskstats`, `drbd`, and the daemon collectors' status for the overview's
health), and keeps `KEEP` seconds of them.

`record`, `mond_figures` and `io_rates` are pure; `sample_forever` is masterd's background task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from array import array
from collections.abc import Callable, Collection, MutableSequence
from typing import TYPE_CHECKING, Any

import aiohttp

from herder.core import livefigures, model, ports, untrusted
from herder.core.reachability import Reachability

if TYPE_CHECKING:
    from herder.masterd.livecache import LiveCache, Snapshot

log = logging.getLogger("herder.masterd")
INTERVAL = 10.0  # seconds between two samples
KEEP = 3600.0  # seconds of samples kept per node
MOND_TIMEOUT = 3.0  # seconds for one node's mond
MOND_CONCURRENCY = 16
# seconds after masterd's start before its first sample: the readers that come at a start go
# first (a first round of 1,000 mond connections on the event loop, beside the live cache's
# first round of node calls, cost the first bulk node list ~0.5 s; docs/scale.md, goal 5)
START_PAUSE = 5.0
# herder's daemons, each a mond daemon collector (mond.collectors.daemons: status 0 unless
# the daemon is expected on that node and not running, or over its memory limit)
DAEMONS = ("mond", "masterd", "noded", "confd", "maintd", "instmon")
MOND_REPORTS = ("/1/report/all?only=default/cpu-avg-load,storage/diskstats,storage/drbd,"
                + ",".join(f"daemon/{name}" for name in DAEMONS))
SECTOR = 512  # bytes: /proc/diskstats counts 512-byte sectors whatever the device's
# devices whose I/O is counted: whole disks, not partitions (their disk counts them), nor
# device-mapper (its LVs' I/O is their PVs'), nor RAM disks
PARTITION = re.compile(r"^(?:(?:sd|vd|xvd|hd)[a-z]+\d+|nvme\d+n\d+p\d+|mmcblk\d+p\d+)$")
NOT_COUNTED = re.compile(r"^(?:dm-\d+|ram\d+|zram\d+)$")


def mond_figures(reports: Any) -> dict[str, Any]:
    """From mond's `/1/report/all` answer: `cpu_load` (CPUs busy, mond's `cpu_total`), the
    disk counters (`sectors_read`, `sectors_written`: summed over counted devices), DRBD
    (`drbd_minors`, `drbd_syncing`, `drbd_sync_pct`: the lowest resync percentage), the
    daemon collectors' verdict (`daemons_bad`: daemon -> its status message, for each whose
    status is not OK; absent when mond gave no daemon report)."""
    found: dict[str, Any] = {}
    daemons = [r for r in reports if isinstance(r, dict) and r.get("category") == "daemon"
               and isinstance(r.get("data"), dict)] if isinstance(reports, list) else []
    if daemons:
        found["daemons_bad"] = {
            str(r.get("name")): str(r["data"]["status"].get("message") or "not OK")
            for r in daemons if isinstance(r["data"].get("status"), dict)
            and r["data"]["status"].get("code") not in (0, None)}
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


# a sample's fields in the order `sample_of`, `mond_figures` (or `ask_mond`'s error) and
# `io_rates` give them
FIELDS = ("error", "mem_total", "mem_used", "disk_total", "disk_used", "cpus", "instances",
          "daemons_bad", "cpu_load", "sectors_read", "sectors_written", "drbd_minors",
          "drbd_syncing", "drbd_sync_pct", "mond_error", "io_read_bps", "io_write_bps")
OBJECTS = frozenset({"error", "mond_error", "daemons_bad"})
FLOATS = frozenset({"cpu_load", "drbd_sync_pct"})
NUMBERS = tuple(name for name in FIELDS if name not in OBJECTS)  # ints but FLOATS
NUMBER_BIT = {name: bit for bit, name in enumerate(NUMBERS)}
NONE_BIT = 16  # NUMBERS[i] (14 fields) is None: bit NONE_BIT + i of a 32-bit flags word
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
ABSENT = object()  # an object field a sample lacks


def fits(name: str, value: Any) -> bool:
    """Whether a NodeRing's columns hold `value` as the field `name` and give it back as it is."""
    if name in OBJECTS:
        return True
    if name in FLOATS:
        return value is None or type(value) is float
    if name in NUMBER_BIT:
        return value is None or (type(value) is int and INT64_MIN <= value <= INT64_MAX)
    return False


def store(column: MutableSequence[Any], slot: int, full: bool, value: Any) -> None:
    if full:
        column[slot] = value
    else:
        column.append(value)


class NodeRing:
    """One node's samples, oldest first, in a fixed-size ring stored as columns: the times and
    each numeric field in an `array` (ints in 'i' until one does not fit, then 'q'; floats in
    'd'), which fields a sample has and which are None in one bitmask per sample, strings and
    `daemons_bad` in lists where a value equal to the previous sample's is the previous
    sample's object (an unreachable node's error, made anew each round, is kept once while it
    repeats). A value of an unexpected type or an unknown key goes to a sparse per-slot dict,
    so every sample reads back exactly as it was recorded."""

    __slots__ = ("capacity", "flags", "head", "numbers", "objects", "odd", "times")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.head = 0  # the oldest sample's slot once the ring is full
        self.times = array("d")
        self.flags = array("I")  # bit i: NUMBERS[i] present; bit NONE_BIT + i: it is None
        self.numbers: dict[str, array[Any]] = {}  # made at a field's first value
        self.objects: dict[str, list[Any]] = {}  # likewise; ABSENT where a sample lacks it
        self.odd: dict[int, dict[str, Any]] = {}  # slot -> what the columns cannot hold

    def append(self, sample: dict[str, Any]) -> None:
        full = len(self.times) == self.capacity
        slot = self.head if full else len(self.times)
        previous = self.last()
        odd = {k: v for k, v in sample.items() if k != "t" and not fits(k, v)}
        flags = 0
        for bit, name in enumerate(NUMBERS):
            value = None if name in odd else sample.get(name)
            if name in sample and name not in odd:
                flags |= 1 << bit
                if value is None:
                    flags |= 1 << (NONE_BIT + bit)
            column = self.numbers.get(name)
            if column is None and value is None:
                continue  # no column until the field's first value
            if column is None:
                column = self.numbers[name] = array(
                    "d" if name in FLOATS else "i", [0]) * len(self.times)
            if column.typecode == "i" and not INT32_MIN <= (value or 0) <= INT32_MAX:
                column = self.numbers[name] = array("q", column)
            store(column, slot, full, value or 0)
        for name in OBJECTS:
            value = sample.get(name, ABSENT) if name not in odd else ABSENT
            objects = self.objects.get(name)
            if objects is None and value is ABSENT:
                continue
            if objects is None:
                objects = self.objects[name] = [ABSENT] * len(self.times)
            if previous is not None:
                before = objects[previous]
                if type(before) is type(value) and before == value:
                    value = before  # kept once while it repeats
            store(objects, slot, full, value)
        store(self.times, slot, full, float(sample["t"]))
        store(self.flags, slot, full, flags)
        self.odd.pop(slot, None)
        if odd or type(sample["t"]) is not float:
            self.odd[slot] = {"t": sample["t"], **odd}
        if full:
            self.head = (self.head + 1) % self.capacity

    def last(self) -> int | None:
        """The newest sample's slot."""
        if not self.times:
            return None
        return (self.head - 1) % self.capacity if len(self.times) == self.capacity \
            else len(self.times) - 1

    def slots(self) -> list[int]:
        """The slots oldest first."""
        return [*range(self.head, len(self.times)), *range(self.head)]

    def sample(self, slot: int) -> dict[str, Any]:
        flags = self.flags[slot]
        found: dict[str, Any] = {"t": self.times[slot]}
        for name in FIELDS:
            if name in OBJECTS:
                objects = self.objects.get(name)
                if objects is not None and objects[slot] is not ABSENT:
                    found[name] = objects[slot]
            elif flags >> NUMBER_BIT[name] & 1:
                found[name] = None if flags >> (NUMBER_BIT[name] + NONE_BIT) & 1 \
                    else self.numbers[name][slot]
        found.update(self.odd.get(slot, ()))
        return found


class NodeSamples:
    """Every node's NodeRing of the last `keep` seconds."""

    def __init__(self, *, keep: float = KEEP, interval: float = INTERVAL) -> None:
        self.keep = keep
        self.interval = interval
        self._by_node: dict[str, NodeRing] = {}

    def record(self, config: model.ConfigData, snapshot: Snapshot, when: float,
               mond: dict[str, dict[str, Any]] | None = None) -> None:
        """One sample per node asked in `snapshot`, with its mond's figures (`mond`: node
        UUID -> `mond_figures`, or `{"mond_error": why}`)."""
        for uuid in snapshot.asked:
            sample = sample_of(snapshot.info(uuid), snapshot.error(uuid), when)
            sample.update((mond or {}).get(uuid, {}))
            sample.update(io_rates(self.latest(uuid), sample))
            self.add(uuid, sample)
        self.keep_only(config.nodes)

    def add(self, uuid: str, sample: dict[str, Any]) -> None:
        """Keep `sample` (it has `t`) as the node's newest, forgetting its oldest past `keep`."""
        ring = self._by_node.get(uuid)
        if ring is None:
            ring = self._by_node[uuid] = NodeRing(int(self.keep / self.interval) + 1)
        ring.append(sample)

    def keep_only(self, uuids: Collection[str]) -> None:
        """Forget the nodes not in `uuids` (removed from the cluster)."""
        for uuid in set(self._by_node) - set(uuids):
            del self._by_node[uuid]

    def of(self, uuid: str, since: float = 0.0) -> list[dict[str, Any]]:
        ring = self._by_node.get(uuid)
        if ring is None:
            return []
        return [ring.sample(slot) for slot in ring.slots() if ring.times[slot] >= since]

    def latest(self, uuid: str) -> dict[str, Any] | None:
        ring = self._by_node.get(uuid)
        slot = None if ring is None else ring.last()
        return None if ring is None or slot is None else ring.sample(slot)


async def ask_mond(session: aiohttp.ClientSession, node: model.Node, port: int,
                   limit: asyncio.Semaphore, monds: Reachability) -> dict[str, Any]:
    """The node's mond figures, or `{"mond_error": why}`. `monds` learns whether the mond
    answered (an error answer is one): one that gave none is not asked again for its
    back-off (`core.reachability`), so a dead node costs a round one attempt a minute."""
    url = f"http://{node.primary_ip}:{port}{MOND_REPORTS}"
    async with limit:
        started = monds.clock()
        try:
            async with session.get(url) as response:
                monds.answered(node.uuid, started)
                if response.status != 200:
                    return {"mond_error": f"mond answered {response.status}"}
                raw = await response.read()
            return mond_figures(untrusted.loads(raw, what="mond's reports"))
        except untrusted.BadDocument as err:
            return {"mond_error": f"mond cannot be asked: {err}"}
        except (aiohttp.ClientError, TimeoutError) as err:
            why = f"{err or type(err).__name__}"
            monds.failed(node.uuid, why, started)
            return {"mond_error": f"mond cannot be asked: {why}"}


async def mond_round(config: model.ConfigData, port: int = ports.MOND,
                     monds: Reachability | None = None) -> dict[str, dict[str, Any]]:
    """Every wanted node's mond figures, asked at once (at most MOND_CONCURRENCY at a time);
    a mond in back-off in `monds` (None: a record of this round's own) is not asked: its
    answer says since when it is unreachable."""
    from herder.masterd.livecache import wanted

    monds = monds if monds is not None else Reachability()
    nodes = wanted(config)
    limit = asyncio.Semaphore(MOND_CONCURRENCY)
    now = monds.clock()
    resting = {n.uuid: down for n in nodes if (down := monds.avoid(n.uuid)) is not None}
    asked = [n for n in nodes if n.uuid not in resting]
    async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=MOND_TIMEOUT)) as session:
        answers = await asyncio.gather(*(ask_mond(session, n, port, limit, monds)
                                         for n in asked))
    found = {n.uuid: a for n, a in zip(asked, answers, strict=True)}
    found.update((uuid, {"mond_error": down.describe(now, "mond")})
                 for uuid, down in resting.items())
    return found


async def sample_forever(samples: NodeSamples, live: LiveCache,
                         config: Callable[[], model.ConfigData | None],
                         stop: asyncio.Event, mond_port: int | None = ports.MOND,
                         start_pause: float = START_PAUSE) -> None:
    """masterd's task: a sample of every node each `interval` seconds, the first
    `start_pause` seconds after the task starts (`mond_port` None: no mond figures)."""
    monds = Reachability()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=start_pause)
    while not stop.is_set():
        current = config()
        if current is not None:
            try:
                snapshot, mond = await asyncio.gather(
                    live.asnapshot(current),
                    mond_round(current, mond_port, monds) if mond_port else asyncio.sleep(0, {}))
                samples.record(current, snapshot, time.time(), mond)
            except Exception:  # a bug must not end the task: logged, the next round tries again
                log.exception("cannot take the nodes' samples")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=samples.interval)
