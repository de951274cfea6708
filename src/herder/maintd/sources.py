"""Incident sources: where maintd learns what needs repair.

A source answers, per node UUID, an `Observation`: the diagnose object it currently reports
(or None) and an error text to show when the node could not be observed or its report was
refused; it reads the agents' reports of the tick (`herder.maintd.agents`: one poll of every
node's mond, drained and offline nodes too). The self-diagnose source is the first one: it takes
each node's `node/diagnose` report and accepts it only when its
signature is the cluster HMAC (`herder.core.envelope.compute_hmac`, salt = the signature's
timestamp, message = the data as `envelope.dumps`) and its timestamp is newer than the last
one accepted for that node. Forged, unsigned and replayed reports are logged and refused. The
same report served again (same timestamp, same signature: mond's cache) is no replay: it just
brings nothing new.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from herder.core import envelope
from herder.maintd.agents import DIAGNOSE, AgentRound
from herder.maintd.rounds import Node

log = logging.getLogger("herder.maintd.sources")


@dataclass(frozen=True)
class Observation:
    node: str  # node UUID
    data: Any = None  # the diagnose object, None when not observed
    error: str = ""  # why not observed, or the diagnose script's own error
    timestamp: int = 0


class IncidentSource(Protocol):
    name: str

    async def poll(self, nodes: Sequence[Node], agents: AgentRound
                   ) -> dict[str, Observation]: ...


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
    """The self-diagnose collector of every node's mond, from the tick's `AgentRound`."""

    name = "diagnose"

    def __init__(self, key_loader: Callable[[], bytes | None]) -> None:
        self.key_loader = key_loader
        self.last: dict[str, tuple[int, str]] = {}
        self.current: dict[str, Observation] = {}
        self.rejected: dict[str, int] = {}

    def restore(self, seen: Mapping[str, Any]) -> None:
        """The last accepted (timestamp, hmac) per node, from before a restart."""
        for node, value in seen.items():
            if (isinstance(value, list | tuple) and len(value) == 2
                    and isinstance(value[0], int) and isinstance(value[1], str)):
                self.last.setdefault(node, (value[0], value[1]))

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

    async def poll(self, nodes: Sequence[Node], agents: AgentRound) -> dict[str, Observation]:
        key = self.key_loader()
        out = {}
        for node in nodes:
            report, error = agents.report(node, DIAGNOSE)
            out[node.uuid] = (Observation(node.uuid, None, error) if report is None
                              else self.accept(node, report, key))
        return out
