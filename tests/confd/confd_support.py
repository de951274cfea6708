"""Helpers for the confd tests: servers in a background event loop, raw UDP exchanges."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from herder.confd.server import ConfdProcessor, serve
from herder.core import model
from herder.core.store import ConfigCache, FileStore
from tests.conftest import build_config

KEY = b"0123456789abcdef0123456789abcdef01234567\n"


def has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


class Servers:
    """confd servers running in one background asyncio loop; `stop()` ends them all."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._stops: list[asyncio.Event] = []
        self._runs: list[concurrent.futures.Future[None]] = []

    def start(self, processor: ConfdProcessor,
              binds: list[tuple[str, int]] | None = None) -> list[tuple[str, int]]:
        """Serve `processor` on `binds` (default 127.0.0.1, any port); the bound addresses."""
        bound: list[tuple[str, int]] = []
        ready = threading.Event()

        async def run() -> None:
            stop = asyncio.Event()
            self._stops.append(stop)

            def on_ready(addrs: list[tuple[str, int]]) -> None:
                bound.extend(addrs)
                ready.set()

            try:
                await serve(processor, binds or [("127.0.0.1", 0)], stop=stop, ready=on_ready)
            finally:
                ready.set()

        self._runs.append(asyncio.run_coroutine_threadsafe(run(), self.loop))
        assert ready.wait(5), "confd server did not start"
        assert bound, "confd server failed to bind"
        return bound

    def stop(self) -> None:
        for stop in self._stops:
            self.loop.call_soon_threadsafe(stop.set)
        for run in self._runs:
            run.result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def write_config(directory: Path, config: model.ConfigData | None = None) -> Path:
    path = directory / "config.json"
    FileStore(path).create(config if config is not None else build_config())
    (directory / "hmac.key").write_bytes(KEY)
    return path


def file_processor(path: Path, key: bytes = KEY, **kwargs: object) -> ConfdProcessor:
    cache = ConfigCache(path)
    return ConfdProcessor(cache, key, error_source=lambda: cache.error, **kwargs)  # type: ignore[arg-type]


def static_processor(config: model.ConfigData | None, key: bytes = KEY,
                     **kwargs: object) -> ConfdProcessor:
    source: Callable[[], model.ConfigData | None] = lambda: config  # noqa: E731
    return ConfdProcessor(source, key, **kwargs)  # type: ignore[arg-type]


def exchange(packet: bytes, addr: tuple[str, int], timeout: float = 0.5) -> bytes | None:
    """Send one datagram; the reply, or None when none comes within `timeout`."""
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, addr)
        try:
            return sock.recvfrom(65536)[0]
        except TimeoutError:
            return None
