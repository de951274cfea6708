"""maintd's agent poll at many nodes: bounded concurrency, and a stalled agent costs at most its
timeout (the others' answers are not held up by it)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from herder.maintd.agents import AgentPoller
from herder.maintd.rounds import Node

STATUS = {"name": "inst-status", "category": "instance", "kind": 1, "data": {"instances": []}}


async def agents(handler: Any, count: int) -> tuple[web.AppRunner, int]:
    """`handler` serving `/1/report/all` on 127.0.0.1 to 127.0.0.COUNT, one port for all."""
    app = web.Application()
    app.router.add_get("/1/report/all", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    for number in range(2, count + 1):
        await web.TCPSite(runner, f"127.0.0.{number}", port).start()
    return runner, port


def test_a_stalled_agent_costs_its_timeout_and_concurrency_is_bounded() -> None:
    in_flight = {"now": 0, "most": 0}
    stall = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        if request.host.startswith("127.0.0.1:"):  # the stalled agent: never answers
            await stall.wait()
        in_flight["now"] += 1
        in_flight["most"] = max(in_flight["most"], in_flight["now"])
        await asyncio.sleep(0.05)
        in_flight["now"] -= 1
        return web.json_response([STATUS])

    async def go() -> tuple[float, dict[str, str]]:
        runner, port = await agents(handler, 24)
        nodes = [Node(name=f"node{n}", uuid=f"u{n}", ip=f"127.0.0.{n}") for n in range(1, 25)]
        poller = AgentPoller(port=port, timeout=1.0, concurrency=4)
        try:
            started = time.monotonic()
            round_ = await poller.poll(nodes)
            elapsed = time.monotonic() - started
        finally:
            stall.set()
            await poller.close()
            await runner.cleanup()
        return elapsed, {uuid: answer.error for uuid, answer in round_.agents.items()}

    elapsed, errors = asyncio.run(go())
    assert errors["u1"].startswith("unreachable: no answer within 1 s")
    assert all(not error for uuid, error in errors.items() if uuid != "u1")
    assert in_flight["most"] <= 4
    # 23 answers of 50 ms through 3 free slots take ~0.4 s, beside the stalled one's 1 s:
    # the round ends with the stalled agent's timeout, well before a serial wait would
    assert elapsed < 1.0 + 2.0  # generous: a loaded 2-core machine


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_dead_agent_rests_in_back_off_and_is_retried_in_the_background() -> None:
    """An agent that gave no answer is not asked (nor waited for) by the next rounds: its
    reports say since when it is unreachable and how old its last reports are; once its
    back-off has passed it is asked in the background, and when it answers again the rounds
    ask it as any agent."""
    hung = {"yes": False}
    asked: list[str] = []
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        asked.append(request.host.split(":")[0])
        if hung["yes"] and request.host.startswith("127.0.0.2:"):
            await release.wait()
        return web.json_response([STATUS])

    async def go() -> None:
        runner, port = await agents(handler, 2)
        nodes = [Node(name=f"node{n}", uuid=f"u{n}", ip=f"127.0.0.{n}") for n in (1, 2)]
        clock = Clock()
        poller = AgentPoller(port=port, timeout=0.5, clock=clock)
        try:
            first = await poller.poll(nodes)
            assert not first.agents["u2"].error
            hung["yes"] = True
            second = await poller.poll(nodes)  # u2 hangs: this round waits its timeout, once
            assert second.agents["u2"].error == "unreachable: no answer within 0.5 s"
            clock.now += 30
            calls = len(asked)
            third = await poller.poll(nodes)  # not asked in the round (a background retry)
            error = third.agents["u2"].error
            assert error.startswith("unreachable: mond unreachable (since ")
            assert error.endswith("its last reports are 30 s old")
            assert third.agents["u2"].reports == {} and not third.agents["u1"].error
            await asyncio.sleep(0.7)  # the background retry times out: back-off doubles
            assert poller.reachability.down("u2").failures == 2
            assert len(asked) == calls + 2  # u1 in the round, u2 in the background
            hung["yes"] = False
            release.set()
            clock.now += 30
            await poller.poll(nodes)  # the retry, in the background: u2 answers
            await asyncio.sleep(0.2)
            assert poller.reachability.down("u2") is None
            fifth = await poller.poll(nodes)
            assert not fifth.agents["u2"].error and fifth.agents["u2"].reports
        finally:
            release.set()
            await poller.close()
            await runner.cleanup()

    asyncio.run(go())
