from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp import web

from herder.core import envelope
from herder.maintd.agents import AgentPoller, split_reports
from herder.maintd.rounds import Node
from herder.maintd.sources import DiagnoseSource, Verdict, check_report

KEY = b"k" * 32
EVAC = {"status": "evacuate", "command": "", "details": {}}


def signed(data: Any, ts: int, key: bytes = KEY) -> dict[str, Any]:
    return {"name": "diagnose", "category": "node", "timestamp": ts, "data": data,
            "signature": {"timestamp": ts,
                          "hmac": envelope.compute_hmac(key, str(ts), envelope.dumps(data))}}


def test_check_report_verdicts() -> None:
    good = signed(EVAC, 10)
    assert check_report(KEY, good, None) == Verdict.OK
    assert check_report(KEY, good, (10, good["signature"]["hmac"])) == Verdict.SAME
    assert check_report(KEY, good, (11, "x")) == Verdict.REPLAYED
    assert check_report(KEY, signed(EVAC, 10, b"other"), None) == Verdict.FORGED
    tampered = signed(EVAC, 10)
    tampered["data"] = {"status": "evacuate-failover"}
    assert check_report(KEY, tampered, None) == Verdict.FORGED
    assert check_report(KEY, {"data": EVAC}, None) == Verdict.UNSIGNED
    assert check_report(KEY, {**good, "timestamp": 99}, None) == Verdict.FORGED
    assert check_report(None, good, None) == Verdict.UNSIGNED
    assert check_report(KEY, "junk", None) == Verdict.MALFORMED


ASKED = "/1/report/all 1 node/diagnose,instance/inst-status,default/cpu-avg-load"
STATUS = {"name": "inst-status", "category": "instance", "kind": 1, "data": {"instances": []}}


def test_poll_accepts_and_refuses(caplog: pytest.LogCaptureFixture) -> None:
    """One GET of /1/report/all?verbose=1 per node and poll, for the reports maintd uses; the
    diagnose source takes its report from that answer."""
    reports: dict[str, Any] = {}
    asked: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        asked.append(f"{request.path} {request.query.get('verbose')} "
                     f"{request.query.get('only')}")
        if reports.get("body") is None:
            return web.Response(status=500, text="boom")
        return web.json_response([STATUS, reports["body"]])

    async def go() -> None:
        app = web.Application()
        app.router.add_get("/1/report/all", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        src = DiagnoseSource(lambda: KEY)
        agents = AgentPoller(port=port, timeout=2)

        async def poll(nodes: list[Node], poller: AgentPoller = agents) -> dict[str, Any]:
            return await src.poll(nodes, await poller.poll(nodes))

        node = Node(name="node1", uuid="u1", ip="127.0.0.1")
        try:
            reports["body"] = signed(EVAC, 100)
            obs = (await poll([node]))["u1"]
            assert obs.data == EVAC and obs.error == ""
            assert asked == [ASKED]
            reports["body"] = signed(EVAC, 100)  # served again from mond's cache
            assert (await poll([node]))["u1"].data == EVAC
            reports["body"] = signed({"status": "Ok"}, 50)  # replay of an older report
            obs = (await poll([node]))["u1"]
            assert obs.data == EVAC and "replayed" in obs.error
            reports["body"] = signed({"status": "evacuate-failover"}, 200, b"forger")
            obs = (await poll([node]))["u1"]
            assert obs.data == EVAC and "forged" in obs.error
            reports["body"] = {**signed({"status": "evacuate-failover"}, 300),
                               "signature": None}
            assert "unsigned" in (await poll([node]))["u1"].error
            bad = {"status": "Ok", "command": "", "details": {"diagnose-error": "exit 3"}}
            reports["body"] = signed(bad, 300)
            obs = (await poll([node]))["u1"]
            assert obs.data == bad and obs.error == "exit 3"
            reports["body"] = STATUS  # an agent without the diagnose collector
            obs = (await poll([node]))["u1"]
            assert obs.data is None and obs.error == "mond has no node/diagnose report"
            reports["body"] = None
            obs = (await poll([node]))["u1"]
            assert obs.data is None and "500" in obs.error
            other = Node(name="node9", uuid="u9", ip="127.0.0.9")
            elsewhere = AgentPoller(port=port, timeout=0.5,
                                    address=lambda n: "127.0.0.1" if n.uuid == "u1" else
                                    "127.255.255.254")
            obs = (await poll([other], elsewhere))["u9"]
            assert obs.data is None and obs.error.startswith("unreachable")
            assert asked == [ASKED] * 8  # one request per poll
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.WARNING, "herder.maintd.sources"):
        asyncio.run(go())
    text = caplog.text
    assert "replayed" in text and "forged" in text and "unsigned" in text


def test_the_agents_answer_is_split_by_category_and_name() -> None:
    diag = signed(EVAC, 1)
    load = {"name": "cpu-avg-load", "category": None, "data": {}}
    split = split_reports([diag, STATUS, load, {"category": "node"}, "junk",
                           {**STATUS, "data": "a plugin's copy"}])
    assert split == {("node", "diagnose"): diag, ("instance", "inst-status"): STATUS,
                     ("default", "cpu-avg-load"): load}
    with pytest.raises(ValueError):
        split_reports({"error": "not a list"})


def test_replay_protection_survives_a_restart(tmp_path) -> None:
    from herder.maintd.daemon import Maintd
    from herder.maintd.state import FileState

    from .fakes import FakeCluster

    class Canned(DiagnoseSource):
        def __init__(self, report) -> None:
            super().__init__(lambda: KEY)
            self.report = report

        async def poll(self, nodes, agents):
            return {n.uuid: self.accept(n, self.report, KEY) for n in nodes if n.uuid == "u2"}

    store = FileState(tmp_path / "s.json")
    new = signed({"status": "Ok", "command": "", "details": {}}, 500)
    d = Maintd(FakeCluster(3), store, [Canned(new)])
    asyncio.run(d.tick())
    assert store.load().seen["u2"][0] == 500
    # after a restart, an older (captured) evacuate report is a replay: no incident
    old = signed(EVAC, 400)
    src = Canned(old)
    d2 = Maintd(FakeCluster(3), store, [src])
    asyncio.run(d2.tick())
    assert d2.state.incidents == [] and src.rejected == {"replayed": 1}
