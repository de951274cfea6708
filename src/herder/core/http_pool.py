"""Kept-alive HTTP(S) connections to one server over the standard library's `http.client`.

The RAPI client's transport. Why not httpx, as the daemons' other clients: the CLI is a short
process and its client is on every command's path; importing httpx costs it ~0.1 s (it pulls
in `urllib.request`, `http.cookiejar`, ...) and reading a 2 MB answer through it another
~0.04 s, a third of `herder instance list` at 10,000 instances (docs/scale.md). What the RAPI
client needs is small: one origin, TLS with a given context, a body on any method, per-call
timeouts, and connections kept between calls and shared by threads.

A kept connection the server has closed meanwhile is noticed before it is used (its socket
reads as ready: the end of the stream) and replaced. A request that still fails on a kept
connection before any answer came is sent again on a new one only when it is a GET (a POST
might have reached the server: sending it twice could start two jobs).

A new connection that the server refuses, or cuts during the TLS handshake, is tried again for
up to `connect_retry` seconds, whatever the method: no request was sent on it yet, and that is
what a client sees for the few seconds a server restarts (masterd after a crash, a failover or
`renew-crypto`; a port forwarder in front of it whose target does not listen yet). A connect
that times out is not tried again (the host is gone; its timeout was the wait), nor is a
certificate that is not trusted.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
IDEMPOTENT = frozenset({"GET", "HEAD"})
KEPT_IDLE = 4  # idle connections kept for reuse; more are closed when given back
CONNECT_RETRY = 6.0  # seconds a refused or cut new connection is tried again (a restart)
# refused; reset or ended in the TLS handshake (a forwarder whose target refused)
TRANSIENT_CONNECT = (ConnectionRefusedError, ConnectionResetError, ssl.SSLEOFError)


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    content_type: str
    content: bytes


class ConnectionPool:
    """Connections to the origin of `base_url` (scheme, host, port; a path in it prefixes every
    request's target). `tls`: the context for https (None: the system's default context)."""

    def __init__(self, base_url: str, tls: ssl.SSLContext | None = None, *,
                 connect_retry: float = CONNECT_RETRY) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or DEFAULT_PORTS[parts.scheme]
        self.prefix = parts.path.rstrip("/")
        self._tls = tls if tls is not None or parts.scheme == "http" else \
            ssl.create_default_context()
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False
        self.connect_retry = connect_retry

    def send(self, method: str, target: str, body: bytes | None, headers: dict[str, str],
             timeout: float) -> Answer:
        """Send one request (`target`: path and query, below the prefix) and read its whole
        answer. Raises OSError (refused, reset, timed out, TLS) or http.client.HTTPException
        (a malformed or missing answer)."""
        while True:
            connection, kept = self._take(timeout)
            if not kept:
                self._connect(connection)
            try:
                connection.request(method, self.prefix + target, body=body, headers=headers)
                response = connection.getresponse()
                content = response.read()
            except ConnectionError:  # reset, broken pipe, closed before an answer
                connection.close()
                if kept and method in IDEMPOTENT:
                    continue  # the server closed the kept connection as we sent: once more
                raise
            except BaseException:
                connection.close()
                raise
            if response.will_close:
                connection.close()
            else:
                self._give(connection)
            return Answer(response.status, response.reason,
                          response.getheader("Content-Type", ""), content)

    def _connect(self, connection: http.client.HTTPConnection) -> None:
        """Open `connection` (TLS handshake included), trying a refused or cut attempt again
        until `connect_retry` seconds have passed."""
        deadline = time.monotonic() + self.connect_retry
        pause = 0.25
        while True:
            try:
                connection.connect()
                return
            except TRANSIENT_CONNECT:
                connection.close()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
            except BaseException:
                connection.close()
                raise
            time.sleep(min(pause, left))
            pause = min(pause * 2, 2.0)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _take(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """A kept connection that is still open (with `timeout` for its next operations), or
        a new one; and whether it was kept."""
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                break
            sock = connection.sock
            if sock is None or select.select([sock], [], [], 0)[0]:
                # readable while idle: the server closed it (or sent what nobody asked for)
                connection.close()
                continue
            connection.timeout = timeout
            sock.settimeout(timeout)
            return connection, True
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self._tls), False
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout), False

    def _give(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < KEPT_IDLE:
                self._idle.append(connection)
                return
        connection.close()
