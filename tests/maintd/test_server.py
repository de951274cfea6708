from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from aiohttp import web

from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance
from herder.maintd.server import make_app
from herder.maintd.state import FileState

from .fakes import FakeCluster, FakeSource

EVAC = {"status": "evacuate", "command": "", "details": {"disk": "sdb"}}


def test_routes(tmp_path: Path) -> None:
    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    src = FakeSource()
    src.data["u2"] = EVAC
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [src], interval=0.01)

    async def go() -> None:
        await d.tick()
        runner = web.AppRunner(make_app(d))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            async with httpx.AsyncClient(base_url=base) as c:
                assert (await c.get("/")).json() == [1]
                assert (await c.get("/1")).json() is None
                (inc,) = (await c.get("/1/status")).json()
                assert set(inc) >= {"uuid", "node", "original", "repair-status", "jobs", "tag",
                                    "ctime", "mtime", "action"}
                assert inc["node"] == "u2" and inc["original"] == EVAC
                assert inc["repair-status"] == "pending" and len(inc["jobs"]) == 1
                assert inc["tag"] == "maintd:repairready:" + inc["uuid"]
                assert (await c.get("/1/jobs")).json() == inc["jobs"]
                assert (await c.get("/1/evacuated")).json() == []
                reports = (await c.get("/1/reports")).json()
                assert {r["name"] for r in reports} == {"node1", "node2", "node3", "node4"}
                over = (await c.get("/1/overview")).json()
                assert over["incidents"][0]["uuid"] == inc["uuid"]
                page = await c.get("/status.html")
                assert page.status_code == 200 and "/1/overview" in page.text
                assert (await c.post("/1/cancel/nope")).status_code == 404
                r = await c.post(f"/1/cancel/{inc['uuid']}")
                assert r.json() == {"uuid": inc["uuid"], "repair-status": "canceled"}
                assert (await c.get("/1/status")).json()[0]["repair-status"] == "canceled"
                assert (await c.get("/nope")).status_code == 404
        finally:
            await runner.cleanup()

    asyncio.run(go())
    assert FileState(tmp_path / "s.json").load().incidents[0].repair_status == "canceled"


def test_cli_status_and_cancel(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from herder.cli.maintd import maintd

    from .fakes import Server

    cluster = FakeCluster(4)
    src = FakeSource()
    src.data["u3"] = EVAC
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [src])
    with Server(d) as server:
        server.call(d.tick())
        url = f"http://127.0.0.1:{server.port}"
        runner = CliRunner()
        out = runner.invoke(maintd, ["status", "--url", url])
        assert out.exit_code == 0, out.output
        inc = d.state.incidents[0]
        assert inc.uuid in out.output and "pending" in out.output
        out = runner.invoke(maintd, ["cancel", inc.uuid, "--url", url])
        assert out.exit_code == 0 and out.output.strip() == f"{inc.uuid}: canceled"
        out = runner.invoke(maintd, ["cancel", "nope", "--url", url])
        assert out.exit_code != 0 and "no incident nope" in str(out.exception or out.output)
        out = runner.invoke(maintd, ["status", "--json", "--url", url])
        assert '"repair-status": "canceled"' in out.output
