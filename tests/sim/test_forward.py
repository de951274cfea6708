"""The published ports' forwarder (herder.sim.forward) as a real process, on the machine's
loopback only (its place in the simulator's namespace is tested in test_hosts.py)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.core.errors import HerderError
from herder.sim import forward


class Server:
    """A TCP server on 127.0.0.1: each connection gets `tag`, then what it sent, reversed,
    once it has half-closed; `hold` keeps connections open without answering."""

    def __init__(self, tag: bytes, hold: bool = False) -> None:
        self.tag = tag
        self.hold = hold
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.hold:
                self.held.append(conn)
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.sendall(self.tag)
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            conn.sendall(data[::-1])

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def exchange(listen: str, payload: bytes, tag_length: int) -> tuple[bytes, bytes]:
    host, port = forward.split_address(listen)
    with socket.create_connection((host, port), 5) as conn:
        conn.settimeout(10)
        tag = b""
        while len(tag) < tag_length:
            tag += conn.recv(tag_length - len(tag))
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return tag, answer


class Running:
    def __init__(self, max_connections: int = 512) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="hfwd-", dir="/tmp"))
        self.control = self.directory / "f.sock"
        self.log = open(self.directory / "forward.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([sys.executable, "-m", "herder.sim.forward",
                                      str(self.control), str(max_connections)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self.control.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)

    def publish(self, target: str) -> str:
        """Publish an ephemeral port on 127.0.0.1; returns its address."""
        with forward.listening_socket("127.0.0.1:0") as sock:
            listen = f"127.0.0.1:{sock.getsockname()[1]}"
            forward.request(self.control, "publish", target=target, sock=sock)
        return listen

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def running() -> Iterator[Running]:
    proc = Running()
    try:
        yield proc
    finally:
        proc.stop()


def test_forward_retarget_unpublish(running: Running) -> None:
    first, second = Server(b"one"), Server(b"two")
    try:
        listen = running.publish(first.address)
        payload = bytes(range(256)) * 1000  # more than one read's worth, both ways
        assert exchange(listen, payload, 3) == (b"one", payload[::-1])
        ports = forward.request(running.control, "retarget", listen=listen,
                                target=second.address).ports
        assert ports == {listen: second.address}
        assert exchange(listen, b"abc", 3) == (b"two", b"cba")
        assert forward.request(running.control, "unpublish", listen=listen).ports == {}
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(forward.split_address(listen), 2).close()
    finally:
        first.close()
        second.close()


def test_errors_are_one_line(running: Running) -> None:
    with pytest.raises(HerderError, match="is not published"):
        forward.request(running.control, "retarget", listen="127.0.0.1:1", target="1.2.3.4:5")
    with pytest.raises(HerderError, match="is not IP:PORT"):
        forward.request(running.control, "publish", target="nowhere")
    server = Server(b"x")
    try:
        listen = running.publish(server.address)
        with pytest.raises(HerderError, match=f"cannot listen on {listen}"):
            forward.publish(running.control, listen, server.address)
    finally:
        server.close()
    with pytest.raises(HerderError, match="cannot reach the port forwarder"):
        forward.request(running.directory / "absent.sock", "list")


def test_an_unreachable_target_closes_the_connection(running: Running) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    listen = running.publish(dead)
    with socket.create_connection(forward.split_address(listen), 5) as conn:
        conn.settimeout(10)
        assert conn.recv(10) == b""


def test_connections_are_bounded_and_shutdown_is_clean() -> None:
    running = Running(max_connections=2)
    server = Server(b"", hold=True)
    try:
        listen = running.publish(server.address)
        address = forward.split_address(listen)
        kept = [socket.create_connection(address, 5) for _ in range(2)]
        deadline = time.monotonic() + 10
        while server.accepted < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.accepted == 2
        with socket.create_connection(address, 5) as extra:
            extra.settimeout(10)
            assert extra.recv(10) == b""  # refused: closed at once
        assert server.accepted == 2
        running.proc.send_signal(signal.SIGTERM)
        assert running.proc.wait(timeout=20) == 0
        for conn in kept:
            conn.settimeout(10)
            assert conn.recv(10) == b""
            conn.close()
        assert not running.control.exists()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, 2).close()
    finally:
        server.close()
        running.stop()
