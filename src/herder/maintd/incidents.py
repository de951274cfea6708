"""Incidents (design-maintd "Repair-event life cycle"): pure functions, no I/O.

An incident is keyed by (node UUID, diagnose object): the same object on the same node is the
same incident. A more invasive recommendation for a node supersedes its milder active incidents
(they become `canceled`: nothing more is done for them, and they are forgotten once no longer
observed). Statuses: noted -> pending -> completed | failed; any active -> canceled.

herder's `notify` node incidents (`notify_incident`: maintd opens one when a node's storage
failed an instance and nothing can move it) plan no job: they mark the node as unhealthy and
are shown until the operator cancels them; a diagnose cannot recommend `notify`, and no other
incident supersedes one.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeGuard

from herder.core import model

ACTIONS = ("Ok", "live-repair", "evacuate", "evacuate-failover")  # a diagnose's statuses
NOTIFY: Final = "notify"
NODE_FAILED: Final = "node-failed"  # herder.maintd.nodefail: outranks every other one
SEVERITY = {name: rank for rank, name in enumerate(("Ok", NOTIFY, *ACTIONS[1:], NODE_FAILED))}
ACTIVE = ("noted", "pending")
FINAL = ("canceled", "failed", "completed")
READY_PREFIX = "maintd:repairready:"
FAILED_PREFIX = "maintd:repairfailed:"


def ready_tag(event: str) -> str:
    return READY_PREFIX + event


def failed_tag(event: str) -> str:
    return FAILED_PREFIX + event


def is_active(inc: model.Incident) -> bool:
    return inc.repair_status in ACTIVE


def is_node_incident(inc: model.Incident) -> bool:
    return inc.instance is None


def _is_node_action(status: Any) -> TypeGuard[model.RepairAction]:
    return isinstance(status, str) and status in ACTIONS


def action_of(original: Any) -> model.RepairAction | None:
    """The recommended action of a diagnose object, None when it is not a valid one."""
    if not isinstance(original, Mapping):
        return None
    status = original.get("status")
    return status if _is_node_action(status) else None


def new_incident(node: str, original: Any, when: float | None = None) -> model.Incident:
    action = action_of(original)
    if action is None or action == "Ok":
        raise ValueError(f"no repair needed for diagnose {original!r}")
    event = str(uuidlib.uuid4())
    stamp = time.time() if when is None else when
    return model.Incident(uuid=event, node=node, original=original, action=action,
                          repair_status="noted", tag=ready_tag(event), ctime=stamp, mtime=stamp)


def notify_incident(node: str, original: Any, when: float | None = None) -> model.Incident:
    """A node incident that only tells the operator (`original` says what happened)."""
    stamp = time.time() if when is None else when
    return model.Incident(uuid=str(uuidlib.uuid4()), node=node, original=original,
                          action=NOTIFY, repair_status="noted", tag="", ctime=stamp,
                          mtime=stamp)


def find(incidents: Iterable[model.Incident], node: str, original: Any) -> model.Incident | None:
    for inc in incidents:
        if is_node_incident(inc) and inc.node == node and inc.original == original:
            return inc
    return None


def set_status(inc: model.Incident, status: model.RepairStatus,
               when: float | None = None) -> None:
    if inc.repair_status != status:
        inc.repair_status = status
        inc.touch(when)


def observe(incidents: list[model.Incident], reports: Mapping[str, Any],
            when: float | None = None) -> list[model.Incident]:
    """Merge one poll's diagnose objects (node UUID -> data) into `incidents` (in place).

    Returns the incidents created. Ok and invalid objects create nothing."""
    created: list[model.Incident] = []
    for node, original in reports.items():
        action = action_of(original)
        if action is None or action == "Ok" or find(incidents, node, original) is not None:
            continue
        inc = new_incident(node, original, when)
        incidents.append(inc)
        created.append(inc)
    supersede(incidents, when)
    return created


def supersede(incidents: list[model.Incident], when: float | None = None) -> list[model.Incident]:
    """Cancel active incidents with a milder action than another active one on the same node."""
    worst: dict[str, int] = {}
    for inc in incidents:
        if is_active(inc) and is_node_incident(inc):
            worst[inc.node] = max(worst.get(inc.node, 0), SEVERITY[inc.action])
    canceled = []
    for inc in incidents:
        if (is_active(inc) and is_node_incident(inc) and inc.action != NOTIFY
                and SEVERITY[inc.action] < worst[inc.node]):
            set_status(inc, "canceled", when)
            canceled.append(inc)
    return canceled


def leading(incidents: Iterable[model.Incident]) -> dict[str, model.Incident]:
    """Per node the active incident to act on: the most invasive, the oldest on ties."""
    best: dict[str, model.Incident] = {}
    for inc in incidents:
        if not is_active(inc) or not is_node_incident(inc):
            continue
        cur = best.get(inc.node)
        if cur is None or (SEVERITY[inc.action], -inc.ctime) > (SEVERITY[cur.action], -cur.ctime):
            best[inc.node] = inc
    return best


def cancel(incidents: Iterable[model.Incident], event: str,
           when: float | None = None) -> model.Incident:
    """Cancel an incident by uuid (KeyError if unknown). Finalized ones stay as they are."""
    for inc in incidents:
        if inc.uuid == event:
            if is_active(inc):
                set_status(inc, "canceled", when)
            return inc
    raise KeyError(event)


def forget(incidents: list[model.Incident], observed: Mapping[str, Any],
           node_tags: Mapping[str, Iterable[str]],
           busy_jobs: Iterable[int] = ()) -> list[model.Incident]:
    """Drop the incidents the life cycle says to forget (in place); returns them.

    `observed`: node UUID -> last diagnose object (a node absent was not observed);
    `node_tags`: node UUID -> tags (a node absent is gone); `busy_jobs`: unfinished jobs.
    - canceled: once no longer observed;
    - completed: once its repairready tag is removed and it is no longer observed;
    - failed: once its repairfailed tag is removed (its tagging job finished), at once; when
      the tag could not be set (`tag` empty), once no longer observed (no retry loop);
    - finalized on a node that no longer exists: at once.
    """
    busy = set(busy_jobs)
    dropped = []
    for inc in list(incidents):
        if not is_node_incident(inc) or inc.action == NODE_FAILED:
            continue  # a node-failed incident: herder.maintd.nodefail.forgettable
        seen = inc.node in observed and observed[inc.node] == inc.original
        tags = node_tags.get(inc.node)
        status = inc.repair_status
        drop = False
        if status in FINAL and tags is None:
            drop = True
        elif status == "canceled":
            drop = not seen
        elif status == "completed":
            drop = inc.tag not in set(tags or ()) and not seen
        elif status == "failed" and not inc.tag:
            drop = not seen  # its tag could not be set: kept until no longer observed
        elif status == "failed":
            drop = inc.tag not in set(tags or ()) and not busy.intersection(inc.jobs)
        if drop:
            incidents.remove(inc)
            dropped.append(inc)
    return dropped
