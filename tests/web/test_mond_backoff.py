"""The web console's node samples ask every node's mond each round; a mond that gave no answer
is not asked again for its back-off (`core.reachability`): one attempt a minute for a dead
node, not one per round; an answer (an error answer too) ends the back-off at once."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter

from aiohttp import web

from herder.core.reachability import Reachability
from herder.masterd.web import samples
from tests.conftest import build_config


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_dead_mond_waits_its_back_off_and_a_live_one_is_asked_every_round() -> None:
    config = build_config(nodes=2)
    live, dead = sorted(config.nodes.values(), key=lambda n: n.name)
    live.primary_ip, dead.primary_ip = "127.0.0.1", "127.0.0.2"  # nothing listens on .2
    port = _free_port()
    asked: Counter[str] = Counter()
    now = [1000.0]
    monds = Reachability(clock=lambda: now[0])

    async def report(request: web.Request) -> web.Response:
        asked[request.remote or ""] += 1
        return web.json_response([{"name": "cpu-avg-load", "category": None, "kind": 0,
                                   "data": {"cpu_total": 0.5}}])

    async def rounds() -> list[dict[str, dict[str, object]]]:
        app = web.Application()
        app.router.add_get("/1/report/all", report)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            found = [await samples.mond_round(config, port, monds)]
            now[0] += 0.5  # within the first back-off (1 s)
            found.append(await samples.mond_round(config, port, monds))
            now[0] += 1.0  # past it: asked again
            found.append(await samples.mond_round(config, port, monds))
            return found
        finally:
            await runner.cleanup()

    first, resting, again = asyncio.run(rounds())
    assert asked["127.0.0.1"] == 3  # the live mond every round
    assert first[live.uuid] == {"cpu_load": 0.5}
    assert "mond cannot be asked" in str(first[dead.uuid]["mond_error"])
    assert str(resting[dead.uuid]["mond_error"]).startswith(
        "mond unreachable (since ")  # not asked: its back-off
    assert "1 failed try" in str(resting[dead.uuid]["mond_error"])
    assert "mond cannot be asked" in str(again[dead.uuid]["mond_error"])
    down = monds.down(dead.uuid)
    assert down is not None and down.failures == 2  # tried twice in three rounds
    monds.answered(dead.uuid)  # it answered someone: asked at once
    assert monds.avoid(dead.uuid) is None


def test_the_first_sample_waits_for_the_start_pause() -> None:
    """masterd's sample task asks neither the node daemons nor the monds during its start
    pause (the readers that come at a start go first), then samples every node."""
    from herder.masterd.livecache import LiveCache
    from tests.unit.test_livecache import Nodes

    config = build_config(nodes=2)
    node, other = sorted(config.nodes.values(), key=lambda n: n.name)
    node.primary_ip = other.primary_ip = "127.0.0.1"  # both monds: the one below
    port = _free_port()
    asked: list[str] = []
    daemons = Nodes()
    cache = LiveCache(daemons, ttl=30, timeout=1.0)
    kept = samples.NodeSamples()

    async def report(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response([{"name": "cpu-avg-load", "category": None, "kind": 0,
                                   "data": {"cpu_total": 0.25}}])

    async def run() -> tuple[int, int, int]:
        app = web.Application()
        app.router.add_get("/1/report/all", report)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        stop = asyncio.Event()
        task = asyncio.ensure_future(samples.sample_forever(
            kept, cache, lambda: config, stop, port, start_pause=1.0))
        try:
            await asyncio.sleep(0.5)
            during = (len(asked), daemons.count(node.name), len(kept.of(node.uuid)))
            for _ in range(100):
                await asyncio.sleep(0.05)
                if kept.of(node.uuid) and kept.of(other.uuid):
                    break
            return during
        finally:
            stop.set()
            await task
            await runner.cleanup()

    try:
        assert asyncio.run(run()) == (0, 0, 0)
    finally:
        cache.close()
    for one in (node, other):
        taken = kept.of(one.uuid)
        assert len(taken) == 1 and taken[0]["cpu_load"] == 0.25
        assert daemons.count(one.name) == 1
    assert asked == ["/1/report/all"] * 2
