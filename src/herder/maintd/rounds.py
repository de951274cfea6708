"""The round planner (design-maintd "Mode of operation"): pure, no I/O.

Given the cluster (nodes, instances), the incidents and whether jobs are still running, it
returns the jobs of the next round:

* per node, only the most invasive active incident counts (`incidents.leading`);
* every node to evacuate gets only its NEXT step: drain; then move its primaries (live
  migration, or failover for `evacuate-failover`); then move its secondaries (new secondary);
  then offline it and tag it `maintd:repairready:<event>` (the final job);
* `live-repair` is one final job: OP_REPAIR_COMMAND with the diagnose object as input, then the
  repairready tag (a live-repair without a command fails the incident);
* no two jobs of a round touch the same instance or the same pair of nodes; a move never lands
  on a node that is drained, offline, the master of another evacuation or already busy as a
  move's endpoint in this round.

Every opcode carries the reason `["gnt:daemon:maintd", <event uuid>, ns]`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from herder.core import model, reason
from herder.maintd import incidents as incident_lifecycle

MIRRORED = ("drbd",)
SHARED = ("sharedfile", "rbd", "ext", "gluster", "blockdev")
MOVABLE = MIRRORED + SHARED + ("diskless",)


@dataclass(frozen=True)
class Node:
    name: str
    uuid: str
    ip: str = ""
    drained: bool = False
    offline: bool = False
    master: bool = False
    vm_capable: bool = True
    tags: tuple[str, ...] = ()
    group: str = ""  # node group UUID

    @classmethod
    def from_rapi(cls, d: Mapping[str, Any]) -> Node:
        return cls(name=d["name"], uuid=d.get("uuid") or d["name"], ip=d.get("pip") or "",
                   drained=bool(d.get("drained")), offline=bool(d.get("offline")),
                   master=d.get("role") == "M", vm_capable=d.get("vm_capable", True) is not False,
                   tags=tuple(d.get("tags") or ()), group=d.get("group.uuid") or "")


@dataclass(frozen=True)
class Instance:
    name: str
    pnode: str  # node name
    snodes: tuple[str, ...] = ()
    disk_template: str = "drbd"
    tags: tuple[str, ...] = ()
    admin_state: str = "up"  # up | down | offline
    disks_active: bool = True
    memory: int = 0  # MiB (beparams maxmem)
    vcpus: int = 1
    disks: tuple[int, ...] = ()  # disk sizes, MiB
    uuid: str = ""
    status: str = ""  # Ganeti's run status (`running`, `ERROR_down`, ...; "" unknown)
    oper_ram: int | None = None  # MiB the running instance has (None: not running / unknown)
    ha_priority: int = 0  # herder's backend parameters for node-failure recovery
    auto_recover: bool = True

    @classmethod
    def from_rapi(cls, d: Mapping[str, Any]) -> Instance:
        be = d.get("beparams") or {}
        return cls(name=d["name"], pnode=d["pnode"], snodes=tuple(d.get("snodes") or ()),
                   disk_template=d.get("disk_template") or "diskless",
                   tags=tuple(d.get("tags") or ()),
                   admin_state=d.get("admin_state") or ("up" if d.get("admin_up") else "down"),
                   disks_active=d.get("disks_active") is not False,
                   memory=int(be.get("maxmem") or be.get("memory") or 0),
                   vcpus=int(be.get("vcpus") or 1),
                   disks=tuple(int(s or 0) for s in d.get("disk.sizes") or ()),
                   uuid=d.get("uuid") or "", status=d.get("status") or "",
                   oper_ram=d["oper_ram"] if isinstance(d.get("oper_ram"), int) else None,
                   ha_priority=int(be.get("ha_priority") or 0),
                   auto_recover=be.get("auto_recover") is not False)


@dataclass
class Job:
    """One job of a round, for one incident."""

    event: str
    # drain | migrate | failover | resecondary (a primary's failing secondary replaced first)
    # | secondary | offline | repair | failtag
    step: str
    ops: list[dict[str, Any]]
    nodes: frozenset[str] = frozenset()  # node names touched
    instances: frozenset[str] = frozenset()
    final: bool = False  # success completes the incident


@dataclass
class Plan:
    jobs: list[Job] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)  # events done without a job
    failed: list[str] = field(default_factory=list)  # events failed while planning
    notes: list[str] = field(default_factory=list)  # why something waits

    def pairs(self) -> set[frozenset[str]]:
        return {j.nodes for j in self.jobs if len(j.nodes) == 2}


def annotate(op: dict[str, Any], event: str, when_ns: int | None = None) -> dict[str, Any]:
    op = dict(op)
    op["reason"] = [*op.get("reason", []),
                    [reason.MAINTD, event, time.time_ns() if when_ns is None else when_ns]]
    return op


def _ops(event: str, *ops: dict[str, Any]) -> list[dict[str, Any]]:
    return [annotate(op, event) for op in ops]


def plan_round(nodes: Sequence[Node], instances: Sequence[Instance],
               incidents: Iterable[model.Incident], busy: bool = False,
               try_unmovable: bool = False) -> Plan:
    """The next round's jobs; nothing while a previous round's jobs still run (`busy`).

    `try_unmovable`: submit a migration (to the least loaded healthy node) even for an
    instance whose disk template cannot move, and let the cluster refuse it (Ganeti does,
    failing the incident visibly) instead of waiting with a note (herder's own clusters)."""
    plan = Plan()
    if busy:
        return plan
    by_name = {n.name: n for n in nodes}
    by_uuid = {n.uuid: n for n in nodes}
    lead = incident_lifecycle.leading(incidents)
    evacuating = {by_uuid[u].name for u, inc in lead.items()
                  if u in by_uuid and inc.action in ("evacuate", "evacuate-failover")}
    affected = {by_uuid[u].name for u in lead if u in by_uuid}
    primaries: dict[str, list[Instance]] = {}
    secondaries: dict[str, list[Instance]] = {}
    for inst in sorted(instances, key=lambda i: i.name):
        primaries.setdefault(inst.pnode, []).append(inst)
        for s in inst.snodes:
            secondaries.setdefault(s, []).append(inst)
    used_instances: set[str] = set()
    used_pairs: set[frozenset[str]] = set()
    load = {n.name: len(primaries.get(n.name, ())) + len(secondaries.get(n.name, ()))
            for n in nodes}

    def healthy(name: str) -> bool:
        n = by_name.get(name)
        return (n is not None and not n.drained and not n.offline and n.vm_capable
                and name not in affected)

    def free(inst: Instance, src: str, target: str) -> bool:
        return inst.name not in used_instances and frozenset((src, target)) not in used_pairs

    def take(job: Job) -> None:
        plan.jobs.append(job)
        used_instances.update(job.instances)
        if len(job.nodes) == 2:
            used_pairs.add(job.nodes)

    def pick_target(inst: Instance, src: str) -> str | None:
        skip = {inst.pnode, *inst.snodes}
        cands = [n.name for n in nodes if n.name not in skip and healthy(n.name)
                 and free(inst, src, n.name)]
        return min(cands, key=lambda c: (load[c], c)) if cands else None

    # Oldest incident first, so an older event gets the contended instances.
    for node_uuid, inc in sorted(lead.items(), key=lambda kv: (kv[1].ctime, kv[1].node)):
        node = by_uuid.get(node_uuid)
        if node is None:
            plan.notes.append(f"{inc.uuid}: node {node_uuid} is not in the cluster")
            continue
        ev = inc.uuid
        if inc.action == "node-failed":  # maintd.nodefail's own steps
            continue
        if inc.action == incident_lifecycle.NOTIFY:
            plan.notes.append(f"{ev}: {node.name} needs the operator: {inc.original}")
            continue
        if inc.action == "live-repair":
            if inc.jobs:
                if inc.tag in node.tags:
                    plan.completed.append(ev)
                continue
            command = inc.original.get("command") if isinstance(inc.original, Mapping) else None
            if not isinstance(command, str) or not command:
                plan.failed.append(ev)
                continue
            take(Job(ev, "repair", _ops(
                ev, {"OP_ID": "OP_REPAIR_COMMAND", "node_name": node.name, "command": command,
                     "input": inc.original},
                {"OP_ID": "OP_TAGS_SET", "kind": "node", "name": node.name, "tags": [inc.tag]}),
                nodes=frozenset((node.name,)), final=True))
            continue
        # evacuation: the next step only
        if node.master:
            plan.notes.append(f"{ev}: {node.name} is the master node; fail over the master first")
            continue
        if not node.drained and not node.offline:
            take(Job(ev, "drain", _ops(ev, {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": node.name,
                                            "drained": True, "force": True,
                                            "auto_promote": True}),
                     nodes=frozenset((node.name,))))
            continue
        prim = primaries.get(node.name, [])
        sec = secondaries.get(node.name, [])
        if prim:
            _plan_primaries(plan, inc, node, prim, healthy, free, take, pick_target,
                            try_unmovable)
            continue
        if sec:
            for inst in sec:
                if not healthy(inst.pnode) and inst.pnode not in evacuating:
                    plan.notes.append(f"{ev}: {inst.name}'s primary {inst.pnode} is not healthy")
                    continue
                if by_name.get(inst.pnode) is None or by_name[inst.pnode].offline:
                    plan.notes.append(f"{ev}: {inst.name}'s primary {inst.pnode} is offline")
                    continue
                target = pick_target(inst, node.name)
                if target is None or not free(inst, inst.pnode, target):
                    plan.notes.append(f"{ev}: no new secondary for {inst.name} this round")
                    continue
                take(Job(ev, "secondary", _ops(
                    ev, {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": inst.name,
                         "mode": "replace_new_secondary", "remote_node": target}),
                    nodes=frozenset((inst.pnode, target)), instances=frozenset((inst.name,))))
                load[target] += 1
            continue
        if not node.offline or inc.tag not in node.tags:
            ops = []
            if not node.offline:
                ops.append({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": node.name,
                            "offline": True, "force": True, "auto_promote": True})
            if inc.tag not in node.tags:
                ops.append({"OP_ID": "OP_TAGS_SET", "kind": "node", "name": node.name,
                            "tags": [inc.tag]})
            take(Job(ev, "offline", _ops(ev, *ops), nodes=frozenset((node.name,)), final=True))
            continue
        plan.completed.append(ev)
    return plan


def _plan_primaries(plan: Plan, inc: model.Incident, node: Node, prim: list[Instance],
                    healthy: Any, free: Any, take: Any, pick_target: Any,
                    try_unmovable: bool = False) -> None:
    ev = inc.uuid
    failover = inc.action == "evacuate-failover"
    for inst in prim:
        if inst.disk_template in MIRRORED:
            if not inst.snodes:
                continue
            target = inst.snodes[0]
            if not healthy(target):
                # Its secondary is failing too (or drained/offline): give it a new secondary
                # first, so the migration next round lands on a healthy node (no deadlock
                # between two failing nodes holding each other's secondaries).
                new = pick_target(inst, node.name)
                if new is None or not free(inst, node.name, new):
                    plan.notes.append(f"{ev}: {inst.name} waits: its secondary {target} is "
                                      "not healthy and no node can take its place")
                    continue
                take(Job(ev, "resecondary", _ops(
                    ev, {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": inst.name,
                         "mode": "replace_new_secondary", "remote_node": new}),
                    nodes=frozenset((node.name, new)), instances=frozenset((inst.name,))))
                continue
            if not free(inst, node.name, target):
                continue
            op: dict[str, Any] = {"instance_name": inst.name}
        elif inst.disk_template in MOVABLE or try_unmovable:
            picked = pick_target(inst, node.name)
            if picked is None:
                plan.notes.append(f"{ev}: no target node for {inst.name} this round")
                continue
            target = picked
            op = {"instance_name": inst.name, "target_node": target}
        else:
            plan.notes.append(f"{ev}: {inst.name} ({inst.disk_template}) cannot be moved "
                              "without copying its disks; move or remove it by hand")
            continue
        if failover:
            op.update(OP_ID="OP_INSTANCE_FAILOVER", ignore_consistency=True, shutdown_timeout=120)
            step = "failover"
        else:
            op.update(OP_ID="OP_INSTANCE_MIGRATE", mode="live", allow_failover=False)
            step = "migrate"
        take(Job(ev, step, _ops(ev, op), nodes=frozenset((node.name, target)),
                 instances=frozenset((inst.name,))))


def failure_tag_job(inc: model.Incident, node_name: str) -> Job:
    """The job tagging a failed incident's node `maintd:repairfailed:<event>`."""
    tag = incident_lifecycle.failed_tag(inc.uuid)
    return Job(inc.uuid, "failtag", _ops(inc.uuid, {"OP_ID": "OP_TAGS_SET", "kind": "node",
                                                    "name": node_name, "tags": [tag]}),
               nodes=frozenset((node_name,)))
