"""core.serve: listeners (plain and TLS) on real loopback sockets, the pid file, background
tasks, hooks, the ready callback, one-line bind errors and the stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from herder.core import serve
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.errors import HerderError


def hello_app() -> web.Application:
    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"secure": request.secure})

    app = web.Application()
    app.router.add_get("/", hello)
    return app


def test_two_listeners_pid_file_tasks_hooks_and_stop(tmp_path: Path) -> None:
    pem = tmp_path / "server.pem"
    pem.write_bytes(self_signed_certificate("serve.test"))
    run_dir = tmp_path / "run"
    events: list[str] = []

    async def task(stop: asyncio.Event) -> None:
        events.append("task started")
        try:
            await asyncio.Event().wait()  # runs until cancelled
        finally:
            events.append(f"task cancelled, stop set: {stop.is_set()}")

    async def last_hook() -> None:
        await asyncio.sleep(0)
        events.append("stop 2")

    async def go() -> list[serve.Address]:
        stop = asyncio.Event()
        bound: list[serve.Address] = []

        def ready(addresses: list[serve.Address]) -> None:
            events.append("ready")
            bound.extend(addresses)
            assert int((run_dir / "test.pid").read_text()) == os.getpid()
            asyncio.get_running_loop().create_task(check_then_stop())

        async def check_then_stop() -> None:
            plain, secure = bound
            async with httpx.AsyncClient() as client:
                answer = await client.get(f"http://127.0.0.1:{plain.port}/")
                assert answer.json() == {"secure": False}
            context = ssl.create_default_context(cafile=str(pem))
            context.check_hostname = False
            async with httpx.AsyncClient(verify=context) as client:
                answer = await client.get(f"https://127.0.0.1:{secure.port}/")
                assert answer.json() == {"secure": True}
            stop.set()

        await serve.serve(
            "test", run_dir,
            endpoints=[serve.Http(hello_app(), [
                serve.Listener("127.0.0.1", 0),
                serve.Listener("127.0.0.1", 0, tls=serve.server_tls(pem))])],
            tasks=[task], on_start=[lambda: events.append("start")],
            on_stop=[lambda: events.append("stop 1"), last_hook],
            ready=ready, stop=stop)
        return bound

    plain, secure = asyncio.run(go())
    assert not plain.secure and secure.secure and 0 not in (plain.port, secure.port)
    assert str(plain) == f"127.0.0.1:{plain.port}"
    assert events == ["start", "ready", "task started", "task cancelled, stop set: True",
                      "stop 1", "stop 2"]
    assert not (run_dir / "test.pid").exists()


def test_a_busy_port_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    stopped: list[bool] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def go() -> None:
            await serve.serve("busy", tmp_path, endpoints=[serve.Http(hello_app(), [
                serve.Listener("127.0.0.1", port, what=" (--test-port)")])],
                on_stop=[lambda: stopped.append(True)], ready=lambda bound: None)

        with pytest.raises(HerderError) as err:
            asyncio.run(go())
    assert str(err.value) == (f"cannot listen on 127.0.0.1:{port} (--test-port): "
                              "Address already in use")
    assert stopped == [True] and not (tmp_path / "busy.pid").exists()


def test_an_unloadable_certificate_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "server.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(HerderError) as err:
        serve.server_tls(bad, purpose=" for the test port", hint=" (a hint)")
    text = str(err.value)
    assert text.startswith(f"cannot load the cluster certificate {bad} for the test port: ")
    assert text.endswith(" (a hint)") and "\n" not in text


def test_sigterm_stops_a_daemon_and_run_returns_its_result(tmp_path: Path) -> None:
    async def main(stop: asyncio.Event) -> str:
        await serve.serve("signalled", tmp_path, ready=lambda bound: os.kill(
            os.getpid(), signal.SIGTERM), stop=stop)
        return "stopped"

    assert serve.run(main) == "stopped"
    assert not (tmp_path / "signalled.pid").exists()
    # the handlers are gone again: the default action is back for the rest of the process
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.default_int_handler)
