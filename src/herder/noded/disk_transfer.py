"""Copying a disk's bytes from one node to another over the network (what Ganeti's
import/export daemons do for `gnt-instance move`, without socat).

The master asks the target node to expect a disk (`blockdev_import_prepare`: the device is
assembled there and a one-time token issued, valid for `IMPORT_TTL` seconds), then asks the
source node to send it (`blockdev_export`): the source streams its device to the target's
noded, `POST /import/<token>` over HTTPS, showing its node certificate (the target accepts
only nodes of the cluster, as for node RPCs) and the token (the body is too large to be signed
as RPC bodies are: the token, issued over a signed RPC, stands for that). The target writes the
stream to its device and answers the number of bytes and their SHA-256, which the source
compares with what it sent.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herder.core.errors import HerderError

IMPORT_TTL = 600.0  # seconds a prepared import waits for its stream
CHUNK = 1 << 20


class TransferError(HerderError):
    """A disk could not be copied between nodes."""


@dataclass(frozen=True)
class PendingImport:
    path: str
    size: int  # bytes expected at most
    expires: float


class Imports:
    """The imports this node expects: token -> where the stream goes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, PendingImport] = {}

    def add(self, path: str, size: int, ttl: float = IMPORT_TTL) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._pending = {k: v for k, v in self._pending.items() if v.expires > now}
            self._pending[token] = PendingImport(path, size, now + ttl)
        return token

    def take(self, token: str) -> PendingImport | None:
        """The import for `token`, once (None: unknown or expired)."""
        with self._lock:
            pending = self._pending.pop(token, None)
        if pending is None or pending.expires < time.monotonic():
            return None
        return pending


class ImportWriter:
    """Writes one import's stream to its device (blocking calls: run them in a thread)."""

    def __init__(self, pending: PendingImport) -> None:
        self.pending = pending
        self.digest = hashlib.sha256()
        self.written = 0
        self._file = open(pending.path, "r+b")  # noqa: SIM115 (closed by close())

    def write(self, chunk: bytes) -> None:
        if self.written + len(chunk) > self.pending.size:
            raise TransferError(f"the stream is larger than the disk ({self.pending.size} "
                                "bytes)")
        self._file.write(chunk)
        self.digest.update(chunk)
        self.written += len(chunk)

    def close(self) -> dict[str, object]:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return {"bytes": self.written, "sha256": self.digest.hexdigest()}

    def abort(self) -> None:
        self._file.close()


def client_context(ca: Path, node_certificate: Path) -> ssl.SSLContext:
    """TLS towards another node: its certificate issued by the cluster CA, this node's
    certificate shown."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the node certificates name the cluster
    context.load_cert_chain(str(node_certificate))
    return context


def import_url(trust: Any, target: Mapping[str, Any], token: str
               ) -> tuple[str, ssl.SSLContext | None]:
    """Where to stream to another node's prepared import (`target`: address, port) and the
    TLS context showing this node's certificate (`trust`: noded.trust.NodeTrust; plain HTTP
    only for in-process tests' nodes without one)."""
    address = str(target["address"])
    host = f"[{address}]" if ":" in address else address
    ca, own = trust.secrets.certificate, trust.node_certificate
    context = client_context(ca, own) if own.exists() else None
    scheme = "https" if context is not None else "http"
    return f"{scheme}://{host}:{int(target['port'])}/import/{token}", context


def read_device(path: str, size: int, digest: hashlib._Hash) -> Iterator[bytes]:
    """The first `size` bytes of the device (fewer when it is shorter), hashed on the way."""
    left = size
    with open(path, "rb") as device:
        while left > 0:
            chunk = device.read(min(CHUNK, left))
            if not chunk:
                return
            digest.update(chunk)
            left -= len(chunk)
            yield chunk


def send(path: str, size: int, url: str, context: ssl.SSLContext | None,
         timeout: float = 3600.0) -> dict[str, object]:
    """Stream the device to `url` (the target's /import/<token>); the target's answer, checked
    against what was sent."""
    import httpx

    digest = hashlib.sha256()
    try:
        with httpx.Client(verify=context if context is not None else False,
                          timeout=httpx.Timeout(timeout, connect=10.0)) as client:
            response = client.post(url, content=read_device(path, size, digest),
                                    headers={"Content-Type": "application/octet-stream"})
    except (httpx.HTTPError, OSError) as err:
        raise TransferError(f"sending {path} failed: {err}") from None
    if response.status_code != 200:
        raise TransferError(f"the target refused the stream ({response.status_code}): "
                            f"{response.text.strip()[:200]}")
    answer = response.json().get("result", {})
    if answer.get("sha256") != digest.hexdigest():
        raise TransferError(f"the target received {answer.get('bytes')} bytes whose checksum "
                            "differs from what was sent")
    return {"bytes": answer.get("bytes"), "sha256": digest.hexdigest()}
