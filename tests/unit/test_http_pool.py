"""The RAPI client's transport (`core.http_pool`) against a local HTTP/1.1 server that keeps
connections: reuse, a kept connection the server closed, no second POST, threads."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

import pytest

from herder.core import http_pool, rapi
from herder.core.rapi import RapiClient, RapiError
from tests.httpserver import threaded_http


@dataclass
class Server:
    url: str
    calls: Counter[str] = field(default_factory=Counter)
    peers: list[tuple[str, int]] = field(default_factory=list)  # one per connection opened
    drop_next: set[str] = field(default_factory=set)  # paths answered by closing, once


@contextmanager
def keeping_server(idle_timeout: float = 5.0) -> Iterator[Server]:
    state = Server("")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps connections (http.server's default closes them)
        timeout = idle_timeout  # an idle kept connection is closed after this

        def setup(self) -> None:
            super().setup()
            with lock:
                state.peers.append(self.client_address)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?")[0]
            with lock:
                state.calls[f"{self.command} {path}"] += 1
                drop = path in state.drop_next
                state.drop_next.discard(path)
            if drop:  # read, then closed without an answer
                self.close_connection = True
                return
            payload = b'{"path": "%s", "length": %d}' % (self.path.encode(), len(body))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Handler) as state.url:
        yield state


def test_connections_are_kept_and_queries_encoded() -> None:
    with keeping_server() as server, RapiClient(server.url) as client:
        for _ in range(5):
            answer = client.request("GET", "/2/query/instance",
                                    [("fields", "name,be/vcpus"), ("filter", "a b+c")])
        path, query = answer["path"].split("?")
        assert path == "/2/query/instance"
        assert parse_qsl(query) == [("fields", "name,be/vcpus"), ("filter", "a b+c")]
        assert len(server.peers) == 1  # five requests, one connection
        assert client.request("POST", "/2/x", body={"a": 1})["length"] == len('{"a": 1}')
        assert len(server.peers) == 1


def test_a_kept_connection_the_server_closed_is_replaced() -> None:
    with keeping_server(idle_timeout=0.2) as server, RapiClient(server.url) as client:
        client.request("GET", "/a")
        time.sleep(0.6)  # the server closes the idle connection
        assert client.request("POST", "/b", body={})["path"] == "/b"
        assert server.calls["POST /b"] == 1
        assert len(server.peers) == 2


def test_a_get_is_sent_again_once_but_never_a_post() -> None:
    with keeping_server() as server, RapiClient(server.url) as client:
        client.request("GET", "/warm")  # a kept connection
        server.drop_next.add("/flaky")
        assert client.request("GET", "/flaky")["path"] == "/flaky"
        assert server.calls["GET /flaky"] == 2  # the first closed unanswered: sent again
        server.drop_next.add("/job")
        with pytest.raises(RapiError, match="cannot reach RAPI at .*: the connection closed"):
            client.request("POST", "/job", body={"ops": []})
        assert server.calls["POST /job"] == 1  # a job must not be submitted twice
        assert client.request("GET", "/after")["path"] == "/after"


def test_a_new_connection_that_drops_is_an_error_not_a_retry() -> None:
    with keeping_server() as server, RapiClient(server.url) as client:
        server.drop_next.add("/flaky")
        with pytest.raises(RapiError, match="cannot reach RAPI"):
            client.request("GET", "/flaky")
        assert server.calls["GET /flaky"] == 1


def test_threads_share_the_client() -> None:
    with keeping_server() as server, RapiClient(server.url) as client:
        def ask(number: int) -> str:
            return str(client.request("GET", f"/n{number}")["path"])

        with ThreadPoolExecutor(max_workers=8) as pool:
            assert list(pool.map(ask, range(200))) == [f"/n{n}" for n in range(200)]
        assert sum(server.calls.values()) == 200
        # connections reused across the threads' calls: the pool keeps KEPT_IDLE (4) idle
        # ones for 8 threads, so a busy machine's scheduling may open more than 8, never one
        # per call
        assert len(server.peers) <= 100
        assert len(client._pool._idle) <= http_pool.KEPT_IDLE


def test_bad_urls_are_one_line_errors() -> None:
    for url in ("ftp://example.com", "127.0.0.1:5080", "https://"):
        with pytest.raises(RapiError, match="not an http"):
            RapiClient(url)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refused_connection_is_tried_again_while_the_server_starts() -> None:
    """A server restarting (masterd after a crash or a failover) refuses for a moment: no
    request was sent on a refused connection, so a POST is tried again too, and sent once."""
    port = _free_port()
    calls: Counter[str] = Counter()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            calls[self.path] += 1
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"17")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.socket.close()  # refused until `serve_later` listens on the port again

    def serve_later() -> None:
        server.socket = socket.create_server(("127.0.0.1", port))
        server.serve_forever()

    starter = threading.Timer(1.0, serve_later)
    began = time.monotonic()
    starter.start()
    try:
        with RapiClient(f"http://127.0.0.1:{port}") as client:
            assert client.request("POST", "/2/herder/jobs", body={"ops": []}) == 17
            assert time.monotonic() - began >= 0.95  # answered only once it listened
        assert calls["/2/herder/jobs"] == 1
    finally:
        server.shutdown()  # serve_forever runs in the timer's thread: ends it
        starter.join()
        server.server_close()


def test_a_refusal_that_lasts_is_one_line_after_the_retry_time() -> None:
    with RapiClient(f"http://127.0.0.1:{_free_port()}") as client:
        client._pool.connect_retry = 0.5
        began = time.monotonic()
        with pytest.raises(RapiError, match="cannot reach RAPI at .*refused"):
            client.request("GET", "/2/info")
        assert 0.4 <= time.monotonic() - began < 5


@contextmanager
def job_server(drops: int) -> Iterator[tuple[str, Counter[str]]]:
    """Job 7's /wait closes `drops` connections unanswered (-1: every one), then says the job
    succeeded."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                calls[self.path] += 1
                dropped = self.path.endswith("/wait") and (
                    drops < 0 or calls[self.path] <= drops)
            if dropped:
                self.close_connection = True
                return
            payload = (b'{"job_info": ["success"], "log_entries": []}'
                       if self.path.endswith("/wait") else b'{"id": 7, "status": "success"}')
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Handler) as url:
        yield url, calls


def test_a_followed_job_outlives_polls_that_get_no_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rapi, "JOB_WATCH_PAUSE", 0.05)
    said: list[str] = []
    with job_server(drops=3) as (url, calls), RapiClient(url) as client:
        job = client.wait_for_job(7, on_retry=said.append)
    assert job["status"] == "success"
    assert calls["/2/jobs/7/wait"] == 4
    assert said and all("following job 7 again" in line for line in said)


def test_a_followed_job_whose_master_stays_silent_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rapi, "JOB_WATCH_PAUSE", 0.05)
    with job_server(drops=-1) as (url, _calls), RapiClient(url) as client, \
            pytest.raises(RapiError, match="cannot reach RAPI"):
        client.wait_for_job(7, grace=0.5)
