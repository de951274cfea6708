"""Watcher-style instance repairs of maintd's own (issue 7): pure planning plus the source of
the instances' actual states.

After the incidents' (and harep's) jobs of a round, on nodes without an active incident:

* `OP_INSTANCE_ACTIVATE_DISKS` for every instance that should run (admin state up) whose
  disks are inactive (`disks_active` false in the RAPI view);
* `OP_INSTANCE_STARTUP` for every instance that should run but whose primary node's agent
  reports it `down` (Ganeti's ERROR_down) — not when the primary is offline or drained, not
  while an earlier restart of it has not settled (`settle` seconds after it was submitted: the
  agent's report may still be the old one), and at most `budget` restarts per `window` seconds
  per instance (a crash loop is not restarted forever; the status page notes it).

The actual state comes from every live primary node's mond (the node's own view, polled every
tick anyway; masterd's RAPI run state may be up to 10 s old), its verbose
`instance/inst-status` report (`data.instances: [{name, uuid, admin_state, actual_state,
status}]`) in the tick's one poll of the agents (`herder.maintd.agents`).

Every job is its own event (a fresh uuid) in the reason trail, so a crash between submit and
recording the id is adopted as for harep's repairs.
"""

from __future__ import annotations

import logging
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from herder.maintd.rounds import Instance, Job, Node, Plan, annotate

log = logging.getLogger("herder.maintd.watcher")

BUDGET = 3  # restarts per instance ...
WINDOW = 3600.0  # ... per this many seconds
SETTLE = 60.0  # seconds after a restart during which a "down" report is not believed


@dataclass
class WatcherResult:
    jobs: list[Job] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # instance names restarted this round


def plan_watcher(nodes: Sequence[Node], instances: Sequence[Instance], plan: Plan,
                 states: Mapping[str, str], restarts: Mapping[str, Sequence[float]],
                 affected: Iterable[str] = (), now: float | None = None,
                 budget: int = BUDGET, window: float = WINDOW, settle: float = SETTLE,
                 new_uuid: Callable[[], str] | None = None,
                 skip: Iterable[str] = ()) -> WatcherResult:
    """The watcher's jobs for this round, after `plan`'s jobs.

    `states`: instance name -> actual state reported by its primary node's agent (missing: not
    known, no restart); `restarts`: instance name -> times of earlier restarts (submissions);
    `affected`: names of nodes with an active incident; `skip`: names of instances left alone
    (an active instance incident handles them). No job uses an instance or touches a node
    already used by the round's other jobs."""
    now = time.time() if now is None else now
    new_uuid = new_uuid or (lambda: str(uuidlib.uuid4()))
    by_name = {n.name: n for n in nodes}
    # every node a job of the round touches is left alone (stricter than the pair rule)
    busy_nodes = set(affected) | {n for j in plan.jobs for n in j.nodes}
    used = {i for j in plan.jobs for i in j.instances} | set(skip)
    out = WatcherResult()
    for inst in sorted(instances, key=lambda i: i.name):
        if inst.admin_state != "up" or inst.name in used:
            continue
        pnode = by_name.get(inst.pnode)
        if pnode is None or pnode.offline or pnode.drained or not pnode.vm_capable:
            continue
        involved = {inst.pnode, *inst.snodes}
        if involved & busy_nodes:
            continue
        if any((n := by_name.get(s)) is None or n.offline for s in inst.snodes):
            continue  # a mirrored disk without its secondary: harep's or an incident's job
        if not inst.disks_active and inst.disk_template != "diskless":
            event = new_uuid()
            op: dict[str, Any] = {"OP_ID": "OP_INSTANCE_ACTIVATE_DISKS",
                                  "instance_name": inst.name}
            out.jobs.append(Job(event, "activate-disks", [annotate(op, event)],
                                nodes=frozenset((inst.pnode,)),
                                instances=frozenset((inst.name,))))
            used.add(inst.name)
            continue
        if states.get(inst.name) != "down":
            continue
        recent = [t for t in restarts.get(inst.name, ()) if now - t < window]
        if recent and now - max(recent) < settle:
            continue
        if len(recent) >= budget:
            out.notes.append(f"watcher: {inst.name} is down and was restarted {len(recent)} "
                             f"times in the last {window:g}s; not restarting it again")
            continue
        event = new_uuid()
        op = {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": inst.name, "force": False}
        out.jobs.append(Job(event, "restart", [annotate(op, event)],
                            nodes=frozenset((inst.pnode,)), instances=frozenset((inst.name,))))
        out.restarted.append(inst.name)
        used.add(inst.name)
    return out


def states_of(reports: Mapping[str, Any], instances: Sequence[Instance]) -> dict[str, str]:
    """Instance name -> actual state, from node name -> inst-status report (or its data).

    Only an instance's primary node's report counts (a migrated instance is not "down" on its
    old node); entries are matched by uuid when both sides have one, else by name."""
    by_node: dict[str, dict[str, str]] = {}
    for node, report in reports.items():
        data = report.get("data", report) if isinstance(report, Mapping) else None
        entries = data.get("instances") if isinstance(data, Mapping) else None
        if not isinstance(entries, list):
            continue
        seen: dict[str, str] = {}
        for e in entries:
            if not isinstance(e, Mapping) or not isinstance(e.get("actual_state"), str):
                continue
            for key in (e.get("uuid"), e.get("name")):
                if isinstance(key, str) and key:
                    seen[key] = e["actual_state"]
        by_node[node] = seen
    out: dict[str, str] = {}
    for inst in instances:
        primary_states = by_node.get(inst.pnode)
        if primary_states is None:
            continue
        state = primary_states.get(inst.uuid) if inst.uuid else None
        state = state or primary_states.get(inst.name)
        if state is not None:
            out[inst.name] = state
    return out


def live_nodes(nodes: Sequence[Node]) -> list[Node]:
    """The nodes whose agents' instance reports count: online, undrained, vm-capable."""
    return [n for n in nodes if not n.offline and not n.drained and n.vm_capable]
