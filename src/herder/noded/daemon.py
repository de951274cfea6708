"""Starting noded: lock its memory, log even when the disk is broken, serve over TLS."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import ssl
import sys
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from herder.core.errors import HerderError
from herder.core.store import atomic_write
from herder.noded.server import NodeDaemon, keep_hypervisor, make_app

log = logging.getLogger("herder.noded")
MCL_CURRENT, MCL_FUTURE = 1, 2


def lock_memory() -> bool:
    """mlockall(MCL_CURRENT|MCL_FUTURE) (design-2.1 "Node daemon availability"): noded stays in
    RAM, so a node with a failing system disk can still be power-cycled."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
        log.warning("mlockall failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


class FallbackFileHandler(logging.Handler):
    """Log to a file; when it cannot be written, to the console (design-2.1)."""

    def __init__(self, path: Path, console: str = "/dev/console") -> None:
        super().__init__()
        self.path = path
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record) + "\n"
        try:
            with open(self.path, "a") as fh:
                fh.write(line)
            return
        except OSError:
            pass
        for target in (self.console, "/dev/stderr"):
            try:
                with open(target, "a") as fh:
                    fh.write(line)
                return
            except OSError:
                continue


def setup_logging(log_file: Path | None, debug: bool) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        handlers.append(FallbackFileHandler(log_file))
    fmt = logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
    for handler in handlers:
        handler.setFormatter(fmt)
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, handlers=handlers,
                        force=True)


async def serve(daemon: NodeDaemon, host: str, port: int, certificate: Path | None, *,
                ready: Callable[[int], None] | None = None,
                stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    context = None
    if certificate is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(certificate)
        except (OSError, ssl.SSLError) as err:
            raise HerderError(f"cannot load the cluster certificate {certificate}: {err}") \
                from None
    runner = web.AppRunner(make_app(daemon), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context, reuse_address=True)
    pid_file = daemon.settings.run_dir / "noded.pid"
    watcher = asyncio.create_task(keep_hypervisor(daemon, stop))
    try:
        await site.start()
        bound = port
        server = site._server  # aiohttp exposes the bound sockets only here
        if server is not None and getattr(server, "sockets", None):
            bound = server.sockets[0].getsockname()[1]
        atomic_write(pid_file, f"{os.getpid()}\n".encode(), 0o644)
        if ready is not None:
            ready(bound)
        await stop.wait()
    finally:
        stop.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await runner.cleanup()
        daemon.hv.close()
        with contextlib.suppress(OSError):
            pid_file.unlink()
