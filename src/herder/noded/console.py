"""The node's side of instance consoles (docs/security.md "Consoles").

- The serial log: the domain's serial port writes `<serial_log_dir>/<name>.serial.log`
  (`core.console.serial_log`; libvirt's `<serial><log file>`); `keep_serial_logs` bounds it:
  a log past `SERIAL_LOG_MAX` bytes is copied to `<log>.1` and truncated (QEMU appends, so its
  next write lands at the new end), so a log takes at most about twice that.
  `tail` answers the `instance_console_log` RPC.
- The streams: `GET /console/<name>/serial` and `GET /console/<name>/vnc`, websocket upgrades
  that only the master may make: TLS with a client certificate of the cluster (as every node
  RPC) and, in the `SIGNED_CALL_HEADER` header, a call signed for this node with the node-RPC
  key (method `console_serial` or `console_vnc`, arguments `{"instance": name}`), fresh and
  never replayed. The serial stream attaches to the domain's serial pty (the path libvirt
  reports in the live definition, as `virsh console` does on the host); the VNC stream
  connects to the domain's VNC server where its definition says it listens
  (`vnc_bind_address`; a wildcard address is reached on loopback) or to its unix socket.
  Bytes travel as binary websocket frames both ways. The same request without the upgrade
  (the master asks whether a stream could open) gets every check and 426, or the refusal,
  and opens nothing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path

import msgspec
from aiohttp import WSMsgType, web

from herder.core import access, console
from herder.core.errors import HerderError
from herder.core.noderpc import EPOCH_KEY
from herder.core.rpcdefs.instance_calls import ConsoleStream
from herder.noded import rpccheck
from herder.noded.node import Node

log = logging.getLogger("herder.noded.console")
_encode = msgspec.json.Encoder().encode
SERIAL_LOG_MAX = 2 << 20  # bytes of a serial log before it is rotated
ROTATE_EVERY = 30.0  # seconds between checks of the serial logs' sizes
CHUNK = 64 * 1024
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


class ConsoleUnavailable(HerderError):
    """The domain has no such console now (not running, no serial pty, no VNC)."""


# --- the serial log -------------------------------------------------------------------------

def rotate_serial_logs(directory: Path, max_bytes: int = SERIAL_LOG_MAX) -> list[str]:
    """Copy-truncate every serial log past `max_bytes` to `<log>.1`; the logs rotated."""
    rotated = []
    for path in sorted(directory.glob("*.serial.log")):
        try:
            if path.stat().st_size <= max_bytes:
                continue
            shutil.copyfile(path, path.with_name(path.name + ".1"))
            os.truncate(path, 0)
        except OSError as err:
            log.warning("cannot rotate the serial log %s: %s", path, err)
            continue
        rotated.append(path.name)
    return rotated


async def keep_serial_logs(directory: Path, stop: asyncio.Event,
                           every: float = ROTATE_EVERY) -> None:
    while not stop.is_set():
        if directory.is_dir():
            await asyncio.to_thread(rotate_serial_logs, directory)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)


def _last_lines(path: Path, lines: int) -> list[bytes]:
    """The last `lines` lines of a file, reading backwards from its end."""
    try:
        with path.open("rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            data = b""
            position = end
            while position > 0 and data.count(b"\n") <= lines:
                step = min(CHUNK, position)
                position -= step
                handle.seek(position)
                data = handle.read(step) + data
    except FileNotFoundError:
        return []
    return data.splitlines()[-lines:]


def tail(directory: Path, instance: str, lines: int) -> str:
    """The last `lines` lines of the instance's serial log (through its rotated part)."""
    log_path = console.serial_log(directory, instance)
    if not log_path.exists() and not log_path.with_name(log_path.name + ".1").exists():
        raise ConsoleUnavailable(f"instance {instance} has no serial log on this node "
                                 f"({log_path})")
    recent = _last_lines(log_path, lines)
    if len(recent) < lines:
        recent = _last_lines(log_path.with_name(log_path.name + ".1"),
                             lines - len(recent)) + recent
    return b"\n".join(recent).decode("utf-8", errors="replace") + ("\n" if recent else "")


# --- where a running domain's consoles are ----------------------------------------------------

def serial_pty(domain_xml: str) -> str | None:
    """The host side of the domain's serial console pty, from its live definition."""
    devices = ET.fromstring(domain_xml).find("devices")
    if devices is None:
        return None
    for tag in ("serial", "console"):
        for element in devices.findall(tag):
            if element.get("type") != "pty":
                continue
            source = element.find("source")
            path = source.get("path") if source is not None else element.get("tty")
            if path:
                return path
    return None


def vnc_endpoint(domain_xml: str) -> tuple[str, int] | str | None:
    """(host, port) or a unix socket path of the domain's VNC server; None without one."""
    devices = ET.fromstring(domain_xml).find("devices")
    graphics = None if devices is None else devices.find("graphics[@type='vnc']")
    if graphics is None:
        return None
    listen = graphics.find("listen")
    if listen is not None and listen.get("type") == "socket" and listen.get("socket"):
        return str(listen.get("socket"))
    port = int(graphics.get("port") or -1)
    if port <= 0:
        return None
    address = (listen.get("address") if listen is not None else None) \
        or graphics.get("listen") or ""
    return WILDCARDS.get(address, address), port


# --- the streams -------------------------------------------------------------------------------

def _refusal(status: int, message: str) -> web.Response:
    """The JSON error of every node RPC, and the reason in a header the master's websocket
    client can read."""
    line = message.encode("ascii", "replace").decode().replace("\r", " ").replace("\n", " ")
    return web.Response(status=status, body=_encode({"error": message}),
                        content_type="application/json",
                        headers={console.ERROR_HEADER: line[:300]})


def caller_args(node: Node, checker: rpccheck.RequestChecker, request: web.Request,
                method: str) -> tuple[ConsoleStream, object]:
    """The signed call's arguments and its master epoch (None: none); Refused unless the
    master sent it for this stream."""
    tls = request.transport.get_extra_info("ssl_object") if request.transport else None
    if tls is not None:  # plain HTTP only in in-process tests (daemon.serve: TLS)
        refusal = node.trust.refusal(tls.getpeercert(binary_form=True))
        if refusal is not None:
            raise rpccheck.Refused(403, f"refused: {refusal}")
    header = request.headers.get(console.SIGNED_CALL_HEADER, "")
    try:
        body = base64.urlsafe_b64decode(header.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise rpccheck.Refused(403, "refused: no signed call") from None
    args = checker.check(method, body)
    epoch = args.pop(EPOCH_KEY, None)
    try:
        call = msgspec.convert(args, ConsoleStream)
    except msgspec.ValidationError as err:
        raise rpccheck.Refused(400, f"{method}: bad arguments: {err}") from None
    if call.instance != request.match_info["instance"]:
        raise rpccheck.Refused(403, "refused: the call is signed for another instance")
    return call, epoch


async def _pump_to_socket(ws: web.WebSocketResponse,
                          write: Callable[[bytes], Awaitable[None]]) -> None:
    async for message in ws:
        if message.type == WSMsgType.BINARY:
            await write(message.data)
        elif message.type == WSMsgType.TEXT:
            await write(message.data.encode())
        elif message.type == WSMsgType.ERROR:
            break


async def _serial(ws: web.WebSocketResponse, pty: str) -> None:
    fd = os.open(pty, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    loop = asyncio.get_running_loop()
    received: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: the domain went away
            data = b""
        if not data:
            loop.remove_reader(fd)
        received.put_nowait(data)

    async def to_client() -> None:
        while (data := await received.get()):
            await ws.send_bytes(data)

    async def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                await asyncio.sleep(0.01)

    loop.add_reader(fd, readable)
    try:
        await _race(to_client(), _pump_to_socket(ws, write))
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def _vnc(ws: web.WebSocketResponse, endpoint: tuple[str, int] | str) -> None:
    if isinstance(endpoint, str):
        reader, writer = await asyncio.open_unix_connection(endpoint)
    else:
        reader, writer = await asyncio.open_connection(*endpoint)

    async def to_client() -> None:
        while (data := await reader.read(CHUNK)):
            await ws.send_bytes(data)

    async def write(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    try:
        await _race(to_client(), _pump_to_socket(ws, write))
    finally:
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()


async def _race(*jobs: Coroutine[object, None, None]) -> None:
    """Run both directions until either ends (the other is cancelled)."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            if error is not None and not isinstance(error, ConnectionError | OSError):
                raise error
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _locate(node: Node, instance: str, kind: str) -> tuple[str, int] | str:
    """Where the running domain's `kind` console is; ConsoleUnavailable otherwise."""
    state = node.hv.state(instance)
    if state not in ("running", "blocked", "paused"):
        raise ConsoleUnavailable(f"instance {instance} is not running on this node")
    definition = node.hv.xml_of(instance)
    if kind == "serial":
        pty = serial_pty(definition)
        if pty is None:
            raise ConsoleUnavailable(f"instance {instance} has no serial console "
                                     "(serial_console is off)")
        return pty
    endpoint = vnc_endpoint(definition)
    if endpoint is None:
        raise ConsoleUnavailable(f"instance {instance} has no VNC server (vnc_bind_address "
                                 "is not set)")
    return endpoint


def add_routes(app: web.Application, node: Node, checker: rpccheck.RequestChecker,
               routes: access.Routes) -> None:
    async def stream(request: web.Request) -> web.StreamResponse:
        kind = request.path.rsplit("/", 1)[-1]
        instance = request.match_info["instance"]
        try:
            _, epoch = caller_args(node, checker, request, console.STREAM_METHODS[kind])
            if epoch is not None:
                node.accept_epoch(epoch)
            where = await asyncio.to_thread(_locate, node, instance, kind)
        except rpccheck.Refused as err:
            log.warning("refused console %s of %s from %s: %s", kind, instance,
                        request.remote, err.message)
            return _refusal(err.status, err.message)
        except HerderError as err:  # StaleEpoch, ConsoleUnavailable, a libvirt failure
            return _refusal(409, str(err))
        ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=4 << 20)
        if not ws.can_prepare(request).ok:  # the master only asks whether it could open
            return web.Response(status=426, text=f"the {kind} console of {instance} can open: "
                                                 "ask with 'Upgrade: websocket'")
        await ws.prepare(request)
        log.info("console %s of %s opened by %s", kind, instance, request.remote)
        try:
            if kind == "serial":
                assert isinstance(where, str)
                await _serial(ws, where)
            else:
                await _vnc(ws, where)
        except OSError as err:
            log.warning("console %s of %s: %s", kind, instance, err)
            await ws.close(code=1011, message=str(err)[:100].encode())
        finally:
            await ws.close()
            log.info("console %s of %s closed", kind, instance)
        return ws

    for kind in console.STREAM_KINDS:
        app.router.add_get(console.STREAM_PATH.replace("{kind}", kind), stream)
    routes.declare(stream, access.NODE_CONSOLE)
