"""`POST /1/repair`: run a white-listed live-repair command on this node (herder extension).

Ganeti 3.0 has no opcode to run a repair command on a node, so maintd (on the master) asks the
node's mond. Off unless the local config says `[repair] enabled = true` (403 "repair is disabled
on this node" otherwise).

The body is a signed envelope (`herder.core.envelope`, confd's format) with the repair key,
derived from the cluster key for this protocol alone (`core.purpose_keys`, so no confd packet or
node RPC verifies here): `{"msg": <JSON text>, "salt": <any string>, "hmac": hex
HMAC-SHA1(repair key, salt + msg)}`; the message is

    {"command": NAME, "input": <any JSON: the diagnose object>, "event": "<uuid>",
     "timestamp": <int, ns since the epoch>, "node": "<the node's name>" (optional)}

A request naming another node is refused (403), so one signed for a node cannot be replayed on
another.

Refusals, each logged, each a JSON `{"error", "message"}`:

- 403: repair disabled; missing or bad signature (the message says which); replay (timestamp
  not newer than the last accepted one, or more than `max_skew` seconds from this node's clock);
  a command that exists but breaks the white-list rules (the diagnose collector's: regular file,
  owned by root, not writable by group or others, no setuid/setgid, executable);
- 400: body or message malformed (not JSON, unknown or missing fields, wrong types, no uuid);
- 404: no such command in the white-list directory (`[repair] commands_dir`; a name with a path
  separator is never in it);
- 409: a repair is already running (one at a time);
- 503: this node has no HMAC key to verify with.

An accepted request's timestamp becomes the last accepted one (kept in memory and in
`<run_dir>/mond-repair.json`, so a restart does not reopen the window). The command runs with
no arguments in a new session (its own process group), cwd `/`, a minimal environment plus
`HERDER_REPAIR_EVENT=<event>`, the input as JSON (one line) on stdin, for at most `timeout`
seconds (then the whole group is killed with SIGKILL). It never blocks the event loop. The
answer is 200 `{"event", "command", "exit_code", "stdout", "stderr", "duration", "timed_out"}`:
`exit_code` as subprocess gives it (negative: killed by that signal, -9 after a timeout),
`stdout`/`stderr` the last 4 KiB (UTF-8, undecodable bytes replaced), `duration` in seconds. A
client that goes away does not stop a running repair.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from herder.core import envelope, purpose_keys
from herder.core.errors import SignatureError
from herder.mond.collector import CollectorError, RepairSettings
from herder.mond.collectors.diagnose import check_command

log = logging.getLogger("herder.mond.repair")
JSON = "application/json"
STATE_FILE = "mond-repair.json"
OUTPUT_TAIL = 4096  # bytes of stdout/stderr kept (the last ones)
_SAFE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"}
_encode = msgspec.json.Encoder().encode


class RepairRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The signed message: all four fields required."""

    command: str
    input: Any
    event: str
    timestamp: int  # ns since the epoch
    node: str | None = None  # the node it is meant for (maintd always names it)


class Refused(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


@dataclass
class Running:
    event: str
    command: str
    started: float
    process: asyncio.subprocess.Process | None = None


class Repairer:
    """The route's state: settings, the last accepted timestamp, the running repair."""

    def __init__(self, settings: RepairSettings, key_loader: Callable[[], bytes | None], *,
                 state_dir: Path | None = None,
                 clock: Callable[[], int] = time.time_ns, node_name: str | None = None) -> None:
        self.settings = settings
        self.key_loader = key_loader
        self.node_name = node_name  # None: requests naming any node are taken (tests)
        self.state_file = state_dir / STATE_FILE if state_dir is not None else None
        self.clock = clock
        self.last_timestamp = self._load_last()
        self.running: Running | None = None
        self.completed = 0  # repairs run to the end (tests and debugging)

    # --- replay state -------------------------------------------------------------------------

    def _load_last(self) -> int:
        if self.state_file is None:
            return 0
        try:
            value = json.loads(self.state_file.read_text()).get("last_timestamp", 0)
        except (OSError, ValueError, AttributeError):
            return 0
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def _save_last(self) -> None:
        if self.state_file is None:
            return
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"last_timestamp": self.last_timestamp}) + "\n")
            tmp.replace(self.state_file)
        except OSError as err:  # memory still guards against replays until a restart
            log.warning("cannot save the last repair timestamp in %s: %s", self.state_file, err)

    # --- checking a request (synchronous: no await between the checks and the acceptance) ------

    def check(self, body: bytes) -> tuple[RepairRequest, Path]:
        """The request and the command's path; Refused says why not."""
        if not self.settings.enabled:
            raise Refused(403, "forbidden", "repair is disabled on this node "
                          "([repair] enabled = true in mond's config)")
        key = self.key_loader()
        if key is None:
            raise Refused(503, "unavailable", "this node has no HMAC key to verify repair "
                          "requests with (hmac_key in mond's config)")
        try:
            outer = msgspec.json.decode(body)
        except msgspec.DecodeError as err:
            raise Refused(400, "bad request", f"request body is not JSON: {err}") from None
        if not isinstance(outer, dict):
            raise Refused(400, "bad request", "request body must be a JSON object "
                          "(a signed envelope {msg, salt, hmac})")
        if not {"msg", "salt", "hmac"} & outer.keys():
            raise Refused(403, "forbidden", "missing signature: the body must be a signed "
                          "envelope {msg, salt, hmac} (herder.core.envelope)")
        try:
            repair_key = purpose_keys.derive(key, purpose_keys.MOND_REPAIR)
            msg, _salt = envelope.verify(outer, repair_key)
        except SignatureError as err:
            why = str(err)
            if why == "invalid signature":
                why = ("bad signature: the HMAC does not verify with the repair key derived "
                       "from this node's cluster key")
            else:
                why = f"missing or malformed signature: {why}"
            raise Refused(403, "forbidden", why) from None
        try:
            req = msgspec.json.decode(msg, type=RepairRequest)
        except msgspec.ValidationError as err:
            raise Refused(400, "bad request", f"malformed repair request: {err}") from None
        except msgspec.DecodeError as err:
            raise Refused(400, "bad request", f"signed message is not JSON: {err}") from None
        if not req.command:
            raise Refused(400, "bad request", "malformed repair request: empty command")
        if req.node is not None and self.node_name is not None and req.node != self.node_name:
            raise Refused(403, "forbidden", f"request signed for node {req.node!r}, not this "
                          f"node ({self.node_name})")
        try:
            uuid.UUID(req.event)
        except ValueError:
            raise Refused(400, "bad request", f"malformed repair request: event {req.event!r} "
                          "is not a UUID") from None
        skew = (req.timestamp - self.clock()) / 1e9
        if abs(skew) > self.settings.max_skew:
            raise Refused(403, "forbidden", f"replayed or mistimed request: timestamp is "
                          f"{skew:+.0f} s from this node's clock (max_skew "
                          f"{self.settings.max_skew:g} s)")
        if req.timestamp <= self.last_timestamp:
            raise Refused(403, "forbidden", f"replayed request: timestamp {req.timestamp} is not "
                          f"newer than the last accepted one ({self.last_timestamp})")
        path = self._command_path(req.command)
        if self.running is not None:
            busy = time.monotonic() - self.running.started
            raise Refused(409, "conflict", f"a repair is already running on this node (command "
                          f"{self.running.command}, event {self.running.event}, for "
                          f"{busy:.0f} s); one at a time")
        return req, path

    def _command_path(self, name: str) -> Path:
        directory = self.settings.commands_dir
        if ("/" in name or "\0" in name or name in (".", "..")
                or not os.path.lexists(directory / name)):
            raise Refused(404, "unknown command",
                          f"repair command {name!r} is not in the white-list ({directory})")
        try:
            return check_command(directory, name, what="repair command")
        except CollectorError as err:
            raise Refused(403, "forbidden", f"{err} (not white-listed)") from None

    # --- running ------------------------------------------------------------------------------

    async def execute(self, req: RepairRequest, path: Path) -> dict[str, Any]:
        """Run an accepted request to its end (or timeout); `self.running` is set meanwhile."""
        running = self.running = Running(req.event, req.command, time.monotonic())
        try:
            return await self._execute(req, path, running)
        finally:
            self.running = None

    async def _execute(self, req: RepairRequest, path: Path, running: Running
                       ) -> dict[str, Any]:
        out, err = bytearray(), bytearray()
        exit_code: int | None = None
        timed_out = False
        try:
            proc = await asyncio.create_subprocess_exec(
                str(path), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd="/", start_new_session=True,
                env={**_SAFE_ENV, "HERDER_REPAIR_EVENT": req.event},
            )
        except OSError as exc:
            log.error("repair %s (event %s): cannot start %s: %s", req.command, req.event, path,
                      exc)
            return self._answer(req, 127, b"", f"cannot start {path}: {exc}".encode(),
                                time.monotonic() - running.started, False)
        running.process = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        data = _encode(req.input) + b"\n"

        async def feed(stdin: asyncio.StreamWriter) -> None:
            try:
                stdin.write(data)
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the command does not read its input: its business
            finally:
                with contextlib.suppress(OSError):
                    stdin.close()

        async def tail(stream: asyncio.StreamReader, buf: bytearray) -> None:
            while chunk := await stream.read(65536):
                buf += chunk
                if len(buf) > OUTPUT_TAIL:
                    del buf[:-OUTPUT_TAIL]

        try:
            try:
                await asyncio.wait_for(
                    asyncio.gather(feed(proc.stdin), tail(proc.stdout, out),
                                   tail(proc.stderr, err), proc.wait()),
                    timeout=self.settings.timeout)
            except TimeoutError:
                timed_out = proc.returncode is None
                log.warning("repair %s (event %s) did not finish within %g s: killing its "
                            "process group", req.command, req.event, self.settings.timeout)
                _kill_group(proc.pid)
                await proc.wait()
            exit_code = proc.returncode
        finally:
            if proc.returncode is None:  # cancelled (shutdown): take the group down too
                _kill_group(proc.pid)
        self.completed += 1
        duration = time.monotonic() - running.started
        log.info("repair %s (event %s) ended: exit code %s, %.1f s%s", req.command, req.event,
                 exit_code, duration, ", timed out" if timed_out else "")
        return self._answer(req, exit_code, bytes(out), bytes(err), duration, timed_out)

    @staticmethod
    def _answer(req: RepairRequest, exit_code: int | None, out: bytes, err: bytes,
                duration: float, timed_out: bool) -> dict[str, Any]:
        return {"event": req.event, "command": req.command, "exit_code": exit_code,
                "stdout": out[-OUTPUT_TAIL:].decode(errors="replace"),
                "stderr": err[-OUTPUT_TAIL:].decode(errors="replace"),
                "duration": round(duration, 3), "timed_out": timed_out}

    def kill(self) -> None:
        """Shutting down: kill a running repair's process group."""
        running = self.running
        if running is not None and running.process is not None \
                and running.process.returncode is None:
            log.warning("mond stopping: killing repair %s (event %s)", running.command,
                        running.event)
            _kill_group(running.process.pid)

    # --- HTTP ---------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        peer = request.remote or "?"
        try:
            req, path = self.check(body)
        except Refused as refusal:
            log.warning("repair request from %s refused (%d): %s", peer, refusal.status,
                        refusal.message)
            return web.Response(body=_encode({"error": refusal.error,
                                              "message": refusal.message}),
                                status=refusal.status, content_type=JSON)
        # Accepted: nothing awaited since the checks, so no other request slipped in.
        self.last_timestamp = req.timestamp
        self.running = Running(req.event, req.command, time.monotonic())
        self._save_last()
        log.info("repair request from %s accepted: command %s, event %s", peer, req.command,
                 req.event)
        # Shielded: a client that goes away does not stop (or orphan) the repair.
        task = asyncio.ensure_future(self.execute(req, path))
        task.add_done_callback(_consume)
        result = await asyncio.shield(task)
        return web.Response(body=_encode(result), content_type=JSON)


def _consume(task: asyncio.Future[Any]) -> None:
    """A repair whose client went away: log its failure instead of "never retrieved"."""
    if not task.cancelled() and task.exception() is not None:
        log.error("repair failed: %r", task.exception())


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
