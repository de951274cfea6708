"""Running a daemon: listen, optional TLS, background tasks, the pid file, the ready line, and a
graceful stop on SIGTERM/SIGINT. Every herder daemon runs through here (masterd, noded, mond,
maintd, confd, instmon); a test checks that no other module creates aiohttp runners or sites or
writes pid files.

    serve.run(lambda stop: serve.serve("mond", run_dir, endpoints=[serve.Http(app, [
        serve.Listener(host, port)])], tasks=[agent.run], on_stop=[agent.close],
        ready=lambda bound: print(f"... listening on http://{host}:{bound[0].port}/"), stop=stop))

`run` is the process's event loop: SIGTERM and SIGINT set the stop event `main` gets (installed
before `main` starts, so a daemon that waits before it serves, as masterd's standby, stops too).

`serve` does, in order: the `on_start` hooks; opens every endpoint (an HTTP application on one
or more listeners, each with its own TLS context, or a component's own transport such as confd's
UDP sockets); writes `<run_dir>/<name>.pid` (`core.pidfile`); starts the background tasks (each
gets the stop event); calls `ready` with the bound addresses; waits for the stop event. Then it
cancels the tasks, closes the endpoints, runs the `on_stop` hooks (in order; also when starting
failed after the `on_start` hooks began) and removes the pid file. A listener that cannot bind
is one `HerderError` line: "cannot listen on HOST:PORT: REASON".
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import ssl
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from herder.core.errors import HerderError
from herder.core.pidfile import pid_file

T = TypeVar("T")
Task = Callable[[asyncio.Event], Coroutine[Any, Any, Any]]  # a background task
Hook = Callable[[], Any]  # a start/stop hook; may return an awaitable, which is awaited
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True)
class Address:
    """A bound address: what `ready` gets (the port is the real one when 0 was asked for)."""

    host: str
    port: int
    secure: bool = False  # TLS

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Listener:
    """One TCP listener of an HTTP endpoint."""

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    backlog: int = 128
    what: str = ""  # added to the error's "cannot listen on HOST:PORT", e.g. " (--notify-port)"


class Endpoint(Protocol):
    """Something a daemon listens with: opened before the daemon is ready, closed at stop."""

    async def open(self) -> list[Address]: ...

    async def close(self) -> None: ...


def server_tls(certificate: Path, *, purpose: str = "", hint: str = "",
               client_cas: Sequence[Path] = (), clients_optional: bool = False
               ) -> ssl.SSLContext:
    """A TLS server context with the key and certificate in one PEM file (the cluster's
    server.pem); a file that cannot be loaded is one line: "cannot load the cluster certificate
    PATH{purpose}: REASON{hint}". With `client_cas`, every client must show a certificate
    issued by one of them (a self-signed CA certificate, such as the cluster's, accepts
    itself): the handshake fails otherwise; with `clients_optional` a client may also show
    none (the handler decides), but never another one."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certificate)
    except (OSError, ssl.SSLError) as err:
        raise HerderError(f"cannot load the cluster certificate {certificate}{purpose}: "
                          f"{err}{hint}") from None
    for authority in client_cas:
        try:
            context.load_verify_locations(cafile=str(authority))
        except (OSError, ssl.SSLError) as err:
            raise HerderError(f"cannot load the client certificate authority {authority}"
                              f"{purpose}: {err}{hint}") from None
    if client_cas:
        context.verify_mode = ssl.CERT_OPTIONAL if clients_optional else ssl.CERT_REQUIRED
    return context


class Http:
    """An aiohttp application served on one or more listeners (one runner, a site each)."""

    def __init__(self, app: Any, listeners: Sequence[Listener]) -> None:
        self.app = app
        self.listeners = list(listeners)
        self._runner: Any = None

    async def open(self) -> list[Address]:
        from aiohttp import web  # only daemons that serve HTTP pay for it

        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        bound: list[Address] = []
        for listener in self.listeners:
            site = web.TCPSite(runner, listener.host, listener.port, ssl_context=listener.tls,
                               backlog=listener.backlog, reuse_address=True)
            known = len(runner.addresses)
            try:
                await site.start()
            except OSError as err:
                raise HerderError(f"cannot listen on {listener.host}:{listener.port}"
                                  f"{listener.what}: {os_reason(err)}") from None
            # runner.addresses lists every site's sockets in start order: this site's are new
            bound.extend(Address(str(sockname[0]), int(sockname[1]), listener.tls is not None)
                         for sockname in runner.addresses[known:])
        return bound

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def os_reason(err: OSError) -> str:
    """An OSError's reason in the system's words ("Address already in use"; asyncio wraps it
    in a longer sentence), or a resolver's ("Name or service not known")."""
    if isinstance(err.errno, int) and err.errno > 0:
        return os.strerror(err.errno)
    return err.strerror or str(err)


async def _call(hook: Hook) -> None:
    result = hook()
    if inspect.isawaitable(result):
        await result


async def serve(name: str, run_dir: Path | None, *, endpoints: Sequence[Endpoint] = (),
                tasks: Sequence[Task] = (), on_start: Sequence[Hook] = (),
                on_stop: Sequence[Hook] = (),
                ready: Callable[[list[Address]], None] | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Run daemon `name` until `stop` is set (or the task is cancelled). `run_dir` None: no pid
    file (tests that run a daemon's server in-process)."""
    stop = stop or asyncio.Event()
    running: list[asyncio.Task[Any]] = []
    opened: list[Endpoint] = []
    pid = contextlib.ExitStack()
    async with contextlib.AsyncExitStack() as cleanup:
        cleanup.callback(pid.close)  # the pid file goes last: the daemon runs until then
        for hook in reversed(on_stop):  # in their order, after the endpoints are closed
            cleanup.push_async_callback(_call, hook)
        for hook in on_start:
            await _call(hook)

        async def close_endpoints() -> None:
            for endpoint in reversed(opened):
                await endpoint.close()

        cleanup.push_async_callback(close_endpoints)
        bound: list[Address] = []
        for endpoint in endpoints:
            opened.append(endpoint)
            bound.extend(await endpoint.open())
        if run_dir is not None:
            pid.enter_context(pid_file(run_dir, name))

        async def stop_tasks() -> None:
            stop.set()
            for task in running:
                task.cancel()
            for task in running:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        cleanup.push_async_callback(stop_tasks)
        running.extend(asyncio.create_task(task(stop)) for task in tasks)
        if ready is not None:
            ready(bound)
        await stop.wait()


def run(main: Callable[[asyncio.Event], Coroutine[Any, Any, T]]) -> T:
    """Run a daemon's `main(stop)` in a new event loop; SIGTERM and SIGINT set `stop`."""

    async def with_signals() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        try:
            return await main(stop)
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    return asyncio.run(with_signals())
