"""masterd's cache of the nodes' live figures: what is asked when, how long a reader waits.

The node daemons are stood in for by an in-process transport (the cache's own boundary, the
`NodeRpc` interface): each node answers a well-formed `node_info`, hangs (a dead node: no answer
until the caller's timeout), or refuses. The whole path with real node daemons is
tests/system/test_live_figures.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from herder.core import model
from herder.core.noderpc import NoAnswerError, RpcTransport, UnreachableError
from herder.core.reachability import Reachability, ReachabilityRpc
from herder.core.rpcdefs import instance_calls, node_calls
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd.livecache import InvalidatingRpc, LiveCache
from tests.conftest import build_config
from tests.rpcfakes import nothing_answer


def answer(node: model.Node, memory_free: int = 1000) -> dict[str, Any]:
    return {"bootid": f"boot-{node.name}", "memory_total": 4096, "memory_free": memory_free,
            "memory_dom0": 100, "cpu_total": 4, "cpu_dom0": 4, "cpu_nodes": 1,
            "cpu_sockets": 1, "instances": {},
            "storage": [{"type": "file", "name": "/d", "storage_size": 10, "storage_free": 5}]}


class Nodes(RpcTransport):
    """The node daemons: `dead` ones hang until the call's timeout, `stuck` ones 3 s whatever
    the timeout, `broken` ones answer garbage, `refused` ones cannot be connected to; every call
    is counted per node and method, and the calls at once are tracked."""

    def __init__(self, dead: set[str] = frozenset(), delay: float = 0.0) -> None:
        self.dead = set(dead)
        self.stuck: set[str] = set()
        self.broken: set[str] = set()
        self.refused: set[str] = set()
        self.delay = delay
        self.calls: dict[tuple[str, str], int] = {}
        self.running = self.most_at_once = 0
        self.lock = threading.Lock()
        self.memory_free = 1000

    def count(self, node: str, method: str = "node_info") -> int:
        return self.calls.get((node, method), 0)

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        with self.lock:
            self.calls[(node.name, method)] = self.calls.get((node.name, method), 0) + 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            if node.name in self.refused:
                raise UnreachableError(f"node {node.name}: {method} failed: connection refused")
            if node.name in self.dead:
                time.sleep(timeout or 1.0)
                raise NoAnswerError(f"node {node.name}: {method} failed: timed out")
            time.sleep(3.0 if node.name in self.stuck else self.delay)
            if method != "node_info":
                return nothing_answer(method)
            if node.name in self.broken:
                return {"bootid": 3}
            # the figures with the instances, of the storage units the cluster's templates use
            assert args["instances"] is True and set(args) == {"instances", "storage_units"}
            return answer(node, self.memory_free)
        finally:
            with self.lock:
                self.running -= 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def config() -> model.ConfigData:
    return build_config(nodes=3)


def names(config: model.ConfigData) -> list[str]:
    return sorted(n.name for n in config.nodes.values())


def test_figures_are_served_while_fresh_and_asked_again_once_stale(config) -> None:
    nodes, clock = Nodes(), Clock()
    cache = LiveCache(nodes, ttl=10, timeout=2, clock=clock)
    first = cache.snapshot(config)
    assert all(first.info(n.uuid).memory_free == 1000 for n in config.nodes.values())
    nodes.memory_free = 500
    clock.now += 9
    assert all(cache.snapshot(config).info(u).memory_free == 1000 for u in config.nodes)
    assert all(nodes.count(n) == 1 for n in names(config))
    clock.now += 2  # older than the ttl: asked again
    assert all(cache.snapshot(config).info(u).memory_free == 500 for u in config.nodes)
    assert all(nodes.count(n) == 2 for n in names(config))
    cache.close()


def test_no_reader_waits_for_a_node_not_heard_from(config) -> None:
    """A node that has not answered since masterd started (a start among dead nodes): the
    reader does not wait for its call (null fields, "no answer yet"); the call goes on, and
    its failure is what the next readers get, without asking it again."""
    dead = "node2.example.com"
    nodes = Nodes(dead={dead})
    cache = LiveCache(nodes, ttl=30, timeout=1.0)
    uuid = config.find_node(dead).uuid
    started = time.monotonic()
    first = cache.snapshot(config)
    assert time.monotonic() - started < 1.0  # the dead node's call takes its 1 s timeout
    assert first.info(uuid) is None and first.error(uuid) == "no answer yet"
    assert first.info(config.find_node("node1").uuid) is not None
    wait_until(lambda: not cache._inflight, "the dead node's call")
    second = cache.snapshot(config)
    assert "timed out" in (second.error(uuid) or "") and nodes.count(dead) == 1
    cache.close()


def test_a_dead_node_heard_from_before_costs_a_reader_its_timeout_once(config) -> None:
    dead = "node2.example.com"
    nodes, clock = Nodes(), Clock()
    cache = LiveCache(nodes, ttl=30, timeout=1.0, clock=clock)
    cache.snapshot(config)  # every node answers: heard from
    nodes.dead.add(dead)
    clock.now += 31
    started = time.monotonic()
    first = cache.snapshot(config)
    waited = time.monotonic() - started
    assert 0.9 <= waited < 10, waited  # all nodes in parallel: one timeout, not one per node
    uuid = config.find_node(dead).uuid
    assert first.info(uuid) is None and "timed out" in (first.error(uuid) or "")
    assert first.info(config.find_node("node1").uuid) is not None
    # the failure is remembered: the next reader does not wait for it again
    second = cache.snapshot(config)
    assert nodes.count(dead) == 2 and (first.error(uuid) or "-") in (second.error(uuid) or "")
    cache.close()


def test_a_logical_unit_waits_for_a_node_not_heard_from(config) -> None:
    nodes = Nodes(delay=0.5)  # every node answers after half a second
    cache = LiveCache(nodes, ttl=30, timeout=2.0)
    live = cache.snapshot(config, fresh=True)
    assert all(live.info(n.uuid) is not None for n in config.nodes.values())
    cache.close()


def test_a_reader_waits_at_most_its_timeout(config) -> None:
    nodes = Nodes()
    nodes.stuck.add("node3.example.com")  # answers only after 3 s
    cache = LiveCache(nodes, ttl=30)
    started = time.monotonic()
    live = cache.snapshot(config, timeout=0.5)
    assert time.monotonic() - started < 2.5
    assert live.error(config.find_node("node3").uuid) == "no answer yet"
    assert live.info(config.find_node("node1").uuid) is not None
    cache.close()


def test_offline_nodes_and_nodes_without_instances_are_not_asked(config) -> None:
    config.find_node("node2").offline = True
    config.find_node("node3").vm_capable = False
    nodes = Nodes()
    cache = LiveCache(nodes)
    live = cache.snapshot(config)
    assert nodes.calls == {("node1.example.com", "node_info"): 1}
    assert live.asked == {config.find_node("node1").uuid}
    assert live.error(config.find_node("node2").uuid) is None  # not asked: no error either
    cache.close()


def test_concurrent_readers_share_one_call_per_node(config) -> None:
    nodes = Nodes(delay=0.3)
    cache = LiveCache(nodes)
    for node in config.nodes.values():  # heard from before: readers wait for their answers
        cache.reachability.answered(node.uuid)
    results = []
    readers = [threading.Thread(target=lambda: results.append(cache.snapshot(config)))
               for _ in range(8)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(30)
    assert len(results) == 8 and all(len(r.answers) == 3 for r in results)
    assert all(nodes.count(n) == 1 for n in names(config))
    cache.close()


def test_calls_at_once_are_bounded(config) -> None:
    config = build_config(nodes=12, drbd_instances=0, plain_instances=0)
    nodes = Nodes(delay=0.2)
    cache = LiveCache(nodes, concurrency=3)
    live = cache.snapshot(config, timeout=30, fresh=True)  # waits for every node
    assert len(live.answers) == 12 and nodes.most_at_once == 3
    cache.close()


def test_changing_calls_make_the_figures_stale(config) -> None:
    nodes, clock = Nodes(), Clock()
    cache = LiveCache(nodes, ttl=60, clock=clock)
    rpc = InvalidatingRpc(nodes, cache)
    node1 = config.find_node("node1")
    cache.snapshot(config)
    # read-only: nothing goes stale
    rpc.call(node1, node_calls.NodeInfo(instances=True, storage_units=[("lvm-vg", "xenvg")]))
    rpc.call(node1, node_calls.Ping())
    clock.now += 1
    cache.snapshot(config)
    assert nodes.count("node1.example.com") == 2  # one by the cache, one by `rpc` above
    rpc.call(node1, instance_calls.InstanceStart(instance=instance_payload(
        config, next(iter(config.instances.values())))))
    clock.now += 1
    cache.snapshot(config)
    assert nodes.count("node1.example.com") == 3
    assert nodes.count("node2.example.com") == 1
    cache.close()


def test_fresh_readers_get_answers_asked_after_they_asked(config) -> None:
    nodes = Nodes(dead={"node3.example.com"})
    cache = LiveCache(nodes, ttl=60, timeout=0.5)
    cache.snapshot(config)
    wait_until(lambda: not cache._inflight, "node3's call")
    live = cache.snapshot(config, fresh=True)
    assert nodes.count("node1.example.com") == nodes.count("node2.example.com") == 2
    # ... but a node that failed within the ttl is not asked (waited for) again
    assert nodes.count("node3.example.com") == 1
    assert live.info(config.find_node("node3").uuid) is None
    cache.close()


def test_malformed_answers_count_as_failures(config) -> None:
    nodes = Nodes()
    nodes.broken.add("node1.example.com")
    cache = LiveCache(nodes)
    live = cache.snapshot(config)
    uuid = config.find_node("node1").uuid
    assert live.info(uuid) is None and "malformed node_info answer" in (live.error(uuid) or "")
    # the daemon answered (an error): no back-off, and the failure is kept for the ttl
    assert cache.reachability.down(uuid) is None
    assert cache.snapshot(config).error(uuid) == live.error(uuid)
    assert nodes.count("node1.example.com") == 1
    cache.close()


def test_background_refresh_while_in_use_only(config) -> None:
    nodes, clock = Nodes(), Clock()
    cache = LiveCache(nodes, ttl=10, timeout=3, idle=60, clock=clock)
    assert cache.refresh_due(config) == 0  # never read: nothing to keep fresh
    cache.snapshot(config)
    clock.now += 6  # ttl - timeout - tick = 6.5: not due yet
    assert cache.refresh_due(config) == 0
    clock.now += 1  # due: asked before the figures turn stale, so readers need not wait
    assert cache.refresh_due(config) == 3
    deadline = time.monotonic() + 10
    while not all(nodes.count(n) == 2 for n in names(config)):
        assert time.monotonic() < deadline, nodes.calls
        time.sleep(0.01)
    clock.now += 61  # not read for longer than `idle`: the background asking stops
    assert cache.refresh_due(config) == 0
    cache.close()


def test_the_event_loop_reader_does_not_block_the_loop(config) -> None:
    nodes = Nodes(dead={"node3.example.com"})
    cache = LiveCache(nodes, timeout=1.0)
    for node in config.nodes.values():  # heard from before: the reader waits for node3
        cache.reachability.answered(node.uuid)

    async def read() -> tuple[int, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        live = await cache.asnapshot(config)
        ticker.cancel()
        return ticks, len(live.answers)

    ticks, answered = asyncio.run(read())
    assert answered >= 2 and ticks >= 5  # the loop kept running while the reader waited
    cache.close()


def wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_an_unreachable_node_is_not_asked_in_its_backoff_and_nobody_waits_for_it(config) -> None:
    nodes, clock = Nodes(), Clock()
    nodes.refused.add("node3.example.com")
    record = Reachability(base=20.0, cap=60.0, clock=clock)
    cache = LiveCache(ReachabilityRpc(nodes, record), ttl=10, timeout=2, clock=clock,
                      reachability=record)
    uuid = config.find_node("node3").uuid
    first = cache.snapshot(config)
    assert first.info(uuid) is None and "connection refused" in (first.error(uuid) or "")
    # in back-off: readers (fresh ones too) and the background refresh leave it alone
    for fresh in (False, True):
        again = cache.snapshot(config, fresh=fresh)
        assert (again.error(uuid) or "").startswith("node unreachable (since ")
    clock.now += 8  # the others are due for their background refresh; node3 is not asked
    assert cache.refresh_due(config) == 2 and nodes.count("node3.example.com") == 1
    # its back-off (20 s) has passed: the reader gets the failure at once, the retry runs
    # in the background
    clock.now += 12
    assert (cache.snapshot(config).error(uuid) or "").startswith("node unreachable")
    wait_until(lambda: nodes.count("node3.example.com") == 2 and not cache._inflight,
               "the retry")
    assert record.down(uuid).failures == 2
    # it comes back and is seen again (it announced itself, or another call reached it):
    # the next reader asks it, and waits for its figures
    nodes.refused.clear()
    record.seen(uuid)
    assert cache.snapshot(config).info(uuid) is not None
    assert nodes.count("node3.example.com") == 3
    cache.close()


def test_a_node_the_redistribution_could_not_reach_is_not_asked(config) -> None:
    nodes, record = Nodes(), Reachability()
    cache = LiveCache(ReachabilityRpc(nodes, record), reachability=record)
    uuid = config.find_node("node2").uuid
    record.failed(uuid, "node node2.example.com: write_ssconf failed: connection refused")
    live = cache.snapshot(config)
    assert nodes.count("node2.example.com") == 0
    assert "write_ssconf failed: connection refused" in (live.error(uuid) or "")
    assert live.info(config.find_node("node1").uuid) is not None
    cache.close()
