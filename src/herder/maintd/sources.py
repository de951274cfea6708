"""Incident sources: where maintd learns what needs repair.

A source answers, per node UUID, an `Observation`: the diagnose object it currently reports
(or None) and an error text to show when the node could not be observed or its report was
refused. The self-diagnose source is the first one: it polls every node's mond (drained and
offline nodes too: an evacuated node is offline but still observed) at
`GET http://<node ip>:<port>/1/report/node/diagnose` and accepts a report only when its
signature is the cluster HMAC (`herder.core.envelope.compute_hmac`, salt = the signature's
timestamp, message = the data as `envelope.dumps`) and its timestamp is newer than the last
one accepted for that node. Forged, unsigned and replayed reports are logged and refused. The
same report served again (same timestamp, same signature: mond's cache) is no replay: it just
brings nothing new.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from herder.core import envelope
from herder.maintd.rounds import Node

log = logging.getLogger("herder.maintd.sources")

DIAGNOSE_PATH = "/1/report/node/diagnose"


@dataclass(frozen=True)
class Observation:
    node: str  # node UUID
    data: Any = None  # the diagnose object, None when not observed
    error: str = ""  # why not observed, or the diagnose script's own error
    timestamp: int = 0


class IncidentSource(Protocol):
    name: str

    async def poll(self, nodes: Sequence[Node]) -> dict[str, Observation]: ...


class Verdict:
    OK = "ok"
    SAME = "same"
    FORGED = "forged"
    UNSIGNED = "unsigned"
    REPLAYED = "replayed"
    MALFORMED = "malformed"


def check_report(key: bytes | None, report: Any, last: tuple[int, str] | None) -> str:
    """The verdict on one diagnose report given the last accepted (timestamp, hmac)."""
    if not isinstance(report, Mapping) or "data" not in report:
        return Verdict.MALFORMED
    sig = report.get("signature")
    if not isinstance(sig, Mapping) or not isinstance(sig.get("hmac"), str):
        return Verdict.UNSIGNED
    ts = sig.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int):
        return Verdict.UNSIGNED
    if "timestamp" in report and report["timestamp"] != ts:
        return Verdict.FORGED
    if key is None:
        return Verdict.UNSIGNED
    expected = envelope.compute_hmac(key, str(ts), envelope.dumps(report["data"]))
    if not hmac.compare_digest(expected, sig["hmac"]):
        return Verdict.FORGED
    if last is not None:
        if ts == last[0] and sig["hmac"] == last[1]:
            return Verdict.SAME
        if ts <= last[0]:
            return Verdict.REPLAYED
    return Verdict.OK


def diagnose_error(data: Any) -> str:
    """The error a diagnose object carries (mond's fallback `details.diagnose-error`)."""
    if isinstance(data, Mapping):
        details = data.get("details")
        if isinstance(details, Mapping) and details.get("diagnose-error"):
            return str(details["diagnose-error"])
    return ""


class DiagnoseSource:
    """Polls the self-diagnose collector of every node's mond."""

    name = "diagnose"

    def __init__(self, key_loader: Callable[[], bytes | None], port: int = 1815,
                 timeout: float = 5.0, address: Callable[[Node], str] | None = None) -> None:
        self.key_loader = key_loader
        self.port = port
        self.timeout = timeout
        self.address = address or (lambda n: n.ip or n.name)
        self.last: dict[str, tuple[int, str]] = {}
        self.current: dict[str, Observation] = {}
        self.rejected: dict[str, int] = {}

    def restore(self, seen: Mapping[str, Any]) -> None:
        """The last accepted (timestamp, hmac) per node, from before a restart."""
        for node, value in seen.items():
            if (isinstance(value, list | tuple) and len(value) == 2
                    and isinstance(value[0], int) and isinstance(value[1], str)):
                self.last.setdefault(node, (value[0], value[1]))

    def url(self, node: Node) -> str:
        host = self.address(node)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}{DIAGNOSE_PATH}"

    def accept(self, node: Node, report: Any, key: bytes | None) -> Observation:
        verdict = check_report(key, report, self.last.get(node.uuid))
        if verdict == Verdict.SAME and node.uuid in self.current:
            return self.current[node.uuid]
        if verdict not in (Verdict.OK, Verdict.SAME):
            self.rejected[verdict] = self.rejected.get(verdict, 0) + 1
            log.warning("refusing %s diagnose report from %s", verdict, node.name)
            old = self.current.get(node.uuid)
            # a refused report changes nothing: the last accepted observation stays
            return Observation(node.uuid, old.data if old else None,
                               f"refused {verdict} report", old.timestamp if old else 0)
        sig = report["signature"]
        self.last[node.uuid] = (sig["timestamp"], sig["hmac"])
        data = report["data"]
        obs = Observation(node.uuid, data, diagnose_error(data), sig["timestamp"])
        self.current[node.uuid] = obs
        return obs

    async def _one(self, session: aiohttp.ClientSession, node: Node,
                   key: bytes | None) -> Observation:
        try:
            async with session.get(self.url(node)) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:200]
                    return Observation(node.uuid, None, f"mond answered {resp.status}: {text}")
                report = await resp.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError, OSError) as err:
            log.info("no diagnose report from %s: %s", node.name, err)
            return Observation(node.uuid, None, f"unreachable: {type(err).__name__} {err}")
        return self.accept(node, report, key)

    async def poll(self, nodes: Sequence[Node]) -> dict[str, Observation]:
        key = self.key_loader()
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            results = await asyncio.gather(*(self._one(session, n, key) for n in nodes))
        return {o.node: o for o in results}
