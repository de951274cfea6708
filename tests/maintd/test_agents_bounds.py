"""maintd's agent poll at many nodes: bounded concurrency, and a stalled agent costs at most its
timeout (the others' answers are not held up by it)."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from herder.maintd.agents import AgentPoller
from herder.maintd.rounds import Node

STATUS = {"name": "inst-status", "category": "instance", "kind": 1, "data": {"instances": []}}


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
        app = web.Application()
        app.router.add_get("/1/report/all", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        for number in range(2, 25):
            await web.TCPSite(runner, f"127.0.0.{number}", port).start()
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
