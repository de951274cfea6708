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

An HTTP endpoint serves within `Limits` (docs/security.md "Limits"): connections counted per
source address and per endpoint, deadlines for a TLS handshake, a request's head and its body,
the body's size by the route's access rule (`Http`; issue 35).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import inspect
import logging
import os
import resource
import signal
import ssl
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from herder.core import access
from herder.core.errors import HerderError
from herder.core.pidfile import pid_file

T = TypeVar("T")
Task = Callable[[asyncio.Event], Coroutine[Any, Any, Any]]  # a background task
Hook = Callable[[], Any]  # a start/stop hook; may return an awaitable, which is awaited
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Limits:
    """What one client may hold of an HTTP endpoint (docs/security.md "Limits"); see `Http`."""

    header_timeout: float = 15.0  # s: a TLS handshake; a request's head from its first byte
    idle_timeout: float = 75.0  # s: a kept-alive connection between requests
    body_timeout: float = 60.0  # s: a request's whole body, once its head is in
    per_source: int = 64  # connections of one address at once
    pre_auth_body: int = 64 * 1024  # bytes of a body read before the caller is proven
    streamed: tuple[str, ...] = ()  # path prefixes whose handlers stream their bodies


# Where the caller is proven by the body, or not at all (the rest are proven by the request's
# head or the TLS handshake before any body is read: RAPI users, node RPC and its streams)
BODY_BEFORE_PROOF = frozenset({access.ANYONE, access.WEB_LOGIN, access.NODE_ANNOUNCE,
                               access.NODE_LEASE, access.NOTIFICATION, access.MOND_REPAIR,
                               access.JOIN_TOKEN})
OPEN_FILES = 65536  # the open files a daemon asks for (the units' LimitNOFILE)
FILES_KEPT = 256  # open files a daemon keeps for itself beyond its connections


def raise_open_files_limit(wanted: int = OPEN_FILES) -> int:
    """Raise this process's soft limit of open files towards `wanted` (as far as the hard
    limit allows: systemd's LimitNOFILE, a shell's ulimit); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


class Http:
    """An aiohttp application served on one or more listeners, within `limits`: a connection
    is counted against its address's `per_source` and the endpoint's cap (the open files less
    FILES_KEPT; over either it is closed at once), gets `header_timeout` for its TLS handshake,
    then for its first request's head and for each later head from its first byte (between
    requests it may idle `idle_timeout`: aiohttp's keep-alive timer), and `body_timeout` for a
    body, whose size is at most the app's `client_max_size`, or `pre_auth_body` when the
    route's rule (`routes`) proves the caller by the body or not at all (BODY_BEFORE_PROOF).
    Routes under `streamed` read their bodies themselves."""

    def __init__(self, app: Any, listeners: Sequence[Listener], *,
                 routes: access.Routes | None = None, limits: Limits = Limits()) -> None:
        self.app = app
        self.listeners = list(listeners)
        self.routes = routes
        self.limits = limits
        self.max_connections = 0  # set when opened, from the open files limit
        self._runner: Any = None
        self._servers: list[asyncio.Server] = []
        self._gates: set[_Gate] = set()
        self._per_source: collections.Counter[str] = collections.Counter()
        self.gate_of: weakref.WeakKeyDictionary[Any, _Gate] = weakref.WeakKeyDictionary()

    async def open(self) -> list[Address]:
        from aiohttp import web  # only daemons that serve HTTP pay for it

        self.app.middlewares.insert(0, requests_in_progress(self))  # outermost: every answer
        self.app.middlewares.append(body_limits(self))  # innermost: after the app's checks
        self.max_connections = max(16, raise_open_files_limit() - FILES_KEPT)
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                               keepalive_timeout=self.limits.idle_timeout)
        await runner.setup()
        self._runner = runner
        loop = asyncio.get_running_loop()
        bound: list[Address] = []
        for listener in self.listeners:
            try:
                server = await loop.create_server(
                    functools.partial(_Gate, self, listener.tls), listener.host,
                    listener.port, backlog=listener.backlog, reuse_address=True)
            except OSError as err:
                raise HerderError(f"cannot listen on {listener.host}:{listener.port}"
                                  f"{listener.what}: {os_reason(err)}") from None
            self._servers.append(server)
            bound.extend(Address(str(sock.getsockname()[0]), int(sock.getsockname()[1]),
                                 listener.tls is not None) for sock in server.sockets)
        return bound

    def admit(self, gate: _Gate) -> bool:
        """Count a new connection; False when its source or the endpoint is at its cap."""
        if self._per_source[gate.source] >= self.limits.per_source or \
                len(self._gates) >= self.max_connections:
            return False
        self._per_source[gate.source] += 1
        self._gates.add(gate)
        return True

    def release(self, gate: _Gate) -> None:
        if gate in self._gates:
            self._gates.discard(gate)
            self._per_source[gate.source] -= 1
            if self._per_source[gate.source] <= 0:
                del self._per_source[gate.source]

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for gate in list(self._gates):
            gate.abort_unserved()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()


class _Gate(asyncio.Protocol):
    """One accepted connection, before aiohttp's protocol has it: counted (`Http.admit`), its
    TLS handshake made within the header deadline, then handed over; every event of the
    connection is passed on to that protocol."""

    def __init__(self, endpoint: Http, tls: ssl.SSLContext | None) -> None:
        self.endpoint = endpoint
        self.tls = tls
        self.source = ""
        self.raw: asyncio.Transport | None = None
        self.inner: asyncio.Protocol | None = None
        # what came between the end of the TLS handshake and the hand-over (the handshake's
        # caller resumes a loop turn after TLS passed on the client's first bytes)
        self.early: list[bytes] = []
        self.early_eof = False
        # between requests (idle), or a request's head is on its way (its deadline running),
        # or a request is being answered (requests_in_progress says when)
        self.answering = False
        self.head_deadline: asyncio.TimerHandle | None = None
        self.handshake: asyncio.Task[None] | None = None  # held: the loop keeps weak references

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.raw = transport
        peer = transport.get_extra_info("peername")
        self.source = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self.endpoint.admit(self):
            transport.abort()
            return
        if self.tls is None:
            self._hand_over(transport)
        else:
            self.handshake = asyncio.get_running_loop().create_task(
                self._handshake(transport, self.tls))

    async def _handshake(self, transport: asyncio.Transport, tls: ssl.SSLContext) -> None:
        try:
            secured = await asyncio.get_running_loop().start_tls(
                transport, self, tls, server_side=True,
                ssl_handshake_timeout=self.endpoint.limits.header_timeout)
        except (OSError, ssl.SSLError, TimeoutError, RuntimeError):
            secured = None
        if secured is None:
            transport.abort()
            self.endpoint.release(self)
            return
        self._hand_over(secured)

    def _hand_over(self, transport: asyncio.Transport) -> None:
        assert self.endpoint._runner is not None
        inner: asyncio.Protocol = self.endpoint._runner.server()
        self.inner = inner
        self.endpoint.gate_of[transport] = self
        self._expect_head()  # the first request's head: from the connection on
        inner.connection_made(transport)
        for data in self.early:
            inner.data_received(data)
        self.early.clear()
        if self.early_eof:
            inner.eof_received()

    def _expect_head(self) -> None:
        if self.head_deadline is None:
            self.head_deadline = asyncio.get_running_loop().call_later(
                self.endpoint.limits.header_timeout, self._head_too_late)

    def _head_too_late(self) -> None:
        self.head_deadline = None
        if not self.answering and self.raw is not None:
            self.raw.abort()

    def request_began(self) -> None:
        self.answering = True
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def request_ended(self) -> None:
        self.answering = False

    def abort_unserved(self) -> None:
        """At close: a connection aiohttp does not have yet (a handshake) is dropped."""
        if self.inner is None and self.raw is not None:
            self.raw.abort()
            self.endpoint.release(self)

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            self.early.append(data)
            return
        if not self.answering:  # the first bytes of a request's head
            self._expect_head()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self.inner is None:
            self.early_eof = True
            return True  # keep the transport open until the hand-over
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.endpoint.release(self)
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None
        if self.inner is not None:
            self.inner.connection_lost(exc)


def requests_in_progress(endpoint: Http) -> Any:
    """The middleware telling a connection's gate when a request's head is in (its handling
    began: the head deadline ends) and when it was answered (idle again)."""
    from aiohttp import web

    @web.middleware
    async def in_progress(request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
        gate = endpoint.gate_of.get(request.transport)
        if gate is not None:
            gate.request_began()
        try:
            return await handler(request)
        finally:
            if gate is not None:
                gate.request_ended()

    return in_progress


def body_limits(endpoint: Http) -> Any:
    """The middleware reading each request's body within the endpoint's deadline and size
    (see `Http`): the handler finds it read (`request.read()`, `.json()`, `.post()`)."""
    from aiohttp import web

    limits = endpoint.limits

    @web.middleware
    async def read_body(request: web.Request,
                        handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                        ) -> web.StreamResponse:
        if not request.body_exists or request.path.startswith(limits.streamed):
            return await handler(request)
        handled = request.match_info.handler
        rule = endpoint.routes.rule(handled) if endpoint.routes is not None else None
        if rule is None or rule in BODY_BEFORE_PROOF:
            request = request.clone(client_max_size=limits.pre_auth_body)
        try:
            async with asyncio.timeout(limits.body_timeout):
                await request.read()
        except TimeoutError:
            raise web.HTTPRequestTimeout(text=f"the request's body did not come within "
                                              f"{limits.body_timeout:g} s") from None
        return await handler(request)

    return read_body


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
        def stop_on(sig: signal.Signals) -> None:
            # said in the log: a daemon that stops by a signal nobody meant to send it (a
            # stale pid's) shows why it went (CI: a masterd gone mid-answer, its log silent)
            if not stop.is_set():
                log.info("stopping: %s received", sig.name)
            stop.set()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop_on, sig)
        try:
            return await main(stop)
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)

    return asyncio.run(with_signals())
