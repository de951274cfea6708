"""The supervisor's control protocol (unix socket `/run/herder/supervise.sock`, root only).

One request per connection: a JSON line `{"command": "start", "daemons": ["masterd"]}`
(`start`, `stop`, `restart`, `status`), answered by one JSON line: `{"ok": true, "daemons":
[...]}` with the state of the named daemons (all of them for `status` without names), or
`{"ok": false, "error": "..."}`. `start` answers once the daemons are spawned, `stop` once they
have exited.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import msgspec

from herder.core import unixline, untrusted
from herder.core.errors import HerderError

MAX_LINE = unixline.MAX_LINE
# Daemon states.
RUNNING = "running"
STOPPED = "stopped"
BACKOFF = "backoff"  # crashed (or could not be run); restarted after a delay
NOT_MY_ROLE = "not-my-role"  # exited with code 11: stopped, not restarted
EXIT_NOT_MY_ROLE = 11


Command = Literal["start", "stop", "restart", "status"]


class Request(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    command: Command
    daemons: list[str] = []


class DaemonStatus(msgspec.Struct, frozen=True):
    name: str
    state: str
    enabled: bool
    pid: int | None = None
    since: float = 0.0  # wall-clock time of the last change of state
    restarts: int = 0  # automatic restarts after a crash
    last_exit: int | None = None  # exit code, or -N: killed by signal N
    message: str = ""  # the last problem (cannot run the command, ...)


class Reply(msgspec.Struct, frozen=True):
    ok: bool
    error: str = ""
    daemons: list[DaemonStatus] = []


def encode(message: Request | Reply) -> bytes:
    return msgspec.json.encode(message) + b"\n"


def decode_request(line: bytes) -> Request:
    """A request line (msgspec's ValidationError, or untrusted.BadDocument, when bad)."""
    decoded: Request = untrusted.decode(line, Request, what="request")
    return decoded


def request(path: Path, command: Command, daemons: Sequence[str] = (),
            timeout: float = 120.0) -> Reply:
    """Send one request; HerderError (one line) when the supervisor cannot be reached or
    refuses."""
    message = Request(command=command, daemons=list(daemons))
    reply = unixline.exchange(path, message, Reply, who="the supervisor", timeout=timeout)
    if not reply.ok:
        raise HerderError(f"supervisor: {reply.error}")
    return reply
