"""A disk's bytes from a node of another cluster (a move between clusters: Ganeti's remote
import, which listens with its import daemon on a port of its own for the source cluster's
export daemon).

The master asks this node to expect disk `idx` from another cluster (`remote_import_prepare`
with the source cluster's CA, which the source cluster signed with the cluster domain secret
and this cluster's master checked): the device is assembled, a listener opened on a port of
its own, for one stream, with a one-time token (Ganeti's `magic`). The listener shows this
node's certificate and takes only a client certificate issued by the source cluster's CA (not
this cluster's: noded's own port and its callers stay as they are), then the token; it writes
the stream as an import within the cluster does (`disk_transfer`, through the OS `import`
script) and answers bytes and checksum to the sender. The master polls the outcome
(`remote_import_status`) and may end a listener that is no longer wanted
(`remote_import_abort`). A listener nobody streams to within `IMPORT_TTL` closes, failed."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import logging
import secrets
import ssl
import threading
import time
from pathlib import Path
from typing import Literal

from aiohttp import StreamReader, web

from herder.core import serve
from herder.core.errors import HerderError
from herder.core.rpcdefs.backup_calls import RemoteImportProgress
from herder.noded import disk_transfer
from herder.noded.disk_transfer import IMPORT_TTL, PendingImport, TransferError

log = logging.getLogger("herder.noded")

KEEP_FINISHED = 3600.0  # seconds an outcome nobody asked for is kept
State = Literal["listening", "receiving", "done", "failed"]


async def next_chunk(content: StreamReader) -> bytes:
    """The next CHUNK bytes of a stream (fewer only at its end): one hand-off to the writer's
    thread per MiB, not one per network read (of 64 KiB or less)."""
    parts: list[bytes] = []
    size = 0
    while size < disk_transfer.CHUNK:
        part = await content.read(disk_transfer.CHUNK - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def receive(content: StreamReader, pending: PendingImport) -> dict[str, object]:
    """Write a stream to its import (device, file or OS script): bytes and checksum written;
    TransferError (or the stream's own error) when it could not be."""
    try:
        writer = await asyncio.to_thread(disk_transfer.open_writer, pending)
    except OSError as err:
        raise TransferError(f"cannot open {pending.path}: {err.strerror}") from None
    try:
        while chunk := await next_chunk(content):
            await asyncio.to_thread(writer.write, chunk)
        return await asyncio.to_thread(writer.close)
    except BaseException:
        await asyncio.to_thread(writer.abort)
        raise


def server_context(node_certificate: Path, peer_ca: str) -> ssl.SSLContext:
    """TLS of a remote import's listener: this node's certificate shown, a client certificate
    of the source cluster's CA required."""
    if not node_certificate.exists():
        raise TransferError("this node has no node certificate: it cannot take a stream "
                            "from another cluster")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(node_certificate))
        context.load_verify_locations(cadata=peer_ca)
    except (OSError, ssl.SSLError) as err:
        raise TransferError(f"cannot set up TLS for the remote import: {err}") from None
    context.verify_mode = ssl.CERT_REQUIRED
    return context


class RemoteImport:
    """One listener for one stream from another cluster, in a thread with its own loop."""

    def __init__(self, pending: PendingImport, context: ssl.SSLContext, address: str,
                 ttl: float = IMPORT_TTL, instance: str = "") -> None:
        self.token = secrets.token_urlsafe(32)
        self.pending, self.ttl, self.instance = pending, ttl, instance
        self.state: State = "listening"
        self.result: dict[str, object] = {}
        self.error: str | None = None
        self.finished: float | None = None
        self._transport: asyncio.Transport | None = None  # the stream's connection
        # core.serve's endpoint (its limits and handshake deadline) on a port of its own
        self._endpoint = serve.Http(web.Application(), [serve.Listener(address, 0, tls=context)],
                                    limits=serve.Limits(per_source=4, streamed=("/import/",)))
        self._endpoint.app.router.add_post("/import/{token}", self._stream)
        self._loop = asyncio.new_event_loop()
        self._started = asyncio.Event()
        self._done = asyncio.Event()
        bound: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(bound,), daemon=True,
                                        name=f"remote-import-{address}")
        self._thread.start()
        try:
            self.port: int = bound.result(timeout=30)
        except (HerderError, concurrent.futures.TimeoutError) as err:
            self.abort("not listening")
            raise TransferError(str(err) or f"cannot listen on {address}") from None

    def progress(self) -> RemoteImportProgress:
        return RemoteImportProgress(
            state=self.state, bytes=int(str(self.result["bytes"])) if self.result else None,
            checksum=str(self.result["checksum"]) if self.result else None, error=self.error)

    def abort(self, why: str) -> None:
        """End the listener (and a stream under way), failed."""
        with contextlib.suppress(RuntimeError):  # its loop has ended (and was closed) already
            self._loop.call_soon_threadsafe(self._finish, "failed", why)
        self._thread.join(timeout=60)

    def _finish(self, state: State, error: str | None = None) -> None:
        if self.state in ("done", "failed"):
            return
        self.state, self.error, self.finished = state, error, time.monotonic()
        if state == "failed" and self._transport is not None:
            self._transport.abort()  # the sender learns at once, not at its timeout
        self._started.set()
        self._done.set()

    def _run(self, bound: concurrent.futures.Future[int]) -> None:
        """The listener's thread: its loop closed at the end (a noded serves many imports)."""
        try:
            self._loop.run_until_complete(self._serve(bound))
        finally:
            self._loop.close()

    async def _serve(self, bound: concurrent.futures.Future[int]) -> None:
        try:
            (address, *_) = await self._endpoint.open()
        except HerderError as err:
            await self._endpoint.close()  # the runner open() set up before its bind failed
            bound.set_exception(err)
            return
        bound.set_result(address.port)
        try:
            try:
                await asyncio.wait_for(self._started.wait(), self.ttl)
            except TimeoutError:
                self._finish("failed", f"no stream came within {self.ttl:g} s")
            await self._done.wait()
        finally:
            await self._endpoint.close()

    async def _stream(self, request: web.Request) -> web.Response:
        if not hmac.compare_digest(request.match_info["token"], self.token) or \
                self.state != "listening":
            return web.json_response({"error": "no such import"}, status=403)
        self.state = "receiving"
        self._transport = request.transport
        self._started.set()
        try:
            result = await receive(request.content, self.pending)
        except asyncio.CancelledError:
            self._finish("failed", "the listener was closed during the stream")
            raise
        except Exception as err:
            why = str(err) or type(err).__name__
            log.warning("remote import into %s failed: %s", self.pending.path, why)
            self._finish("failed", f"the stream broke off: {why}")
            return web.json_response({"error": why}, status=500)
        self.result = result
        log.info("imported %s bytes from another cluster into %s", result["bytes"],
                 self.pending.path)
        self._finish("done")
        return web.json_response({"result": result})


class RemoteImports:
    """This node's remote imports: token -> listener."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._imports: dict[str, RemoteImport] = {}

    def add(self, pending: PendingImport, context: ssl.SSLContext, address: str,
            ttl: float = IMPORT_TTL, instance: str = "") -> RemoteImport:
        made = RemoteImport(pending, context, address, ttl, instance)
        now = time.monotonic()
        with self._lock:
            self._imports = {k: v for k, v in self._imports.items()
                             if v.finished is None or now - v.finished < KEEP_FINISHED}
            self._imports[made.token] = made
        return made

    def find(self, token: str) -> RemoteImport:
        with self._lock:
            found = self._imports.get(token)
        if found is None:
            raise TransferError("no such remote import on this node")
        return found

    def forget(self, token: str) -> None:
        with self._lock:
            self._imports.pop(token, None)

    def abort_instance(self, instance: str) -> int:
        """End the listeners writing into `instance`'s disks (it is being removed: a master
        that died mid-import left them, and its recovery removes the half-made instance);
        how many there were."""
        with self._lock:
            ending = {token: listener for token, listener in self._imports.items()
                      if listener.instance == instance and listener.finished is None}
            for token in ending:
                del self._imports[token]
        for listener in ending.values():
            listener.abort(f"instance {instance} is being removed")
        return len(ending)

    def close(self) -> None:
        with self._lock:
            listeners, self._imports = list(self._imports.values()), {}
        for listener in listeners:
            listener.abort("the node daemon stops")
