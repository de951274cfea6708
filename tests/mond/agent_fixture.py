"""Run a real mond (agent + HTTP server on 127.0.0.1, any free port) in a background thread."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from herder.mond.agent import Agent
from herder.mond.collector import CollectContext, Collector
from herder.mond.server import serve


@dataclass
class Running:
    url: str
    agent: Agent

    def get(self, path: str) -> tuple[int, Any, str]:
        """(status, decoded JSON or text, content type)"""
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as resp:
                body, code, ctype = resp.read(), resp.status, resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            body, code, ctype = err.read(), err.code, err.headers.get("Content-Type", "")
        text = body.decode()
        return code, (json.loads(text) if "json" in ctype else text), ctype

    def request(self, method: str, path: str) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def wait_for(self, predicate, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.02)
        raise AssertionError("condition not reached in time")


@contextmanager
def running_mond(ctx: CollectContext, collectors: Mapping[str, type[Collector]] | None = None
                 ) -> Iterator[Running]:
    agent = Agent(ctx, collectors=collectors)
    ready = threading.Event()
    port: list[int] = []
    loop_box: list[asyncio.AbstractEventLoop] = []
    stop_box: list[asyncio.Event] = []

    async def main() -> None:
        stop = asyncio.Event()
        stop_box.append(stop)
        loop_box.append(asyncio.get_running_loop())
        await serve(agent, "127.0.0.1", 0, ready=lambda p: (port.append(p), ready.set()),
                    stop=stop)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10), "mond did not start"
    try:
        yield Running(f"http://127.0.0.1:{port[0]}", agent)
    finally:
        loop_box[0].call_soon_threadsafe(stop_box[0].set)
        thread.join(10)
