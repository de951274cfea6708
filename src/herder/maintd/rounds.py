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
    lead = incident_lifecycle.leading(incidents)
    state = _Round.start(plan, nodes, instances, lead, try_unmovable)
    # Oldest incident first, so an older event gets the contended instances.
    for node_uuid, inc in sorted(lead.items(), key=lambda kv: (kv[1].ctime, kv[1].node)):
        node = state.by_uuid.get(node_uuid)
        if node is None:
            plan.notes.append(f"{inc.uuid}: node {node_uuid} is not in the cluster")
        elif inc.action == "node-failed":  # maintd.nodefail's own steps
            continue
        elif inc.action == incident_lifecycle.NOTIFY:
            plan.notes.append(f"{inc.uuid}: {node.name} needs the operator: {inc.original}")
        elif inc.action == "live-repair":
            _plan_live_repair(state, inc, node)
        else:
            _plan_evacuation_step(state, inc, node)
    return plan


@dataclass
class _Round:
    """A round being planned: the cluster by name and UUID, what each node holds, and what
    the round's jobs already use (an instance, or a pair of nodes, is in one job at most)."""

    plan: Plan
    nodes: Sequence[Node]
    try_unmovable: bool
    by_name: dict[str, Node]
    by_uuid: dict[str, Node]
    evacuating: set[str]  # names of the nodes an incident evacuates
    affected: set[str]  # names of the nodes with an incident
    primaries: dict[str, list[Instance]]  # node name -> its primary instances, by name
    secondaries: dict[str, list[Instance]]
    load: dict[str, int]  # node name -> instances it holds (secondaries placed this round too)
    used_instances: set[str] = field(default_factory=set)
    used_pairs: set[frozenset[str]] = field(default_factory=set)

    @classmethod
    def start(cls, plan: Plan, nodes: Sequence[Node], instances: Sequence[Instance],
              lead: Mapping[str, model.Incident], try_unmovable: bool) -> _Round:
        by_uuid = {n.uuid: n for n in nodes}
        primaries: dict[str, list[Instance]] = {}
        secondaries: dict[str, list[Instance]] = {}
        for inst in sorted(instances, key=lambda i: i.name):
            primaries.setdefault(inst.pnode, []).append(inst)
            for s in inst.snodes:
                secondaries.setdefault(s, []).append(inst)
        return cls(
            plan=plan, nodes=nodes, try_unmovable=try_unmovable,
            by_name={n.name: n for n in nodes}, by_uuid=by_uuid,
            evacuating={by_uuid[u].name for u, inc in lead.items()
                        if u in by_uuid and inc.action in ("evacuate", "evacuate-failover")},
            affected={by_uuid[u].name for u in lead if u in by_uuid},
            primaries=primaries, secondaries=secondaries,
            load={n.name: len(primaries.get(n.name, ())) + len(secondaries.get(n.name, ()))
                  for n in nodes})

    def healthy(self, name: str) -> bool:
        n = self.by_name.get(name)
        return (n is not None and not n.drained and not n.offline and n.vm_capable
                and name not in self.affected)

    def free(self, inst: Instance, src: str, target: str) -> bool:
        return inst.name not in self.used_instances and \
            frozenset((src, target)) not in self.used_pairs

    def take(self, job: Job) -> None:
        self.plan.jobs.append(job)
        self.used_instances.update(job.instances)
        if len(job.nodes) == 2:
            self.used_pairs.add(job.nodes)

    def pick_target(self, inst: Instance, src: str) -> str | None:
        skip = {inst.pnode, *inst.snodes}
        cands = [n.name for n in self.nodes if n.name not in skip and self.healthy(n.name)
                 and self.free(inst, src, n.name)]
        return min(cands, key=lambda c: (self.load[c], c)) if cands else None


def _plan_live_repair(state: _Round, inc: model.Incident, node: Node) -> None:
    """One final job: the repair command, then the repairready tag (done once tagged)."""
    ev = inc.uuid
    if inc.jobs:
        if inc.tag in node.tags:
            state.plan.completed.append(ev)
        return
    command = inc.original.get("command") if isinstance(inc.original, Mapping) else None
    if not isinstance(command, str) or not command:
        state.plan.failed.append(ev)
        return
    state.take(Job(ev, "repair", _ops(
        ev, {"OP_ID": "OP_REPAIR_COMMAND", "node_name": node.name, "command": command,
             "input": inc.original},
        {"OP_ID": "OP_TAGS_SET", "kind": "node", "name": node.name, "tags": [inc.tag]}),
        nodes=frozenset((node.name,)), final=True))


def _plan_evacuation_step(state: _Round, inc: model.Incident, node: Node) -> None:
    """The evacuation's next step only: drain, move the primaries, the secondaries, offline
    and tag (the final job); done when offline and tagged."""
    plan, ev = state.plan, inc.uuid
    if node.master:
        plan.notes.append(f"{ev}: {node.name} is the master node; fail over the master first")
        return
    if not node.drained and not node.offline:
        state.take(Job(ev, "drain", _ops(ev, {"OP_ID": "OP_NODE_SET_PARAMS",
                                              "node_name": node.name, "drained": True,
                                              "force": True, "auto_promote": True}),
                       nodes=frozenset((node.name,))))
        return
    prim = state.primaries.get(node.name, [])
    sec = state.secondaries.get(node.name, [])
    if prim:
        _plan_primaries(state, inc, node, prim)
        return
    if sec:
        _plan_secondaries(state, inc, node, sec)
        return
    if not node.offline or inc.tag not in node.tags:
        ops = []
        if not node.offline:
            ops.append({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": node.name,
                        "offline": True, "force": True, "auto_promote": True})
        if inc.tag not in node.tags:
            ops.append({"OP_ID": "OP_TAGS_SET", "kind": "node", "name": node.name,
                        "tags": [inc.tag]})
        state.take(Job(ev, "offline", _ops(ev, *ops), nodes=frozenset((node.name,)),
                       final=True))
        return
    plan.completed.append(ev)


def _plan_secondaries(state: _Round, inc: model.Incident, node: Node,
                      sec: list[Instance]) -> None:
    """A new secondary for each instance the node is the secondary of, where its primary is
    healthy (or itself evacuating) and a node can take it."""
    plan, ev = state.plan, inc.uuid
    for inst in sec:
        if not state.healthy(inst.pnode) and inst.pnode not in state.evacuating:
            plan.notes.append(f"{ev}: {inst.name}'s primary {inst.pnode} is not healthy")
            continue
        if state.by_name.get(inst.pnode) is None or state.by_name[inst.pnode].offline:
            plan.notes.append(f"{ev}: {inst.name}'s primary {inst.pnode} is offline")
            continue
        target = state.pick_target(inst, node.name)
        if target is None or not state.free(inst, inst.pnode, target):
            plan.notes.append(f"{ev}: no new secondary for {inst.name} this round")
            continue
        state.take(Job(ev, "secondary", _ops(
            ev, {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": inst.name,
                 "mode": "replace_new_secondary", "remote_node": target}),
            nodes=frozenset((inst.pnode, target)), instances=frozenset((inst.name,))))
        state.load[target] += 1


def _plan_primaries(state: _Round, inc: model.Incident, node: Node,
                    prim: list[Instance]) -> None:
    plan, ev = state.plan, inc.uuid
    failover = inc.action == "evacuate-failover"
    for inst in prim:
        if inst.disk_template in MIRRORED:
            if not inst.snodes:
                continue
            target = inst.snodes[0]
            if not state.healthy(target):
                # Its secondary is failing too (or drained/offline): give it a new secondary
                # first, so the migration next round lands on a healthy node (no deadlock
                # between two failing nodes holding each other's secondaries).
                new = state.pick_target(inst, node.name)
                if new is None or not state.free(inst, node.name, new):
                    plan.notes.append(f"{ev}: {inst.name} waits: its secondary {target} is "
                                      "not healthy and no node can take its place")
                    continue
                state.take(Job(ev, "resecondary", _ops(
                    ev, {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": inst.name,
                         "mode": "replace_new_secondary", "remote_node": new}),
                    nodes=frozenset((node.name, new)), instances=frozenset((inst.name,))))
                continue
            if not state.free(inst, node.name, target):
                continue
            op: dict[str, Any] = {"instance_name": inst.name}
        elif inst.disk_template in MOVABLE or state.try_unmovable:
            picked = state.pick_target(inst, node.name)
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
        state.take(Job(ev, step, _ops(ev, op), nodes=frozenset((node.name, target)),
                       instances=frozenset((inst.name,))))


def failure_tag_job(inc: model.Incident, node_name: str) -> Job:
    """The job tagging a failed incident's node `maintd:repairfailed:<event>`."""
    tag = incident_lifecycle.failed_tag(inc.uuid)
    return Job(inc.uuid, "failtag", _ops(inc.uuid, {"OP_ID": "OP_TAGS_SET", "kind": "node",
                                                    "name": node_name, "tags": [tag]}),
               nodes=frozenset((node_name,)))
