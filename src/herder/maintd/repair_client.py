"""Client of mond's live-repair route `POST /1/repair` (herder extension), for maintd.

The request is an envelope (`herder.core.envelope`'s format) signed with the repair key, which
is derived from the cluster HMAC key for this protocol alone (`core.purpose_keys`: no confd
packet or node RPC verifies here), around `{"command", "input", "event", "timestamp", "node"}`,
`timestamp` in integer nanoseconds since the epoch (strictly increasing per node: mond refuses
one not newer than the last it accepted, or more than its `max_skew` from its clock), `node` the
name of the node it is meant for (mond refuses a request for another node). The salt is the
timestamp as text.

`run_repair` returns mond's answer `{"event", "command", "exit_code", "stdout", "stderr",
"duration", "timed_out"}` (the command ran: a non-zero exit code is an answer, not an error). A
refusal raises `RepairRefusedError` (HTTP status and mond's message); a failure to reach mond or
read its answer raises `RepairTransportError`. Both are `RepairError`, a `HerderError`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from herder.core import envelope, purpose_keys, untrusted
from herder.core.errors import HerderError

REPAIR_PATH = "/1/repair"
_last_lock = threading.Lock()
_last_ns = 0


class RepairError(HerderError):
    """A live-repair request did not run."""


class RepairRefusedError(RepairError):
    """mond answered with a refusal (403 disabled/signature/replay, 400, 404, 409, ...)."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"repair refused by {url} (HTTP {status}): {message}")
        self.url, self.status, self.message = url, status, message


class RepairTransportError(RepairError):
    """mond could not be reached, or its answer could not be read."""


def _timestamp() -> int:
    """Now in ns, strictly increasing within this process (two requests in one clock tick)."""
    global _last_ns
    with _last_lock:
        _last_ns = max(time.time_ns(), _last_ns + 1)
        return _last_ns


def repair_url(url: str) -> str:
    """mond's base URL (or the route's full URL) -> the route's URL."""
    url = url.rstrip("/")
    return url if url.endswith(REPAIR_PATH) else url + REPAIR_PATH


def repair_key(cluster_key: bytes) -> bytes:
    """The key repair requests are signed with."""
    return purpose_keys.derive(cluster_key, purpose_keys.MOND_REPAIR)


def build_request(key: bytes, command: str, input: Any, event: str,
                  timestamp: int | None = None, node: str | None = None) -> bytes:
    """The signed request body (`key`: the cluster HMAC key); `node`: the node it is for."""
    ts = _timestamp() if timestamp is None else timestamp
    message = {"command": command, "input": input, "event": event, "timestamp": ts}
    if node is not None:
        message["node"] = node
    return envelope.sign_data(message, repair_key(key), str(ts))


def run_repair(url: str, key: bytes, command: str, input: Any, event: str,
               timeout: float = 330, node: str | None = None) -> dict[str, Any]:
    """Run white-listed repair `command` on the node whose mond is at `url` (e.g.
    `http://node1:1815`), with `input` as JSON on its stdin and `event` (a uuid) in
    `HERDER_REPAIR_EVENT`; wait up to `timeout` seconds (mond's own default limit is 300).
    `node`: that node's name (the request is refused by any other node)."""
    target = repair_url(url)
    body = build_request(key, command, input, event, node=node)
    try:  # no proxy from the environment: maintd talks to the node directly
        resp = httpx.post(target, content=body, timeout=timeout, trust_env=False,
                          headers={"Content-Type": "application/json"})
    except httpx.HTTPError as err:
        raise RepairTransportError(f"cannot reach mond at {target}: {err}") from None
    if resp.status_code >= 400:
        try:
            detail = untrusted.loads(resp.content)
        except ValueError:
            detail = None
        message = (detail.get("message") if isinstance(detail, dict) else None) \
            or resp.reason_phrase
        raise RepairRefusedError(target, resp.status_code, str(message))
    try:
        answer = untrusted.loads(resp.content)
    except ValueError as err:
        raise RepairTransportError(f"mond at {target} sent an invalid answer: {err}") from None
    if not isinstance(answer, dict) or "exit_code" not in answer:
        raise RepairTransportError(f"mond at {target} sent an unexpected answer: "
                                   f"{resp.content[:200]!r}")
    return answer
