"""Published ports: TCP from the machine's loopback into the simulated cluster's network.

The forwarder is one process in the simulator's network namespace (`hsim-<index>`), so it can
reach every host; the sockets it listens on are created in the machine's own namespace, on
127.0.0.x, by whoever publishes a port (`publish()`), and handed to it over its control socket
(SCM_RIGHTS). Each accepted connection is forwarded to the address:port the mapping names at
that moment; the mapping changes at run time (`publish`, `retarget`, `unpublish`), so VNC
consoles and a new master's address can be added while the cluster runs.

Control protocol: one JSON line per connection, `{"op": "publish", "target": "198.18.1.2:5080"}`
with the listening socket attached, `{"op": "retarget", "listen": "127.0.0.11:5080", "target":
...}`, `{"op": "unpublish", "listen": ...}`, `{"op": "list"}`; the answer is one JSON line
`{"ok": true, "ports": {"127.0.0.11:5080": "198.18.1.2:5080", ...}}` or `{"ok": false,
"error": ...}`. At most `MAX_CONNECTIONS` connections (or the second argument) are forwarded
at once (more are closed at once); SIGTERM closes every socket and ends the process.

    python -m herder.sim.forward CONTROL_SOCKET [MAX_CONNECTIONS]
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from herder.core import unixline
from herder.core.errors import HerderError

log = logging.getLogger("herder.sim.forward")

MAX_CONNECTIONS = 512
CONNECT_TIMEOUT = 10.0
CHUNK = 65536
MAX_LINE = 65536


Op = Literal["publish", "retarget", "unpublish", "list"]


class Request(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    op: Op
    listen: str = ""
    target: str = ""


class Reply(msgspec.Struct, frozen=True):
    ok: bool
    error: str = ""
    ports: dict[str, str] = {}


def split_address(text: str, *, any_port: bool = False) -> tuple[str, int]:
    """IP:PORT -> (IP, PORT); `any_port`: port 0 (any free one) is fine."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not (0 if any_port else 1) <= int(port) < 65536:
        raise HerderError(f"{text!r} is not IP:PORT")
    return host.strip("[]"), int(port)


def _key(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of file, then pass the end of file on (half-close)."""
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        with contextlib.suppress(OSError):
            writer.write_eof()


class Forwarder:
    def __init__(self, control_path: Path, max_connections: int = MAX_CONNECTIONS) -> None:
        self.control_path = control_path
        self.max_connections = max_connections
        self.servers: dict[str, asyncio.Server] = {}
        self.targets: dict[str, str] = {}
        self.connections: set[asyncio.Task[None]] = set()
        self.stopping = asyncio.Event()

    # --- forwarding -------------------------------------------------------------------

    async def _forward(self, key: str, client_reader: asyncio.StreamReader,
                       client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self.connections) >= self.max_connections:
            log.warning("%s: %d connections already, refusing one", key,
                        self.max_connections)
            client_writer.close()
            return
        self.connections.add(task)
        server_writer = None
        try:
            host, port = split_address(self.targets[key])
            server_reader, server_writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), CONNECT_TIMEOUT)
            await asyncio.gather(_pump(client_reader, server_writer),
                                 _pump(server_reader, client_writer))
        except (OSError, TimeoutError, KeyError, HerderError) as err:
            log.info("%s: %s", key, err or type(err).__name__)
        finally:
            self.connections.discard(task)
            for writer in (client_writer, server_writer):
                if writer is not None:
                    writer.close()

    async def publish(self, sock: socket.socket, target: str) -> str:
        """Serve `sock` (it is the forwarder's from now on, also when this fails)."""
        split_address(target)
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET,
                                                                  socket.AF_INET6):
            sock.close()
            raise HerderError("not a TCP socket")
        key = _key(sock)
        if key in self.servers:
            sock.close()
            raise HerderError(f"{key} is published already")
        self.targets[key] = target
        self.servers[key] = await asyncio.start_server(
            lambda r, w: self._forward(key, r, w), sock=sock)
        log.info("publish %s -> %s", key, target)
        return key

    async def unpublish(self, key: str) -> None:
        server = self.servers.pop(key, None)
        if server is None:
            raise HerderError(f"{key} is not published")
        self.targets.pop(key, None)
        server.close()
        await server.wait_closed()
        log.info("unpublish %s", key)

    # --- control ----------------------------------------------------------------------

    async def _control_client(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            data, fds = await _receive(loop, conn)
            sock = None
            try:
                request = msgspec.json.decode(data, type=Request)
                if request.op == "publish" and fds:
                    sock = socket.socket(fileno=fds.pop(0))  # the socket to listen on
                reply = await self._handle(request, sock)
                sock = None  # the listener owns it now
            except (msgspec.DecodeError, msgspec.ValidationError) as err:
                reply = Reply(ok=False, error=f"bad request: {err}")
            except HerderError as err:
                reply = Reply(ok=False, error=str(err))
            finally:
                if sock is not None:
                    sock.close()
                for fd in fds:  # sent with a request that has no use for them
                    os.close(fd)
            await loop.sock_sendall(conn, msgspec.json.encode(reply) + b"\n")
        except OSError as err:
            log.info("control: %s", err)
        finally:
            conn.close()

    async def _handle(self, request: Request, sock: socket.socket | None) -> Reply:
        if request.op == "publish":
            split_address(request.target)
            if sock is None:
                raise HerderError("publish: no socket attached")
            await self.publish(sock, request.target)
        elif request.op == "retarget":
            split_address(request.target)
            if request.listen not in self.targets:
                raise HerderError(f"{request.listen} is not published")
            self.targets[request.listen] = request.target
            log.info("retarget %s -> %s", request.listen, request.target)
        elif request.op == "unpublish":
            await self.unpublish(request.listen)
        return Reply(ok=True, ports=dict(self.targets))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stopping.set)
        with contextlib.suppress(FileNotFoundError):
            self.control_path.unlink()
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o077)
        try:
            control.bind(str(self.control_path))
        finally:
            os.umask(old_umask)
        control.listen(16)
        control.setblocking(False)
        clients: set[asyncio.Task[None]] = set()

        async def accept() -> None:
            while True:
                conn, _ = await loop.sock_accept(control)
                task = asyncio.create_task(self._control_client(conn))
                clients.add(task)
                task.add_done_callback(clients.discard)

        acceptor = asyncio.create_task(accept())
        log.info("control socket %s", self.control_path)
        try:
            await self.stopping.wait()
        finally:
            acceptor.cancel()
            control.close()
            with contextlib.suppress(FileNotFoundError):
                self.control_path.unlink()
            for server in self.servers.values():
                server.close()
            for task in [*self.connections, *clients]:
                task.cancel()
            await asyncio.gather(*self.connections, *clients, return_exceptions=True)
            log.info("stopped")


async def _receive(loop: asyncio.AbstractEventLoop,
                   conn: socket.socket) -> tuple[bytes, list[int]]:
    """One request line and the file descriptors sent with it."""
    data = bytearray()
    fds: list[int] = []
    ready: asyncio.Future[None]
    while not data.endswith(b"\n"):
        ready = loop.create_future()
        loop.add_reader(conn.fileno(), _set_ready(ready))
        try:
            await asyncio.wait_for(ready, 10.0)
        finally:
            loop.remove_reader(conn.fileno())
        chunk, ancillary, _flags, _addr = conn.recvmsg(MAX_LINE, socket.CMSG_SPACE(
            4 * array.array("i").itemsize))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(payload[:len(payload) - len(payload) % received.itemsize])
                fds.extend(received)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_LINE:
            raise OSError("request too long")
    return bytes(data), fds


def _set_ready(future: asyncio.Future[None]) -> Callable[[], None]:
    def callback() -> None:
        if not future.done():
            future.set_result(None)
    return callback


# --- the client (in the machine's own namespace) -----------------------------------------


def request(control_path: Path, op: Op, *, listen: str = "", target: str = "",
            sock: socket.socket | None = None, timeout: float = 30.0) -> Reply:
    """One request to the forwarder (with a listening socket to publish)."""
    message = Request(op=op, listen=listen, target=target)
    reply = unixline.exchange(control_path, message, Reply, who="the port forwarder",
                              fds=[sock.fileno()] if sock is not None else [],
                              timeout=timeout)
    if not reply.ok:
        raise HerderError(f"port forwarder: {reply.error}")
    return reply


def listening_socket(listen: str) -> socket.socket:
    """A TCP socket listening on IP:PORT in this process's network namespace (port 0: any
    free one)."""
    host, port = split_address(listen, any_port=True)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise HerderError(f"cannot listen on {listen}: {err.strerror or err}") from None
    return sock


def publish(control_path: Path, listen: str, target: str) -> Reply:
    """Listen on `listen` (here, in the machine's namespace) and have the forwarder pass its
    connections to `target`."""
    split_address(target)
    with listening_socket(listen) as sock:
        return request(control_path, "publish", target=target, sock=sock)


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        raise SystemExit("usage: python -m herder.sim.forward CONTROL_SOCKET [MAX_CONNECTIONS]")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s forward %(levelname)s %(message)s")
    limit = int(argv[2]) if len(argv) == 3 else MAX_CONNECTIONS
    asyncio.run(Forwarder(Path(argv[1]), limit).run())


if __name__ == "__main__":
    main(sys.argv)
