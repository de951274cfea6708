"""masterd's short-lived cache of the nodes' live figures and instance run states, asked from
the node daemons (`node_info` with `instances`, `herder.core.livefigures`).

- Figures are served while they are at most `ttl` seconds old; older ones are asked again on
  demand, and in the background while the cache is in use (every node is asked again before
  its figures turn stale, so readers rarely wait); `idle` seconds after the last read the
  background asking stops.
- At most `concurrency` calls run at once, each with `timeout`; a reader waits at most
  `timeout` (and `GRACE` more, for a call that timed out to record its failure) for the nodes
  it needs, all asked in parallel, so one dead node costs a reader at most its timeout, once:
  its failure is kept like an answer, for `ttl`.
- Concurrent readers share one call per node; a call that changes a node (anything but the
  read-only RPCs, see `InvalidatingRpc`) makes its cached figures stale at once.
- Offline nodes are not asked, nor nodes that cannot host instances (Ganeti's live node fields
  are unavailable there).
- Logical units ask `fresh`: only answers to calls started after they asked count (Ganeti's
  queries ask the nodes every time), except that a node that failed to answer within the
  last `ttl` is not waited for again.
- A node masterd cannot reach (`core.reachability`, the record shared with the
  redistribution) is not asked while it is in back-off, and no reader waits for it: readers
  get "node unreachable (since ...)" at once, and a call is started in the background when
  its back-off has passed. Once any call of masterd's reaches it (or it announces itself) it
  is asked, and waited for, as any node.
- No reader waits for a node masterd has not heard from since it started: a reader waits for
  such a node's call at most `UNHEARD_WAIT` (its fields are null, "no answer yet", and the
  call goes on for the next reader); logical units (`fresh`) wait for it as for any node.
  masterd asks every node as it starts serving (the background refresh runs from the start),
  so a node that answers is heard from before most readers come, and after a start among
  1,000 nodes that do not answer the first bulk node list does not wait for their calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass

from herder.core import livefigures, model
from herder.core.errors import HerderError
from herder.core.noderpc import NodeRpc, UnreachableError
from herder.core.reachability import Down, Reachability, ReachabilityRpc
from herder.core.rpcdefs import node_calls
from herder.core.rpcdefs.base import AnswerT, Call

log = logging.getLogger("herder.masterd")

TTL = 10.0
TIMEOUT = 3.0
CONCURRENCY = 16
IDLE = 60.0
TICK = 0.5
# how long a reader waits for a node masterd has not heard from since it started
UNHEARD_WAIT = 0.1
# how much longer than its calls' timeout a reader waits: a call that timed out ends just after
# its timeout, and its failure must reach that reader (else the next one waits for it again)
GRACE = 0.5


@dataclass(frozen=True)
class NodeAnswer:
    """What one node's daemon answered (or why it did not)."""

    asked: float  # clock time the call started
    answered: float  # clock time it ended
    info: livefigures.NodeInfo | None  # None: the call failed
    error: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """The figures a reader got: node UUID -> answer, for every node that was asked. A node
    that was asked and has no answer did not answer within the reader's timeout."""

    asked: frozenset[str]
    answers: Mapping[str, NodeAnswer]

    def info(self, uuid: str) -> livefigures.NodeInfo | None:
        answer = self.answers.get(uuid)
        return None if answer is None else answer.info

    def error(self, uuid: str) -> str | None:
        """Why a node that was asked has no figures; None when it has, or was not asked."""
        if uuid not in self.asked:
            return None
        answer = self.answers.get(uuid)
        if answer is None:
            return "no answer yet"
        return answer.error

    def runs(self, uuid: str) -> Mapping[str, livefigures.InstanceRun] | None:
        """The node's live instances; None when it gave no answer."""
        info = self.info(uuid)
        return None if info is None else (info.instances or {})

    @functools.cached_property
    def reporters(self) -> Mapping[str, list[str]]:
        """Instance name -> the UUIDs of the nodes that report it running (built once per
        snapshot: a list of 10,000 instances asks it for each)."""
        found: dict[str, list[str]] = {}
        for uuid, answer in self.answers.items():
            if answer.info is not None:
                for name in answer.info.instances or {}:
                    found.setdefault(name, []).append(uuid)
        return found


EMPTY = Snapshot(frozenset(), {})


@dataclass(frozen=True)
class Collected:
    """What a reader found: answers at hand, calls to wait for (up to the reader's timeout),
    and calls to nodes not heard from since masterd started (waited for `UNHEARD_WAIT`)."""

    ready: dict[str, NodeAnswer]
    waiting: dict[str, Future[NodeAnswer]]
    briefly: dict[str, Future[NodeAnswer]]

    def snapshot(self, nodes: list[model.Node]) -> Snapshot:
        answers = dict(self.ready)
        for calls in (self.waiting, self.briefly):
            for uuid, future in calls.items():
                if future.done() and not future.cancelled():
                    answers[uuid] = future.result()
        return Snapshot(frozenset(n.uuid for n in nodes), answers)


def wanted(config: model.ConfigData) -> list[model.Node]:
    """The nodes whose figures exist: online nodes that can host instances."""
    return [n for n in config.nodes.values() if not n.offline and n.vm_capable]


class LiveCache:
    def __init__(self, rpc: NodeRpc, *, ttl: float = TTL, timeout: float = TIMEOUT,
                 concurrency: int = CONCURRENCY, idle: float = IDLE,
                 clock: Callable[[], float] = time.monotonic,
                 reachability: Reachability | None = None) -> None:
        """`reachability`: masterd's record, which `rpc` reports every call's outcome to
        (`ReachabilityRpc`), on the same clock as `clock`; None: a record of the cache's own,
        its calls reporting to it."""
        if reachability is None:
            reachability = Reachability(clock=clock)
            rpc = ReachabilityRpc(rpc, reachability)
        self.reachability = reachability
        self.rpc = rpc
        self.ttl = ttl
        self.timeout = timeout
        self.idle = idle
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=concurrency,
                                        thread_name_prefix="live-figures")
        self._lock = threading.Lock()
        self._answers: dict[str, NodeAnswer] = {}
        self._inflight: dict[str, tuple[float, Future[NodeAnswer]]] = {}
        self._stale_before: dict[str, float] = {}
        self.last_read = float("-inf")
        self.calls = 0  # node_info calls started (for tests and the status of the cache)
        # the storage units every node reports (the cluster's, from the last config seen)
        self.storage_units: list[tuple[str, str]] = []

    # --- asking -------------------------------------------------------------------------------

    def _ask(self, node: model.Node, asked: float, timeout: float) -> NodeAnswer:
        try:
            info = self.rpc.call(node, node_calls.NodeInfo(
                instances=True, storage_units=self.storage_units), timeout=timeout)
            answer = NodeAnswer(asked, self.clock(), info)
        except (HerderError, ValueError, OSError) as err:
            answer = NodeAnswer(asked, self.clock(), None, str(err))
        with self._lock:
            current = self._answers.get(node.uuid)
            if current is None or current.asked <= asked:
                self._answers[node.uuid] = answer
            flight = self._inflight.get(node.uuid)
            if flight is not None and flight[0] == asked:
                del self._inflight[node.uuid]
        if answer.info is None:
            log.info("no live figures from %s: %s", node.name, answer.error)
        return answer

    def _since(self, uuid: str, since: float) -> float:
        return max(since, self._stale_before.get(uuid, float("-inf")))

    def _collect(self, nodes: list[model.Node], since: float, timeout: float,
                 reader: bool) -> Collected:
        """Answers good enough (asked at or after `since`; a failure within the ttl in any
        case: a dead node costs its timeout once) and calls to wait for, starting the calls
        that are needed (under the lock: concurrent readers share them). A `reader` (not a
        logical unit) waits only briefly for the calls of nodes not heard from yet."""
        ready: dict[str, NodeAnswer] = {}
        waiting: dict[str, Future[NodeAnswer]] = {}
        briefly: dict[str, Future[NodeAnswer]] = {}
        failed_since = self.clock() - self.ttl
        with self._lock:
            for node in nodes:
                down = self.reachability.down(node.uuid)
                if down is not None:  # known unreachable: nobody waits for it
                    ready[node.uuid] = self._unreachable(node, down, timeout)
                    continue
                answer = self._answers.get(node.uuid)
                failed = answer is not None and answer.info is None
                if answer is not None and failed and \
                        self.reachability.answered_since(node.uuid, answer.answered):
                    answer, failed = None, False  # seen again since that call failed: ask it
                limit = self._since(node.uuid, min(since, failed_since) if failed else since)
                if answer is not None and answer.asked >= limit:
                    ready[node.uuid] = answer
                    continue
                flight = self._inflight.get(node.uuid)
                if flight is None or flight[0] < limit:
                    flight = self._start(node, timeout)
                heard = self.reachability.heard_from(node.uuid)
                (waiting if heard or not reader else briefly)[node.uuid] = flight[1]
        return Collected(ready, waiting, briefly)

    def _unreachable(self, node: model.Node, down: Down, timeout: float) -> NodeAnswer:
        """A known unreachable node's answer, at once; it is asked again in the background
        once its back-off has passed (called with the lock held)."""
        if node.uuid not in self._inflight and self.reachability.avoid(node.uuid) is None:
            self._start(node, timeout)
        now = self.reachability.clock()
        return NodeAnswer(down.started, down.started, None, down.describe(now))

    def _start(self, node: model.Node, timeout: float) -> tuple[float, Future[NodeAnswer]]:
        """(called with the lock held)"""
        asked = self.clock()
        future = self._pool.submit(self._ask, node, asked, timeout)
        self._inflight[node.uuid] = (asked, future)
        self.calls += 1
        return asked, future

    def _units_of(self, config: model.ConfigData) -> None:
        cluster = config.cluster
        self.storage_units = livefigures.cluster_storage_units(
            cluster.enabled_disk_templates, cluster.volume_group_name, cluster.file_storage_dir)

    def _since_for(self, fresh: bool) -> float:
        now = self.clock()
        self.last_read = now
        return now if fresh else now - self.ttl

    # --- reading ------------------------------------------------------------------------------

    def snapshot(self, config: model.ConfigData, *, fresh: bool = False,
                 timeout: float | None = None) -> Snapshot:
        """The figures of every wanted node (blocking; waits at most `timeout`)."""
        timeout = self.timeout if timeout is None else timeout
        nodes = wanted(config)
        self._units_of(config)
        got = self._collect(nodes, self._since_for(fresh), timeout, reader=not fresh)
        started = time.monotonic()
        if got.briefly:
            wait_futures([*got.waiting.values(), *got.briefly.values()],
                         timeout=min(UNHEARD_WAIT, timeout + GRACE))
        if got.waiting:
            wait_futures(list(got.waiting.values()),
                         timeout=max(0.0, timeout + GRACE - (time.monotonic() - started)))
        return got.snapshot(nodes)

    async def asnapshot(self, config: model.ConfigData, *, fresh: bool = False,
                        timeout: float | None = None) -> Snapshot:
        """`snapshot` for the event loop (waits without holding a thread)."""
        timeout = self.timeout if timeout is None else timeout
        nodes = wanted(config)
        self._units_of(config)
        got = self._collect(nodes, self._since_for(fresh), timeout, reader=not fresh)
        started = time.monotonic()
        if got.briefly:
            await asyncio.wait([asyncio.wrap_future(f) for f in (*got.waiting.values(),
                                                                 *got.briefly.values())],
                               timeout=min(UNHEARD_WAIT, timeout + GRACE))
        if got.waiting:
            await asyncio.wait([asyncio.wrap_future(f) for f in got.waiting.values()],
                               timeout=max(0.0, timeout + GRACE - (time.monotonic() - started)))
        return got.snapshot(nodes)

    def invalidate(self, uuid: str) -> None:
        """The node changed: its cached figures, and calls already under way, are stale."""
        with self._lock:
            self._stale_before[uuid] = self.clock()

    # --- in the background --------------------------------------------------------------------

    def refresh_due(self, config: model.ConfigData) -> int:
        """Ask the nodes whose figures would turn stale before a new call could end (while the
        cache is in use); the number of calls started."""
        now = self.clock()
        if now - self.last_read > self.idle:
            return 0
        due = now - max(0.0, self.ttl - self.timeout - TICK)
        self._units_of(config)
        started = 0
        with self._lock:
            for node in wanted(config):
                if node.uuid in self._inflight:
                    continue
                down = self.reachability.down(node.uuid)
                if down is not None:  # asked again when its back-off has passed
                    if self.reachability.avoid(node.uuid) is None:
                        self._start(node, self.timeout)
                        started += 1
                    continue
                answer = self._answers.get(node.uuid)
                if answer is None or answer.asked < self._since(node.uuid, due):
                    self._start(node, self.timeout)
                    started += 1
        return started

    async def keep_fresh(self, config: Callable[[], model.ConfigData | None],
                         stop: asyncio.Event) -> None:
        """The background task: every TICK, ask the nodes that are due; from its start as if
        just read (every node is asked at once: masterd hears from the nodes that answer before
        its readers come, see `UNHEARD_WAIT`)."""
        self.last_read = max(self.last_read, self.clock())
        while not stop.is_set():
            current = config()
            if current is not None:
                self.refresh_due(current)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=TICK)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class InvalidatingRpc:
    """The node RPC of the logical units: every call that may change a node (all but the
    contract's READ_ONLY ones) makes the cache's figures of that node stale, so the next
    reader sees the change."""

    def __init__(self, rpc: NodeRpc, cache: LiveCache) -> None:
        self.rpc = rpc
        self.cache = cache

    def call(self, node: model.Node, request: Call[AnswerT],
             timeout: float | None = None) -> AnswerT:
        try:
            answer = self.rpc.call(node, request, timeout=timeout)
        except UnreachableError:
            raise  # the call never reached the node: nothing changed there
        except BaseException:
            if not request.READ_ONLY:
                self.cache.invalidate(node.uuid)
            raise
        if not request.READ_ONLY:
            self.cache.invalidate(node.uuid)
        return answer
