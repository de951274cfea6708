"""The instmon sender against real HTTP(S) receivers on 127.0.0.1: delivery and order, the
status codes that are not retried (400, 409) and those that are, the token, a receiver outage
across a sender restart (nothing lost, nothing twice), and TLS pinned to a CA file."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import random
import socket
import ssl
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from herder.core.cluster_secrets import self_signed_certificate
from herder.core.notification import (
    TOKEN_HEADER,
    Notification,
    NotificationError,
    parse,
    vm_notification,
)
from herder.instmon.sender import Sender
from herder.instmon.spool import Spool

T0 = datetime.datetime(2026, 11, 22, 0, 0, 0)
FAST = {"backoff_base": 0.05, "backoff_max": 0.2, "timeout": 5.0}
LOGGER = "herder.instmon.sender"

# An answer: (status, body), or None to drop the connection without answering (a lost answer).
Answer = tuple[int, str] | None


def note(i: int) -> Notification:
    return vm_notification("node1", str(uuid.UUID(int=i)), "LIFECYCLE", "STOPPED_FAILED",
                           when=T0 + datetime.timedelta(microseconds=i))


def wait_until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or cond}")
        time.sleep(0.01)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: Receiver

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.open_sockets: set[socket.socket] = set()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.open_sockets.add(request)
        self.receiver.connections += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.open_sockets.discard(request)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the sender expects
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms ACK wait
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        answer = self.server.receiver.handle(dict(self.headers), body)
        if answer is None:
            self.close_connection = True
            return
        status, text = answer
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Receiver:
    """A masakari-like receiver: 400 for a body its schema refuses, 409 for a notification it
    has already, else 202. `script` answers the first POSTs instead (one item each)."""

    def __init__(self, script: list[Answer] | None = None, cert: Path | None = None,
                 port: int = 0) -> None:
        self.script = list(script or [])
        self.cert = cert
        self.port = port
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.accepted: list[Notification] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.cert else 'http'}://127.0.0.1:{self.port}/v1/notifications"

    def handle(self, headers: dict[str, str], body: bytes) -> Answer:
        with self._lock:
            self.posts.append((headers, body))
            try:
                n = parse(body)
            except NotificationError as err:
                return 400, f'{{"badRequest": {{"message": "{err}"}}}}'
            if self.script:
                answer = self.script.pop(0)
                if answer is None:  # took it, but the answer is lost on the way back
                    self.accepted.append(n)
                return answer
            if n.key in {a.key for a in self.accepted}:
                return 409, '{"conflictingRequest": {"message": "duplicate"}}'
            self.accepted.append(n)
            return 202, body.decode()

    def start(self) -> Receiver:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.receiver = self
        if self.cert is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.cert)
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the port and every open (keep-alive) connection: the receiver is down."""
        if self._server is None:
            return
        self._server.shutdown()
        for sock in list(self._server.open_sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        self._server = None


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for r in made:
        r.stop()


@pytest.fixture
def senders() -> Iterator[list[Sender]]:
    made: list[Sender] = []
    yield made
    for s in made:
        assert s.stop(10)


@pytest.fixture
def serve(receivers: list[Receiver]) -> Callable[..., Receiver]:
    def make(**kwargs: Any) -> Receiver:
        r = Receiver(**kwargs).start()
        receivers.append(r)
        return r

    return make


@pytest.fixture
def send(senders: list[Sender]) -> Callable[..., Sender]:
    def make(spool: Spool, url: str, **kwargs: Any) -> Sender:
        s = Sender(spool, url, **{**FAST, **kwargs})
        s.start()
        senders.append(s)
        return s

    return make


def put(spool: Spool, sender: Sender, notes: list[Notification]) -> None:
    for n in notes:
        spool.put(n)
        sender.wake()


def test_202_delivers_and_removes(tmp_path: Path, serve: Callable[..., Receiver],
                                  send: Callable[..., Sender]) -> None:
    r = serve()
    spool = Spool(tmp_path)
    s = send(spool, r.url)
    put(spool, s, [note(1)])
    wait_until(lambda: len(spool) == 0, what="delivery")
    assert r.accepted == [note(1)]
    headers, body = r.posts[0]
    assert body == note(1).to_json()
    assert headers["Content-Type"] == "application/json"
    assert TOKEN_HEADER not in headers
    stats = s.stats()
    assert stats["sent"] == 1 and stats["queued"] == 0 and stats["retries"] == 0
    assert stats["consecutive_failures"] == 0 and stats["last_error"] is None
    assert stats["last_success"] is not None and abs(stats["last_success"] - time.time()) < 10
    assert list(tmp_path.glob("*.json")) == []


def test_token_header_is_sent(tmp_path: Path, serve: Callable[..., Receiver],
                              send: Callable[..., Sender]) -> None:
    r = serve()
    spool = Spool(tmp_path)
    s = send(spool, r.url, token="s3cret-token")
    put(spool, s, [note(1)])
    wait_until(lambda: len(spool) == 0, what="delivery")
    assert r.posts[0][0][TOKEN_HEADER] == "s3cret-token"


def test_order_preserved_over_one_keepalive_connection(
        tmp_path: Path, serve: Callable[..., Receiver], send: Callable[..., Sender]) -> None:
    r = serve()
    spool = Spool(tmp_path)
    s = send(spool, r.url)
    notes = [note(i) for i in range(200)]
    put(spool, s, notes)
    wait_until(lambda: len(spool) == 0, timeout=30, what="200 deliveries")
    assert [n.key for n in r.accepted] == [n.key for n in notes]
    assert len(r.posts) == 200
    assert r.connections == 1
    assert s.stats()["sent"] == 200


@pytest.mark.parametrize(("status", "level", "text"), [
    (400, logging.WARNING, "receiver refused the notification (400): "),
    (409, logging.INFO, "receiver already has it or the host is in maintenance (409): "),
])
def test_400_and_409_are_not_retried(tmp_path: Path, serve: Callable[..., Receiver],
                                     send: Callable[..., Sender], caplog: pytest.LogCaptureFixture,
                                     status: int, level: int, text: str) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    r = serve(script=[(status, '{"message": "host node1 is not in any segment"}')])
    spool = Spool(tmp_path)
    s = send(spool, r.url)
    put(spool, s, [note(1)])
    wait_until(lambda: len(spool) == 0, what="the answer")
    # The entry is gone, so there is nothing left that could be posted again.
    assert len(r.posts) == 1
    stats = s.stats()
    assert stats["retries"] == 0 and stats["sent"] == 0
    assert stats["refused_400" if status == 400 else "duplicate_409"] == 1
    logged = [rec for rec in caplog.records if rec.getMessage().startswith(text)]
    assert len(logged) == 1 and logged[0].levelno == level
    assert "not in any segment" in logged[0].getMessage()


def test_500_is_retried_then_delivered_once(tmp_path: Path, serve: Callable[..., Receiver],
                                            send: Callable[..., Sender],
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    r = serve(script=[(500, "internal error")])
    spool = Spool(tmp_path)
    s = send(spool, r.url)
    put(spool, s, [note(1)])
    wait_until(lambda: len(spool) == 0, what="delivery")
    assert len(r.posts) == 2
    assert r.accepted == [note(1)]
    stats = s.stats()
    assert stats["sent"] == 1 and stats["retries"] == 1 and stats["consecutive_failures"] == 0
    assert "answered 500" in (stats["last_error"] or "")
    assert "resumed after 1 failures" in caplog.text


def test_token_refused_is_an_error_and_retried(tmp_path: Path, serve: Callable[..., Receiver],
                                               send: Callable[..., Sender],
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    r = serve(script=[(401, "bad token")] * 3 + [(403, "forbidden")])
    spool = Spool(tmp_path)
    s = send(spool, r.url, token="wrong")
    put(spool, s, [note(1)])
    wait_until(lambda: len(spool) == 0, what="delivery")
    assert len(r.posts) == 5 and r.accepted == [note(1)]
    errors = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.ERROR]
    # Logged once per streak and text, not once per attempt.
    assert len(errors) == 2
    assert errors[0].startswith("receiver refused our token (401)")
    assert errors[1].startswith("receiver refused our token (403)")
    assert "resumed after 4 failures" in caplog.text


def test_lost_answer_is_a_409_on_retry_and_delivered_once(
        tmp_path: Path, serve: Callable[..., Receiver], send: Callable[..., Sender]) -> None:
    r = serve(script=[None])  # the receiver takes the first POST but its answer is lost
    spool = Spool(tmp_path)
    s = send(spool, r.url)
    put(spool, s, [note(1), note(2)])
    wait_until(lambda: len(spool) == 0, what="delivery")
    assert [n.key for n in r.accepted] == [note(1).key, note(2).key]
    stats = s.stats()
    assert stats["duplicate_409"] == 1 and stats["sent"] == 1 and stats["retries"] == 1


class _Recording(random.Random):
    """Records the jitter ranges asked for and waits a tenth of each."""

    def __init__(self) -> None:
        super().__init__(0)
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.ranges.append((a, b))
        return b / 10


def test_backoff_is_exponential_with_full_jitter(tmp_path: Path, serve: Callable[..., Receiver],
                                                 send: Callable[..., Sender]) -> None:
    r = serve(script=[(503, "busy")] * 6)
    spool = Spool(tmp_path)
    rng = _Recording()
    s = send(spool, r.url, rng=rng, backoff_base=0.05, backoff_max=0.3)
    put(spool, s, [note(1)])
    wait_until(lambda: len(spool) == 0, what="delivery")
    assert rng.ranges == [(0, 0.05), (0, 0.1), (0, 0.2), (0, 0.3), (0, 0.3), (0, 0.3)]
    assert s.stats()["retries"] == 6


class _Longest(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


def test_stop_is_prompt_while_backing_off_and_keeps_the_entry(
        tmp_path: Path, serve: Callable[..., Receiver]) -> None:
    r = serve(script=[(500, "down")] * 100)
    spool = Spool(tmp_path)
    s = Sender(spool, r.url, backoff_base=30, backoff_max=30, rng=_Longest())
    s.start()
    put(spool, s, [note(1)])
    wait_until(lambda: s.stats()["retries"] == 1, what="the first failure")
    started = time.monotonic()
    assert s.stop(10)
    assert time.monotonic() - started < 10  # not after the 30 s back-off
    assert len(spool) == 1 and len(Spool(tmp_path)) == 1
    assert len(r.posts) == 1


@pytest.mark.slow
def test_receiver_down_across_a_sender_restart(tmp_path: Path, senders: list[Sender],
                                               serve: Callable[..., Receiver],
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    down = float(os.environ.get("HERDER_TEST_RECEIVER_DOWN", "2"))
    # Learn a free port, then close it: the receiver is down.
    first = serve()
    port, url = first.port, first.url
    first.stop()
    began = time.monotonic()

    spool = Spool(tmp_path)
    sender = Sender(spool, url, **FAST)
    senders.append(sender)
    sender.start()
    notes = [note(i) for i in range(30)]
    put(spool, sender, notes[:15])
    wait_until(lambda: sender.stats()["retries"] >= 2, what="failures while down")
    time.sleep(down / 2)  # part of the outage, not an assertion
    assert sender.stop(5)
    assert len(spool) == 15

    # The node restarts instmon: a new spool and sender on the same directory.
    spool = Spool(tmp_path)
    assert len(spool) == 15
    sender = Sender(spool, url, **FAST)
    senders.append(sender)
    sender.start()
    put(spool, sender, notes[15:])
    time.sleep(max(0.0, down - (time.monotonic() - began)))  # the rest of the outage
    assert len(spool) == 30

    up = serve(port=port)
    wait_until(lambda: len(spool) == 0, timeout=30, what="delivery after the outage")
    counts = Counter(n.key for n in up.accepted)
    assert set(counts) == {n.key for n in notes}
    assert set(counts.values()) == {1}
    assert [n.key for n in up.accepted] == [n.key for n in notes]
    stats = sender.stats()
    assert stats["sent"] == 30 and stats["consecutive_failures"] == 0
    assert list(tmp_path.glob("*.json")) == []
    # The outage is logged once per sender, not once per retry.
    warnings = [rec for rec in caplog.records
                if rec.levelno == logging.WARNING and "cannot deliver" in rec.getMessage()]
    assert 1 <= len(warnings) <= 2
    assert "delivery to" in caplog.text and "resumed after" in caplog.text


def _ca_and_server_cert(directory: Path, name: str) -> tuple[Path, Path]:
    """(the certificate alone, for the client's ca_file; key + certificate, for the server)."""
    blob = self_signed_certificate("receiver.example")
    server = directory / f"{name}-server.pem"
    server.write_bytes(blob)
    ca = directory / f"{name}-ca.pem"
    ca.write_bytes(blob[blob.index(b"-----BEGIN CERTIFICATE-----"):])
    return ca, server


def test_tls_with_the_right_ca_delivers(tmp_path: Path, serve: Callable[..., Receiver],
                                        send: Callable[..., Sender]) -> None:
    ca, cert = _ca_and_server_cert(tmp_path, "cluster")
    r = serve(cert=cert)
    assert r.url.startswith("https://")
    spool = Spool(tmp_path / "spool")
    s = send(spool, r.url, ca_file=ca, token="t")
    put(spool, s, [note(1), note(2)])
    wait_until(lambda: len(spool) == 0, what="delivery over TLS")
    assert [n.key for n in r.accepted] == [note(1).key, note(2).key]
    assert r.posts[0][0][TOKEN_HEADER] == "t"


def test_tls_with_another_ca_sends_nothing_and_says_why(
        tmp_path: Path, serve: Callable[..., Receiver], send: Callable[..., Sender],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    ca, _ = _ca_and_server_cert(tmp_path, "cluster")
    _, other_cert = _ca_and_server_cert(tmp_path, "impostor")
    r = serve(cert=other_cert)
    spool = Spool(tmp_path / "spool")
    s = send(spool, r.url, ca_file=ca)
    put(spool, s, [note(1)])
    wait_until(lambda: s.stats()["retries"] >= 3, what="repeated TLS failures")
    assert r.posts == [] and len(spool) == 1
    errors = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.ERROR]
    assert len(errors) == 1, errors  # once per streak, not per retry
    assert errors[0].startswith(f"TLS verification of {r.url}: certificate verify failed")
    assert f"not signed by the CA in {ca}" in errors[0]
    assert "nothing sent, retrying" in errors[0]
    assert s.stats()["last_error"] == errors[0]
