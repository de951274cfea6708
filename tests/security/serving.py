"""Serve an aiohttp application of a daemon in a background thread (plain HTTP, and HTTPS
when given a TLS context), and walk its router: the requests tests/security sends to every
route."""

from __future__ import annotations

import asyncio
import re
import ssl
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from herder.core import access

# Values tried for a route's placeholders, in order (the first its pattern takes).
SAMPLES: Mapping[str, tuple[str, ...]] = {
    "kind": ("nodes", "instances", "groups", "networks"),
    "job_id": ("1",),
    "uuid": ("00000000-0000-4000-8000-000000000000",),
}
DEFAULT_SAMPLE = ("node1.example.com", "x")


@dataclass
class Served:
    plain: str
    secure: str | None
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)


@contextmanager
def serving(app: web.Application, tls: ssl.SSLContext | None = None) -> Iterator[Served]:
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        if tls is not None:
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start())
        box["runner"] = runner
        box["ports"] = [address[1] for address in runner.addresses]
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30)
    ports = box["ports"]
    served = Served(f"http://127.0.0.1:{ports[0]}",
                    f"https://127.0.0.1:{ports[1]}" if tls is not None else None, loop)
    try:
        yield served
    finally:
        served.call(box["runner"].cleanup())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@dataclass(frozen=True)
class Route:
    method: str  # "*": any
    canonical: str
    path: str  # a concrete path this route answers
    rule: access.Rule | None

    def __str__(self) -> str:
        return f"{self.method} {self.canonical}"


def _concrete(resource: Any) -> str:
    info = resource.get_info()
    if "path" in info:
        return str(info["path"])
    pattern, formatter = info["pattern"], info["formatter"]
    names = re.findall(r"\{(\w+)\}", formatter)
    choices: list[dict[str, str]] = [{}]
    for name in names:
        choices = [{**c, name: value} for c in choices
                   for value in SAMPLES.get(name, DEFAULT_SAMPLE)]
    for values in choices:
        path = formatter.format(**values)
        if pattern.fullmatch(path):
            return path
    raise AssertionError(f"no sample path for {formatter}")


def routes(app: web.Application, table: access.Routes) -> list[Route]:
    """Every route of `app` with a concrete path that resolves to it, and its declared rule."""
    found = []
    for route in app.router.routes():
        if route.method == "HEAD":
            continue  # GET's twin (same handler)
        path = _concrete(route.resource)
        found.append(Route(route.method, route.resource.canonical, path,
                           table.rule(route.handler)))
    return found


async def resolves_to(app: web.Application, method: str, path: str) -> str:
    """"METHOD canonical" of the route `method path` reaches in `app`."""
    info = await app.router.resolve(make_mocked_request(method, path, app=app))
    route = info.route
    return f"{route.method} {route.resource.canonical if route.resource else '?'}"
