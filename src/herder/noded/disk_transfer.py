"""Copying a disk's bytes from one node to another over the network (what Ganeti's
import/export daemons do for `gnt-instance move`, without socat).

The master asks the target node to expect a disk (`blockdev_import_prepare`: the device is
assembled there and a one-time token issued, valid for `IMPORT_TTL` seconds), then asks the
source node to send it (`blockdev_export`): the source streams its device to the target's
noded, `POST /import/<token>` over HTTPS, showing its node certificate (the target accepts
only nodes of the cluster, as for node RPCs) and the token (the body is too large to be signed
as RPC bodies are: the token, issued over a signed RPC, stands for that). The target writes the
stream to its device and answers the number of bytes and their checksum, which the source
compares with what it sent.

The checksum is XXH3-128 (the `xxhash` library; rsync's default since 3.2): it catches a
stream that lost, repeated or changed bytes between the two ends of herder's own path, while
the TLS connection already authenticates each byte on the wire; SHA-256, which it replaced,
cost more CPU than the copy itself (bench/backup.py). Where the written bytes go to a device
or file, their write-back to the disk is started as the stream goes on (every `WRITEBACK`
bytes), so that the fsync at its end does not wait for all of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import xxhash

from herder.core.errors import HerderError
from herder.core.rpcdefs import disk_calls
from herder.noded import osdef
from herder.noded.bdev.base import BlockDevError, ImportSink
from herder.noded.trust import NodeTrust

IMPORT_TTL = 600.0  # seconds a prepared import waits for its stream
CHUNK = 1 << 20
WRITEBACK = 64 << 20  # bytes written after which their write-back to the disk is started
CHECKSUM = "xxh3_128"
COMMAND_WAIT = 600.0  # seconds an import's command is given to write what it read, once fed


class Checksum:
    """The checksum of a stream's bytes, as `Transferred.checksum` carries it."""

    def __init__(self) -> None:
        self._hash = xxhash.xxh3_128()

    def update(self, chunk: bytes) -> None:
        self._hash.update(chunk)

    def text(self) -> str:
        return f"{CHECKSUM}:{self._hash.hexdigest()}"


def wide_pipe() -> tuple[int, int]:
    """A pipe of CHUNK bytes where the kernel allows it (fewer switches between the OS script
    and noded than with the default 64 KiB)."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):  # above /proc/sys/fs/pipe-max-size: the default
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, CHUNK)
    return read_fd, write_fd


class TransferError(HerderError):
    """A disk could not be copied between nodes."""


@dataclass(frozen=True)
class OsStream:
    """An OS definition's `export` or `import` script a disk's stream goes through (Ganeti's
    rule: the OS decides what an export holds), with its environment and log."""

    definition: osdef.OsDefinition
    script: osdef.OsScript
    env: Mapping[str, str]
    log_file: Path
    timeout: float


@dataclass(frozen=True)
class PendingImport:
    path: str  # the device or file written (with `sink`: the device the sink writes)
    size: int  # bytes expected at most
    expires: float
    script: OsStream | None = None  # the stream goes to this script's stdin, not to `path`
    # a device without a path here (a userspace rbd image): the stream, or the script's
    # output, goes into this command's stdin
    sink: ImportSink | None = None


class Imports:
    """The imports this node expects: token -> where the stream goes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, PendingImport] = {}

    def add(self, path: str, size: int, ttl: float = IMPORT_TTL,
            script: OsStream | None = None, sink: ImportSink | None = None) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._pending = {k: v for k, v in self._pending.items() if v.expires > now}
            self._pending[token] = PendingImport(path, size, now + ttl, script, sink)
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
        self.digest = Checksum()
        self.written = 0
        self._synced = 0  # the bytes whose write-back was started
        self._file = open(pending.path, "r+b")  # noqa: SIM115 (closed by close())

    def write(self, chunk: bytes) -> None:
        if self.written + len(chunk) > self.pending.size:
            raise TransferError(f"the stream is larger than the disk ({self.pending.size} "
                                "bytes)")
        self._file.write(chunk)
        self.digest.update(chunk)
        self.written += len(chunk)
        if self.written - self._synced >= WRITEBACK:
            self._start_writeback()

    def _start_writeback(self) -> None:
        """Linux starts writing the dirty pages of a range back on POSIX_FADV_DONTNEED (and
        drops them once clean), without waiting for them."""
        self._file.flush()
        os.posix_fadvise(self._file.fileno(), self._synced, self.written - self._synced,
                         os.POSIX_FADV_DONTNEED)
        self._synced = self.written

    def close(self) -> dict[str, object]:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return {"bytes": self.written, "checksum": self.digest.text()}

    def abort(self) -> None:
        self._file.close()


class ScriptImportWriter:
    """Writes one import's stream into an OS `import` script's stdin (the script writes the
    disk, or with `stdout` its output is what the disk takes); blocking calls: run them in a
    thread."""

    def __init__(self, pending: PendingImport, stdout: IO[bytes] | None = None) -> None:
        assert pending.script is not None
        self.pending, self.script, self._stdout = pending, pending.script, stdout
        self.digest = Checksum()
        self.written = 0
        read_fd, write_fd = wide_pipe()
        self._pipe = open(write_fd, "wb")  # noqa: SIM115 (closed by close() or abort())
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(read_fd,), daemon=True)
        self._thread.start()

    def _run(self, read_fd: int) -> None:
        try:
            with open(read_fd, "rb") as stdin:
                osdef.run_os_script(self.script.definition, self.script.script,
                                    self.script.env, self.script.timeout,
                                    self.script.log_file, stdin=stdin, stdout=self._stdout)
        except (osdef.OsError, OSError) as err:
            self._failure = err

    def write(self, chunk: bytes) -> None:
        try:
            self._pipe.write(chunk)
        except BrokenPipeError:
            self._thread.join()
            raise TransferError(f"the OS import script stopped reading: "
                                f"{_first_line(self._failure)}") from None
        self.digest.update(chunk)
        self.written += len(chunk)

    def close(self) -> dict[str, object]:
        self._pipe.close()
        self._thread.join()
        if self._failure is not None:
            raise TransferError(f"the OS import script failed: {_first_line(self._failure)}")
        return {"bytes": self.written, "checksum": self.digest.text()}

    def abort(self) -> None:
        self._pipe.close()
        self._thread.join()


class CommandImportWriter:
    """Writes one import's stream into the command that takes a device's bytes on its stdin
    (a userspace rbd image's `rbd import`: `PendingImport.sink`), raw or through the OS
    `import` script, whose stdout the command reads then. What the command wrote is put in
    place only when the stream, the script and the command all ended well, and removed
    otherwise. Blocking calls: run them in a thread."""

    def __init__(self, pending: PendingImport) -> None:
        assert pending.sink is not None
        self.pending, self.sink = pending, pending.sink
        self.digest = Checksum()
        self.written = 0
        # the command's messages in a file: a pipe nobody reads while the stream goes on
        # would stop the command once full
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close() or abort())
        try:
            self._proc = self.sink.start(self._errors)
        except BlockDevError as err:
            self._errors.close()
            raise TransferError(f"cannot start {self._name()}: {err}") from None
        assert self._proc.stdin is not None
        self._stdin: IO[bytes] = self._proc.stdin
        self._script = ScriptImportWriter(pending, stdout=self._stdin) \
            if pending.script is not None else None

    def _name(self) -> str:
        return " ".join(self.sink.argv[:2])

    def _command_error(self) -> str:
        """The command's last message line (its stderr file)."""
        self._errors.seek(0)
        lines = self._errors.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no message"

    def write(self, chunk: bytes) -> None:
        if self._script is not None:
            try:
                self._script.write(chunk)
            except TransferError as err:
                raise TransferError(f"{err} ({self._ended_command()})") from None
            return
        if self.written + len(chunk) > self.pending.size:
            raise TransferError(f"the stream is larger than the disk ({self.pending.size} "
                                "bytes)")
        try:
            self._stdin.write(chunk)
        except BrokenPipeError:
            raise TransferError(f"{self._name()} stopped reading: "
                                f"{self._ended_command()}") from None
        self.digest.update(chunk)
        self.written += len(chunk)

    def _ended_command(self) -> str:
        code = self._proc.poll()
        return "it still runs" if code is None else \
            f"{self._name()} ended with exit code {code}: {self._command_error()}"

    def close(self) -> dict[str, object]:
        try:
            if self._script is not None:
                try:
                    answer = self._script.close()
                finally:
                    self._stdin.close()  # the script's copy is gone with it: the command's EOF
            else:
                self._stdin.close()
                answer = {"bytes": self.written, "checksum": self.digest.text()}
            code = self._wait()
            if code != 0:
                raise TransferError(f"{self._name()} into {self.sink.what} failed (exit code "
                                    f"{code}): {self._command_error()}")
        except BaseException:
            with contextlib.suppress(OSError):
                self._stdin.close()
            self._wait()  # (not removed under the command still writing it)
            self._discard()
            raise
        finally:
            self._errors.close()
        try:
            self.sink.finish()
        except BlockDevError as err:
            raise TransferError(f"putting the import into {self.sink.what} failed: "
                                f"{err}") from None
        return answer

    def _wait(self) -> int:
        """The command's exit code once it has written what it read (its process group
        killed when it does not end within COMMAND_WAIT)."""
        try:
            return self._proc.wait(timeout=COMMAND_WAIT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            return self._proc.wait()

    def _discard(self) -> None:
        with contextlib.suppress(BlockDevError):
            self.sink.discard()

    def abort(self) -> None:
        """The stream cut: the command given its end of input (it ends cleanly, its client's
        hold on what it wrote released, where a killed one would keep it for a while), then
        what it wrote removed."""
        try:
            if self._script is not None:
                self._script.abort()
            with contextlib.suppress(OSError):
                self._stdin.close()
            self._wait()
            self._discard()
        finally:
            self._errors.close()


def _first_line(err: BaseException | None) -> str:
    """An OS script's error for the operator: its first line (naming the script's log), not
    the log's last lines."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def open_writer(pending: PendingImport
                ) -> ImportWriter | ScriptImportWriter | CommandImportWriter:
    """Where an import's stream goes: its device or file, its OS script, or the command
    writing a device without a path here (through its OS script when it has one)."""
    if pending.sink is not None:
        return CommandImportWriter(pending)
    return ScriptImportWriter(pending) if pending.script is not None else ImportWriter(pending)


def client_context(ca: Path, node_certificate: Path) -> ssl.SSLContext:
    """TLS towards another node: its certificate issued by the cluster CA, this node's
    certificate shown."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the node certificates name the cluster
    context.load_cert_chain(str(node_certificate))
    return context


def import_url(trust: NodeTrust, target: disk_calls.ExportTarget, token: str,
               peer_ca: str | None = None) -> tuple[str, ssl.SSLContext | None]:
    """Where to stream to another node's prepared import and the TLS context showing this
    node's certificate (plain HTTP only for in-process tests' nodes without one); with
    `peer_ca`, the target is a node of another cluster, whose certificate that CA issued."""
    host = f"[{target.address}]" if ":" in target.address else target.address
    ca, own = trust.secrets.certificate, trust.node_certificate
    if peer_ca is not None:
        if not own.exists():
            raise TransferError("this node has no node certificate to show another cluster")
        remote = ssl.create_default_context(cadata=peer_ca)
        remote.check_hostname = False  # the node certificates name their cluster
        remote.load_cert_chain(str(own))
        return f"https://{host}:{target.port}/import/{token}", remote
    context = client_context(ca, own) if own.exists() else None
    scheme = "https" if context is not None else "http"
    return f"{scheme}://{host}:{target.port}/import/{token}", context


def read_device(path: str, size: int, digest: Checksum) -> Iterator[bytes]:
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
         timeout: float = 3600.0) -> disk_calls.Transferred:
    """Stream the device to `url` (the target's /import/<token>); the target's answer, checked
    against what was sent."""
    digest = Checksum()
    return _post(path, read_device(path, size, digest), digest, url, context, timeout)


def read_stream(source: IO[bytes], digest: Checksum) -> Iterator[bytes]:
    while chunk := source.read(CHUNK):
        digest.update(chunk)
        yield chunk


def send_stream(source: IO[bytes], what: str, url: str, context: ssl.SSLContext | None,
                timeout: float = 3600.0) -> disk_calls.Transferred:
    """Stream what `source` gives until its end (a command's output) to `url`."""
    digest = Checksum()
    return _post(what, read_stream(source, digest), digest, url, context, timeout)


def send_through_script(stream: OsStream, url: str, context: ssl.SSLContext | None,
                        timeout: float = 3600.0, stdin: IO[bytes] | None = None
                        ) -> disk_calls.Transferred:
    """Stream what the OS `export` script writes (the disk being its $EXPORT_DEVICE, or the
    bytes on its `stdin` then) to `url`; the script must succeed, or the stream counts as
    failed (the target then holds a partial dump, which the master removes)."""
    read_fd, write_fd = wide_pipe()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            with open(write_fd, "wb") as stdout:
                osdef.run_os_script(stream.definition, stream.script, stream.env,
                                    stream.timeout, stream.log_file, stdin=stdin,
                                    stdout=stdout)
        except (osdef.OsError, OSError) as err:
            failure.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    digest = Checksum()
    try:
        with open(read_fd, "rb") as source:
            answer = _post(f"the OS {stream.script} script's output",
                           read_stream(source, digest), digest, url, context, timeout)
    finally:
        thread.join()
    if failure:
        raise TransferError(f"the OS {stream.script} script failed: {_first_line(failure[0])}")
    return answer


def _post(what: str, content: Iterator[bytes], digest: Checksum, url: str,
          context: ssl.SSLContext | None, timeout: float) -> disk_calls.Transferred:
    import httpx

    try:
        with httpx.Client(verify=context if context is not None else False,
                          timeout=httpx.Timeout(timeout, connect=10.0)) as client:
            response = client.post(url, content=content,
                                   headers={"Content-Type": "application/octet-stream"})
    except (httpx.HTTPError, OSError) as err:
        raise TransferError(f"sending {what} failed: {err}") from None
    if response.status_code != 200:
        raise TransferError(f"the target refused the stream ({response.status_code}): "
                            f"{response.text.strip()[:200]}")
    answer = response.json().get("result", {})
    if answer.get("checksum") != digest.text():
        raise TransferError(f"the target received {answer.get('bytes')} bytes whose checksum "
                            "differs from what was sent")
    return disk_calls.Transferred(bytes=answer.get("bytes"), checksum=digest.text())
