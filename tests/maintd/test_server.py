from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

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
                # the same in Prometheus text (parsed by prometheus-client's own parser)
                scraped = await c.get("/metrics")
                assert scraped.status_code == 200
                assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
                samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                           for family in text_string_to_metric_families(scraped.text)
                           for s in family.samples}
                assert samples[("herder_maintd_incidents", (("status", "pending"),))] == 1
                assert samples[("herder_maintd_incidents", (("status", "failed"),))] == 0
                assert samples[("herder_maintd_jobs", ())] == len(inc["jobs"])
                assert samples[("herder_maintd_reporting_nodes", ())] == 4
                assert samples[("process_open_fds", ())] > 0
                page = await c.get("/status.html")
                assert page.status_code == 200 and "/1/overview" in page.text
                # the plain port serves reads only: a cancel is refused, nothing changes
                r = await c.post(f"/1/cancel/{inc['uuid']}")
                assert r.status_code == 403 and "plain HTTP" in r.json()["message"]
                assert (await c.get("/1/status")).json()[0]["repair-status"] == "pending"
                assert (await c.get("/nope")).status_code == 404
        finally:
            await runner.cleanup()

    asyncio.run(go())
    assert FileState(tmp_path / "s.json").load().incidents[0].repair_status == "pending"


def test_cancel_needs_https_and_a_write_user(tmp_path: Path) -> None:
    """Issue 18: maintd's cancel was open to anyone on the plain port. Now: only over HTTPS,
    only a RAPI user with the write option; every refusal leaves the incident as it was."""
    from .fakes import READER, WRITER, Server

    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    src = FakeSource()
    src.data["u2"] = EVAC
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [src], interval=0.01)
    with Server(d, secrets=tmp_path) as server:
        server.call(d.tick())
        (inc,) = d.state.incidents
        plain = f"http://127.0.0.1:{server.port}/1/cancel/{inc.uuid}"
        secure = f"https://127.0.0.1:{server.https_port}/1/cancel/{inc.uuid}"
        verify = ssl.create_default_context(cafile=str(server.certificate))
        verify.check_hostname = False  # the cluster certificate names the cluster
        for url, auth, status in [(plain, None, 403), (plain, WRITER, 403),
                                  (secure, None, 401), (secure, ("admin", "wrong"), 401),
                                  (secure, READER, 403)]:
            r = httpx.post(url, auth=auth, verify=verify)
            assert r.status_code == status, (url, auth, r.text)
            assert inc.repair_status == "pending"
        assert httpx.post(secure, verify=verify).headers["WWW-Authenticate"].startswith("Basic")
        nope = f"https://127.0.0.1:{server.https_port}/1/cancel/nope"
        assert httpx.post(nope, auth=WRITER, verify=verify).status_code == 404
        r = httpx.post(secure, auth=WRITER, verify=verify)
        assert r.json() == {"uuid": inc.uuid, "repair-status": "canceled"}
    assert FileState(tmp_path / "s.json").load().incidents[0].repair_status == "canceled"


def test_cli_status_and_cancel(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from herder.cli.main import cli
    from herder.cli.maintd import maintd

    from .fakes import Server

    cluster = FakeCluster(4)
    src = FakeSource()
    src.data["u3"] = EVAC
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [src])
    secrets = tmp_path / "cluster"
    secrets.mkdir()
    with Server(d, secrets=secrets) as server:
        server.call(d.tick())
        url = f"http://127.0.0.1:{server.port}"
        https = f"https://127.0.0.1:{server.https_port}"
        runner = CliRunner()
        out = runner.invoke(maintd, ["status", "--url", url])
        assert out.exit_code == 0, out.output
        inc = d.state.incidents[0]
        assert inc.uuid in out.output and "pending" in out.output
        # the credentials of the cluster's rapi_users (its first write user), over HTTPS
        config = ["--config", str(secrets / "config.json")]
        out = runner.invoke(cli, [*config, "maintd", "cancel", inc.uuid, "--url", https])
        assert out.exit_code == 0 and out.output.strip() == f"{inc.uuid}: canceled", out.output
        out = runner.invoke(cli, [*config, "maintd", "cancel", "nope", "--url", https])
        assert out.exit_code != 0 and "no incident nope" in str(out.exception or out.output)
        out = runner.invoke(cli, [*config, "maintd", "cancel", "nope", "--url", https,
                                   "--rapi-user", "viewer"])
        assert out.exit_code != 0 and "may not make changes" in str(out.exception or out.output)
        out = runner.invoke(maintd, ["status", "--json", "--url", url])
        assert '"repair-status": "canceled"' in out.output


def test_maintd_status_names_nodes_and_says_whether_node_recovery_is_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`herder maintd status` shows node names (an incident's node is a UUID) and the state
    of dead-node handling: here off by the cluster's switch (maintenance nodeRecovery)."""
    from herder.cli.main import main
    from herder.maintd import nodefail

    from .test_nodefail import LeaseCluster

    cluster = FakeCluster(4, [Instance("a", "node2", ("node3",))])
    src = FakeSource()
    src.data["u2"] = EVAC
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [src], interval=0.01)
    d.node_failures = nodefail.NodeFailures(LeaseCluster(recovery=False))

    async def go() -> int:
        await d.tick()
        assert d.node_failures is not None
        await d.node_failures.tick([])
        runner = web.AppRunner(make_app(d))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            return await asyncio.to_thread(main, [
                "maintd", "status", "--url", f"http://127.0.0.1:{runner.addresses[0][1]}"])
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) == 0
    out = capsys.readouterr().out
    (line,) = [row for row in out.splitlines() if "evacuate" in row or "pending" in row]
    assert "  node2  " in f"  {line.split()[1]}  "
    assert "node failures: off (cluster setting nodeRecovery)" in out
