"""Issue 35 item 8: what one client may hold of a daemon's HTTP endpoint (`core.serve`).

Half-sent requests stayed open for an hour (aiohttp's keep-alive default, no header timeout),
about 1,000 connections stopped masterd, and a route that authenticates by its body read up
to 4 MiB first. Each endpoint now closes a connection that has not sent a whole request head
(or, with TLS, finished its handshake) within its header deadline, answers 408 to a body not
sent within its body deadline, keeps at most `per_source` connections of one address (more
are closed at once) and reads at most `pre_auth_body` bytes for a route whose caller is proven
by the body (or not at all: `core.access`). Real sockets on loopback addresses; the deadlines
are short here and the tests wait many times longer than them, never for the defaults.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from herder.core import access, serve
from herder.core.cluster_secrets import self_signed_certificate

LIMITS = serve.Limits(header_timeout=1.0, idle_timeout=4.0, body_timeout=1.0, per_source=4,
                      pre_auth_body=1024)
ROUTES = access.Routes("test")
PATIENCE = 20.0  # seconds a test waits for what the 1 s deadlines should do


@ROUTES.allow(access.ANYONE)
async def open_route(request: web.Request) -> web.Response:
    return web.json_response({"got": len(await request.read())})


@ROUTES.allow(access.RAPI_WRITE)
async def proven_route(request: web.Request) -> web.Response:
    return web.json_response({"got": len(await request.read())})


def app() -> web.Application:
    application = web.Application(client_max_size=4 << 20)
    application.router.add_post("/open", open_route)
    application.router.add_post("/proven", proven_route)
    return application


@contextmanager
def serving(tls: ssl.SSLContext | None = None) -> Iterator[int]:
    """The app served with LIMITS on 0.0.0.0 (reached from 127.0.0.1 and 127.0.0.2); its port."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    bound: list[int] = []
    ready = threading.Event()

    async def main() -> None:
        await serve.serve("limits", None, endpoints=[serve.Http(
            app(), [serve.Listener("0.0.0.0", 0, tls)], routes=ROUTES, limits=LIMITS)],
            ready=lambda addresses: (bound.append(addresses[0].port), ready.set()), stop=stop)

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    assert ready.wait(30)
    try:
        yield bound[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((source, port))
    sock.settimeout(PATIENCE)
    return sock


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed the connection within `seconds`, and what it sent first."""
    sock.settimeout(seconds)
    received = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True, received
            received += chunk
    except TimeoutError:
        return False, received
    except ConnectionResetError:
        return True, received


def test_a_half_sent_request_head_is_closed_after_the_header_deadline() -> None:
    with serving() as port:
        sock = connect(port)
        sock.sendall(b"POST /open HTTP/1.1\r\nHost: x\r\n")  # and never the end of the head
        began = time.monotonic()
        closed, _ = closed_within(sock, PATIENCE)
        assert closed and time.monotonic() - began < PATIENCE
        idle = connect(port)  # a connection that sends nothing at all
        assert closed_within(idle, PATIENCE)[0]


def test_a_kept_connection_idles_longer_than_a_head_may_take() -> None:
    """Between requests a kept-alive connection may idle `idle_timeout` (a poller's kept
    connections outlive its pause between rounds); a head, once begun, still has
    `header_timeout`, and after the idle timeout the connection is closed."""
    with serving() as port:
        sock = connect(port)
        ask = b"POST /open HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        sock.sendall(ask)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(2.0)  # longer than a head may take, shorter than the idle timeout
        sock.sendall(ask)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        sock.sendall(b"POST /open HTTP/1.1\r\n")  # a head begun on the kept connection
        began = time.monotonic()
        assert closed_within(sock, PATIENCE)[0]
        assert time.monotonic() - began < LIMITS.idle_timeout  # the head's deadline, not idle
        kept = connect(port)
        kept.sendall(ask)
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        assert closed_within(kept, PATIENCE)[0]  # idle past idle_timeout


def test_a_body_not_sent_within_the_body_deadline_gets_408() -> None:
    with serving() as port:
        sock = connect(port)
        sock.sendall(b"POST /proven HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123")
        answer = closed_within(sock, PATIENCE)[1]
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_a_body_proving_nothing_yet_is_small_and_a_proven_callers_is_not() -> None:
    with serving() as port:
        big = b"x" * 4096
        for path, status in (("/open", b"413"), ("/proven", b"200")):
            sock = connect(port)
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(big)}\r\n"
                         "Connection: close\r\n\r\n".encode() + big)
            answer = closed_within(sock, PATIENCE)[1]
            assert answer.split(b" ")[1] == status, (path, answer[:200])
        sock = connect(port)  # chunked: refused as it comes, not after 4 MiB
        sock.sendall(b"POST /open HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(4):
            sock.sendall(b"400\r\n" + b"y" * 1024 + b"\r\n")
        answer = closed_within(sock, PATIENCE)[1]
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_one_source_holds_at_most_its_connections_and_others_are_served() -> None:
    with serving() as port:
        held = [connect(port) for _ in range(LIMITS.per_source)]
        time.sleep(0.2)  # accepted and counted
        over = connect(port)
        assert closed_within(over, PATIENCE)[0]  # closed at once, before the deadline
        other = connect(port, "127.0.0.2")
        other.sendall(b"POST /open HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                      b"Connection: close\r\n\r\nok")
        assert closed_within(other, PATIENCE)[1].startswith(b"HTTP/1.1 200")
        for sock in held:
            sock.close()
        time.sleep(0.2)
        again = connect(port)
        again.sendall(b"POST /open HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                      b"Connection: close\r\n\r\n")
        assert closed_within(again, PATIENCE)[1].startswith(b"HTTP/1.1 200")


def test_tls_handshakes_count_and_end_at_the_header_deadline(tmp_path: Path) -> None:
    pem = tmp_path / "server.pem"
    pem.write_bytes(self_signed_certificate("limits.test"))
    with serving(serve.server_tls(pem)) as port:
        stalled = [connect(port) for _ in range(LIMITS.per_source)]  # never say hello
        time.sleep(0.2)
        assert closed_within(connect(port), PATIENCE)[0]  # over the cap
        assert all(closed_within(sock, PATIENCE)[0] for sock in stalled)
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with context.wrap_socket(connect(port)) as secure:
            secure.sendall(b"POST /open HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
            assert secure.recv(4096).startswith(b"HTTP/1.1 200")
        # a request in the same segment as the handshake's last message is not lost
        assert request_with_the_handshake(port, context).startswith(b"HTTP/1.1 200")


def request_with_the_handshake(port: int, context: ssl.SSLContext) -> bytes:
    """A TLS client whose first request leaves in one write with its Finished message (as a
    busy client's often does); the answer's first bytes."""
    sock = connect(port)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            incoming.write(sock.recv(65536))
    tls.write(b"POST /open HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
              b"Connection: close\r\n\r\n")
    sock.sendall(outgoing.read())
    answer = b""
    while not answer:
        try:
            answer = tls.read(4096)
        except ssl.SSLWantReadError:
            received = sock.recv(65536)
            if not received:
                break
            incoming.write(received)
    sock.close()
    return answer
