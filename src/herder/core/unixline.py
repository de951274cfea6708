"""One request, one answer, each a JSON line on a unix socket: the client side of the control
sockets of herder's supervisor and of the simulator's port forwarder."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from herder.core import untrusted
from herder.core.errors import HerderError

MAX_LINE = 1 << 20
T = TypeVar("T")


def exchange(path: Path, request: Any, reply_type: type[T], *, who: str,
             fds: Sequence[int] = (), timeout: float = 60.0) -> T:
    """Send `request` (with the file descriptors `fds`), return the answer decoded as
    `reply_type`; HerderError (one line naming `who`) when nobody answers properly."""
    message = msgspec.json.encode(request) + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(path))
            if fds:
                socket.send_fds(conn, [message], list(fds))
            else:
                conn.sendall(message)
            data = bytearray()
            while not data.endswith(b"\n") and len(data) < MAX_LINE:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise HerderError(f"cannot reach {who} at {path}: {reason}") from None
    try:
        answer: T = untrusted.decode(bytes(data), reply_type, what="answer")
        return answer
    except msgspec.ValidationError as err:
        raise HerderError(f"{who} at {path} sent no valid answer: {err}") from None
    except untrusted.BadDocument as err:
        raise HerderError(f"{who} at {path} sent no valid answer: {err}") from None
