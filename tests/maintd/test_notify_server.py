"""`POST /1/notifications` over real HTTP and HTTPS on 127.0.0.1: masakari's answers (400,
401, 202 then 409), the plain port's 403, the list of notifications, and the CLI's checks."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from herder.core import notification
from herder.core.cluster_secrets import self_signed_certificate
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance
from herder.maintd.server import NotifySettings, make_app
from herder.maintd.state import FileState

from .fakes import FakeCluster, FakeSource

KEY = b"k" * 32
U_A = "11111111-1111-4111-8111-111111111111"
GOOD = notification.vm_notification("node2", U_A, "LIFECYCLE", "STOPPED_FAILED").to_body()


@dataclass
class Endpoints:
    plain: str
    https: str
    daemon: Maintd
    cluster: FakeCluster


@asynccontextmanager
async def serve(tmp_path: Path, insecure: bool = False,
                key: bytes | None = KEY) -> AsyncIterator[Endpoints]:
    cluster = FakeCluster(4, [Instance("a", "node2", uuid=U_A, disk_template="sharedfile")])
    d = Maintd(cluster, FileState(tmp_path / "s.json"), [FakeSource()], interval=0.01,
               watcher=False)
    cert = tmp_path / "server.pem"
    cert.write_bytes(self_signed_certificate("127.0.0.1"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert)
    settings = NotifySettings(lambda: key, insecure=insecure)
    runner = web.AppRunner(make_app(d, settings))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    plain, https = runner.addresses[0][1], runner.addresses[1][1]
    settings.https_port = https
    try:
        yield Endpoints(f"http://127.0.0.1:{plain}", f"https://127.0.0.1:{https}", d, cluster)
    finally:
        await runner.cleanup()


def headers(key: bytes = KEY) -> dict[str, str]:
    return {notification.TOKEN_HEADER: notification.token_for(key)}


BAD_BODIES: list[Any] = [
    b"not json",
    [],
    {},
    {"notification": GOOD["notification"], "extra": 1},
    {"notification": {**GOOD["notification"], "type": "VMS"}},
    {"notification": {**GOOD["notification"], "hostname": "bad host!"}},
    {"notification": {**GOOD["notification"], "generated_time": "yesterday"}},
    {"notification": {k: v for k, v in GOOD["notification"].items() if k != "payload"}},
    {"notification": {**GOOD["notification"], "payload": {
        "event": "LIFECYCLE", "instance_uuid": "not-a-uuid", "vir_domain_event": "X"}}},
    {"notification": {**GOOD["notification"], "payload": {
        "event": "LIFECYCLE", "instance_uuid": U_A}}},
    {"notification": {**GOOD["notification"], "payload": {
        "event": "", "instance_uuid": U_A, "vir_domain_event": "X"}}},
    {"notification": {**GOOD["notification"], "id": 3}},
]


def test_https_route_answers_like_masakari(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as ep, httpx.AsyncClient(base_url=ep.https,
                                                            verify=False) as c:
            for body in BAD_BODIES:
                kw = {"content": body} if isinstance(body, bytes) else {"json": body}
                r = await c.post("/1/notifications", headers=headers(), **kw)
                assert r.status_code == 400, (body, r.text)
                assert r.json()["error"] == "bad request" and r.json()["message"]
            r = await c.post("/1/notifications", json=GOOD)
            assert r.status_code == 401 and notification.TOKEN_HEADER in r.json()["message"]
            r = await c.post("/1/notifications", json=GOOD, headers=headers(b"x" * 32))
            assert r.status_code == 401 and "wrong" in r.json()["message"]
            r = await c.post("/1/notifications", json=GOOD, headers=headers())
            assert r.status_code == 202, r.text
            answer = r.json()["notification"]
            assert answer["status"] == "new" and answer["kind"] == "crash"
            assert answer["payload"] == GOOD["notification"]["payload"]
            assert len(answer["notification_uuid"]) == 36 and answer["incident"]
            r = await c.post("/1/notifications", json=GOOD, headers=headers())
            assert r.status_code == 409
            assert r.json() == {"error": "conflict", "message": "duplicate notification"}
            started = notification.vm_notification("node2", U_A, "LIFECYCLE",
                                                   "STARTED_BOOTED").to_body()
            r = await c.post("/1/notifications", json=started, headers=headers())
            assert r.status_code == 202 and r.json()["notification"]["status"] == "ignored"
            listed = (await c.get("/1/notifications")).json()
            assert [n["status"] for n in listed] == ["new", "ignored"]
            over = (await c.get("/1/overview")).json()
            assert over["notifications"] == listed
            (inc,) = (await c.get("/1/status")).json()
            assert inc["instance"] == U_A and inc["action"] == "restart"
            assert inc["uuid"] == answer["incident"]
            # the daemon was woken: a tick now submits the restart
            assert ep.daemon._wake.is_set()
            await ep.daemon.tick()
            assert ep.cluster.submitted[0][1][0]["OP_ID"] == "OP_INSTANCE_STARTUP"

    asyncio.run(go())


def test_plain_port_refuses_unless_insecure(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as ep, httpx.AsyncClient(base_url=ep.plain) as c:
            r = await c.post("/1/notifications", json=GOOD, headers=headers())
            port = ep.https.rsplit(":", 1)[1]
            assert r.status_code == 403 and f"use the HTTPS port {port}" in r.json()["message"]
            assert (await c.get("/1/notifications")).json() == []  # GETs stay open
        async with serve(tmp_path / "b", insecure=True) as ep, \
                httpx.AsyncClient(base_url=ep.plain) as c:
            r = await c.post("/1/notifications", json=GOOD, headers=headers())
            assert r.status_code == 202

    (tmp_path / "b").mkdir()
    asyncio.run(go())


def test_no_key_is_503_and_the_sender_retries(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path, key=None) as ep, \
                httpx.AsyncClient(base_url=ep.https, verify=False) as c:
            r = await c.post("/1/notifications", json=GOOD, headers=headers())
            assert r.status_code == 503

    asyncio.run(go())


def test_instmon_style_sender_verifying_the_cluster_certificate(tmp_path: Path) -> None:
    """A sender trusting only the cluster certificate gets through."""
    async def go() -> None:
        async with serve(tmp_path) as ep:
            ctx = ssl.create_default_context(cafile=str(tmp_path / "server.pem"))
            ctx.check_hostname = False
            async with httpx.AsyncClient(base_url=ep.https, verify=ctx) as c:
                r = await c.post("/1/notifications", content=notification.parse(GOOD).to_json(),
                                 headers={**headers(), "Content-Type": "application/json"})
                assert r.status_code == 202

    asyncio.run(go())


@pytest.mark.parametrize(("table", "message"), [
    ('[failures]\n"LIFECYCLE.STOPPED_FAILED" = "explode"\n',
     'failures."LIFECYCLE.STOPPED_FAILED": \'explode\': the kind must be one of crash, io-error'),
    ('[failures]\n"LIFECYCLE" = "crash"\n', "key 'LIFECYCLE' is not EVENT.VIR_DOMAIN_EVENT"),
    ('replace = "yes"\n', "replace: expected `bool`, got `str`"),
    ('replaced = true\n',
         "unknown key 'replaced' (known: replace, failures, actions, hung_polls)"),
    ('failures = 3\n', "failures: expected `table`, got `int`"),
    ('[failures]\n"IO_ERROR.IO_ERROR_REPORT" = 1\n',
     "failures[...]: expected `str`, got `int`"),
    ('[failures\n', "not valid TOML"),
])
def test_cli_refuses_a_bad_failure_table(tmp_path: Path, table: str, message: str) -> None:
    """One line on stderr, exit code 1, before maintd asks anything or starts anything."""
    bad = tmp_path / "failures.toml"
    bad.write_text(table)
    run = tmp_path / "run"
    env = {**os.environ, "HERDER_CONFIG": str(tmp_path / "no-cluster" / "config.json")}
    done = subprocess.run([sys.executable, "-m", "herder.cli.main", "maintd", "--failure-table",
                           str(bad), "--run-dir", str(run), "--port", "0"],
                          capture_output=True, text=True, env=env, timeout=60)
    err = done.stderr.strip()
    assert done.returncode == 1, err
    assert err.startswith(f"herder: error: the failure table {bad}: ") and message in err, err
    assert "\n" not in err and not run.exists()


def test_cli_refuses_a_missing_failure_table(tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    from herder.cli.main import main

    assert main(["maintd", "--failure-table", str(tmp_path / "missing.toml")]) == 1
    err = capsys.readouterr().err.strip()
    assert "cannot read the failure table" in err and "\n" not in err


def test_cli_help_names_the_notification_options() -> None:
    from click.testing import CliRunner

    from herder.cli.maintd import maintd

    out = CliRunner().invoke(maintd, ["--help"])
    for word in ("--notify-port", "--notify-insecure", "--failure-table", "--failure-window",
                 "/1/notifications", "1817"):
        assert word in out.output
