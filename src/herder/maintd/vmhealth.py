"""Instances that run but are not well, seen in the agents' inst-status reports (issue 18, items
5 and 11): pure decisions, no I/O.

From every node's `instance/inst-status` report of the tick's one poll of the agents:

* **hung** (`notification.HUNG`): the primary's report says `hung` (running, its CPU time
  standing still) in `hung_polls` consecutive reports (distinct report timestamps: a report
  mond had not renewed does not count twice);
* **paused on an I/O error** (`notification.PAUSED_IO_ERROR`): the primary's report says
  `paused` with the reason `ioerror`;
* **stray** (`STRAY`): a node's report lists, under `other_domains` with code 4, a running copy
  of an instance whose primary is another node, in two consecutive reports, while the primary's
  report of the same poll shows the instance `up`: the primary's copy is the live one. Never
  otherwise: a stray whose primary's copy does not run is noted and left alone.

Each becomes an instance incident (`model.Incident` with `instance`; `node` the node it was seen
on; the kind in its `original`) unless the instance already has an active one. Hung and paused
instances get the action configured in maintd's recovery settings (`notification.Recovery`):
`restart` (a hard reboot on the same node; a second hang within the failure window moves it
when it can move), `failover` (to another node when its disks are mirrored or shared), `notify`
(no job; completed once the condition is gone). A paused instance that is not moved also opens
a `notify` node incident for the storage of its node. A stray gets `stop-stray`
(OP_INSTANCE_STOP_STRAY on the stray's node, which confirms the primary's copy again); not on
a Ganeti cluster (no such opcode) and not while a job moves the instance.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from herder.core import model
from herder.core.notification import FAILOVER, HUNG, HUNG_POLLS, NOTIFY, PAUSED_IO_ERROR, RESTART
from herder.maintd import incidents as incident_lifecycle
from herder.maintd import instances as instance_incidents
from herder.maintd.rounds import Instance, Node

STRAY: Final = "stray"
KINDS = (HUNG, PAUSED_IO_ERROR, STRAY)
STRAY_POLLS = 2  # consecutive reports that must show a stray
PAUSED_POLLS = 1
SOURCE = "herder:mond"  # an incident's original["source"]


@dataclass(frozen=True)
class Sighting:
    """One report's view of one unwell instance."""

    kind: str
    instance: str  # name
    node: str  # the name of the node whose report it is
    detail: str
    stamp: Any = None  # the report's timestamp (None: unknown, every poll counts)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.instance, self.node)


def _entries(report: Any, key: str) -> tuple[list[Mapping[str, Any]], Any]:
    data = report.get("data", report) if isinstance(report, Mapping) else None
    found = data.get(key) if isinstance(data, Mapping) else None
    stamp = report.get("timestamp") if isinstance(report, Mapping) else None
    return [e for e in found if isinstance(e, Mapping)] if isinstance(found, list) else [], stamp


def _message(entry: Mapping[str, Any]) -> str:
    st = entry.get("status")
    return str(st.get("message") or "") if isinstance(st, Mapping) else ""


def _code(entry: Mapping[str, Any]) -> int:
    st = entry.get("status")
    try:
        return int(st.get("code", 0)) if isinstance(st, Mapping) else 0
    except (TypeError, ValueError):
        return 0


def sightings(reports: Mapping[str, Any], instances: Sequence[Instance]) -> list[Sighting]:
    """What this poll's inst-status reports (node name -> report) show. A stray is only
    reported when its primary's report shows the instance up."""
    by_name = {i.name: i for i in instances}
    found: list[Sighting] = []
    up_on_primary: set[str] = set()
    strays: list[Sighting] = []
    for node, report in sorted(reports.items()):
        entries, stamp = _entries(report, "instances")
        for entry in entries:
            inst = by_name.get(str(entry.get("name")))
            if inst is None or inst.pnode != node:
                continue
            actual = entry.get("actual_state")
            if actual == "hung":
                found.append(Sighting(HUNG, inst.name, node, _message(entry), stamp))
            elif actual == "paused" and entry.get("domain_state_reason") == "ioerror":
                found.append(Sighting(PAUSED_IO_ERROR, inst.name, node, _message(entry), stamp))
            elif actual == "up":
                up_on_primary.add(inst.name)
        others, stamp = _entries(report, "other_domains")
        for entry in others:
            inst = by_name.get(str(entry.get("instance")))
            if inst is not None and inst.pnode != node and _code(entry) == 4:
                strays.append(Sighting(STRAY, inst.name, node, _message(entry), stamp))
    found += [s for s in strays if s.instance in up_on_primary]
    return found


@dataclass
class SightingCounter:
    """Consecutive reports per sighting (kind, instance, node); a node whose report is missing
    this poll keeps its counts (no evidence either way)."""

    seen: dict[tuple[str, str, str], tuple[int, Any]] = field(default_factory=dict)

    def update(self, found: Iterable[Sighting], polled: Iterable[str]) -> dict[
            tuple[str, str, str], int]:
        polled_nodes = set(polled)
        fresh: dict[tuple[str, str, str], tuple[int, Any]] = {}
        for sighting in found:
            count, last = self.seen.get(sighting.key, (0, None))
            if sighting.stamp is None or sighting.stamp != last or count == 0:
                count += 1
            fresh[sighting.key] = (count, sighting.stamp)
        for key, value in self.seen.items():
            if key not in fresh and key[2] not in polled_nodes:
                fresh[key] = value
        self.seen = fresh
        return {key: count for key, (count, _) in fresh.items()}


@dataclass
class HealthResult:
    incidents: list[model.Incident] = field(default_factory=list)  # new instance incidents
    node_incidents: list[model.Incident] = field(default_factory=list)  # new notify incidents
    resolved: list[str] = field(default_factory=list)  # notify incidents whose cause is gone
    notes: list[str] = field(default_factory=list)


def kind_of(inc: model.Incident) -> str | None:
    original = inc.original
    kind = original.get("kind") if isinstance(original, Mapping) else None
    return kind if kind in KINDS else None


def _action(sighting: Sighting, inst: Instance, nodes: Sequence[Node],
            incidents: Sequence[model.Incident], actions: Mapping[str, str], now: float,
            window: float) -> tuple[model.RepairAction, str]:
    """The incident's action and why."""
    can_move = instance_incidents.movable(inst, {n.name: n for n in nodes})
    wanted = actions.get(sighting.kind, RESTART)
    if wanted == NOTIFY:
        return "notify", "configured to notify only"
    if wanted == FAILOVER:
        if can_move:
            return "relocate", f"configured to fail over ({inst.disk_template} disks can move)"
        if sighting.kind == PAUSED_IO_ERROR:
            return "notify", (f"its {inst.disk_template} disks cannot move to another node; "
                              "the node's storage needs the operator")
        return "restart", f"its {inst.disk_template} disks cannot move; restarting it in place"
    earlier = [i for i in incidents if i.instance == inst.uuid and now - i.ctime < window
               and kind_of(i) == sighting.kind]
    if earlier and can_move:
        return "relocate", f"it was {sighting.kind} before within {window:g}s"
    return "restart", "configured to restart it on its node"


def assess(found: Sequence[Sighting], counts: Mapping[tuple[str, str, str], int],
           nodes: Sequence[Node], instances: Sequence[Instance],
           incidents: Sequence[model.Incident], actions: Mapping[str, str], *,
           polled: Iterable[str] = (), busy: Iterable[str] = (), strays_allowed: bool = True,
           hung_polls: int = HUNG_POLLS, now: float | None = None,
           window: float = instance_incidents.FAILURE_WINDOW) -> HealthResult:
    """New incidents for this poll's sightings (`counts`: from the SightingCounter), and the
    notify incidents whose cause the nodes that answered (`polled`, names) no longer report;
    `busy`: names of instances a job is working on (a move's target copy is no stray);
    `strays_allowed` false on a cluster without OP_INSTANCE_STOP_STRAY."""
    now = time.time() if now is None else now
    out = HealthResult()
    by_name = {i.name: i for i in instances}
    node_by_name = {n.name: n for n in nodes}
    busy_names = set(busy)
    needed = {HUNG: hung_polls, PAUSED_IO_ERROR: PAUSED_POLLS, STRAY: STRAY_POLLS}
    taken: set[str] = set()
    for sighting in sorted(found, key=lambda s: (s.instance, s.kind, s.node)):
        inst = by_name.get(sighting.instance)
        node = node_by_name.get(sighting.node)
        if inst is None or node is None or not inst.uuid:
            continue
        if counts.get(sighting.key, 0) < needed[sighting.kind] or inst.name in taken:
            continue
        if any(i.instance == inst.uuid and incident_lifecycle.is_active(i) for i in incidents):
            continue  # being handled, or (notify) shown to the operator already
        if sighting.kind == STRAY:
            if not strays_allowed:
                out.notes.append(f"{inst.name} also runs on {node.name} (its primary is "
                                 f"{inst.pnode}); this cluster cannot stop a stray copy: stop "
                                 "it by hand")
                continue
            if inst.name in busy_names:
                continue  # a move's target, or a job that will settle it
            action: model.RepairAction = "stop-stray"
            why = f"its copy on its primary node {inst.pnode} runs"
        else:
            if inst.admin_state != "up" or instance_incidents.OPTOUT_TAG in inst.tags:
                continue
            action, why = _action(sighting, inst, nodes, incidents, actions, now, window)
        original = {"kind": sighting.kind, "source": SOURCE, "instance": inst.name,
                    "hostname": node.name, "detail": sighting.detail}
        out.incidents.append(model.Incident(
            uuid=str(uuidlib.uuid4()), node=node.uuid, instance=inst.uuid, original=original,
            action=action, repair_status="noted", tag="", ctime=now, mtime=now))
        out.notes.append(f"{sighting.kind} {inst.name} on {node.name}: {action} ({why})")
        taken.add(inst.name)
        if sighting.kind == PAUSED_IO_ERROR and action in ("notify", "restart"):
            storage = {"status": incident_lifecycle.NOTIFY, "command": "",
                       "details": {"storage-io-error": inst.name, "source": SOURCE}}
            if incident_lifecycle.find(incidents, node.uuid, storage) is None:
                out.node_incidents.append(
                    incident_lifecycle.notify_incident(node.uuid, storage, now))
    current = {s.key for s in found}
    polled_names = set(polled)
    for inc in incidents:
        kind = kind_of(inc)
        if (kind in (HUNG, PAUSED_IO_ERROR) and inc.action == "notify"
                and incident_lifecycle.is_active(inc) and isinstance(inc.original, Mapping)):
            key = (kind, str(inc.original.get("instance")), str(inc.original.get("hostname")))
            if key not in current and key[2] in polled_names and counts.get(key, 0) == 0:
                out.resolved.append(inc.uuid)
    return out
