"""Instance incidents (issue instmon): pure decisions and planning, no I/O.

`herder instmon` on every node sends a masakari-format notification when a domain stops
(`herder.core.notification`); maintd's `POST /1/notifications` hands it to `decide`, which
either ignores it (with the reason, answered to the sender and shown on the page) or creates an
instance incident: a `model.Incident` with `instance` set (the instance UUID) and `node` the UUID of
the node it failed on. Its action:

* `restart`: start it again on the same node (OP_INSTANCE_STARTUP);
* `relocate`: start it on another node (OP_INSTANCE_FAILOVER with ignore_consistency: DRBD to
  its secondary, shared/diskless templates where herder's allocator puts it);
* `drain-relocate`: drain the node (no new instances go there), then relocate it, in one job.

A failure (kind from the failure table) is ignored when the instance is unknown, not admin-up,
no longer on the notifying node, tagged `herder:instmon:norecover`, already has an active
instance incident, or (a stop) a job touching it is running or ended within `ORDERED_GRACE`
seconds (herder ordered it). Otherwise: io-error -> drain-relocate; crash/stop -> restart, or
relocate when the same instance failed within `FAILURE_WINDOW` seconds or its node is unhealthy
(drained, offline, an active node incident, or its last diagnose is not Ok).

`plan_instances` adds a round's jobs (after the node incidents', before harep and the watcher);
job success completes the incident. When a restart fails and the instance can move (its disks
are mirrored with an online secondary, or shared or absent), the incident falls back to
relocating it (`fallback`: the spec's "then on a different host if it fails to restart");
otherwise, and when that fails too, the incident fails and its INSTANCE is tagged
`maintd:repairfailed:<event>`. The incidents of unwell instances mond reports
(`herder.maintd.vmhealth`: hung, paused on an I/O error, stray copies) are planned here too:
a restart of a hung or paused instance is a hard reboot (OP_INSTANCE_REBOOT), a stray is
stopped on its node (OP_INSTANCE_STOP_STRAY), and `notify` plans no job. Finished instance
incidents are kept `FAILURE_WINDOW` seconds (a failed one also while its tag is on the
instance), so the relocate rule survives a restart.
"""

from __future__ import annotations

import datetime
import time
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from herder.core import model, notification, reason
from herder.maintd import incidents as incident_lifecycle
from herder.maintd.rounds import MIRRORED, Instance, Job, Node, Plan, annotate

OPTOUT_TAG = "herder:instmon:norecover"
RESTART: Final = "restart"
RELOCATE: Final = "relocate"
DRAIN_RELOCATE: Final = "drain-relocate"
STOP_STRAY: Final = "stop-stray"
NOTIFY: Final = "notify"
ACTIONS = (RESTART, RELOCATE, DRAIN_RELOCATE, STOP_STRAY, NOTIFY)
# the kinds (original["kind"]) of mond's unwell-but-running instances: restarted by a reboot
REBOOTED_KINDS = frozenset({notification.HUNG, notification.PAUSED_IO_ERROR})
# opcodes during which a stop of their instance is herder's own doing
IN_PLACE = frozenset({"OP_INSTANCE_SHUTDOWN", "OP_INSTANCE_REBOOT", "OP_INSTANCE_REINSTALL",
                      "OP_INSTANCE_RENAME", "OP_INSTANCE_RECREATE_DISKS",
                      "OP_INSTANCE_SET_PARAMS", "OP_INSTANCE_DEACTIVATE_DISKS"})
STOPPING = IN_PLACE | {"OP_INSTANCE_MIGRATE", "OP_INSTANCE_FAILOVER", "OP_INSTANCE_MOVE",
                       "OP_INSTANCE_REMOVE"}
NODE_MOVES = frozenset({"OP_NODE_MIGRATE", "OP_NODE_EVACUATE", "OP_NODE_POWERCYCLE"})
ORDERED_GRACE = 30.0  # seconds after a job touching the instance ended: a stop was ordered
FAILURE_WINDOW = 600.0  # a second failure within this many seconds: relocate
ALLOCATOR = "herder"  # the iallocator a shared-storage relocation asks
# templates whose new node the allocator chooses (those masterd's failover moves by allocator)
ALLOCATED = ("sharedfile", "rbd", "ext", "blockdev", "diskless")
UNFINISHED = ("queued", "waiting", "running", "canceling")

NEW = "new"
IGNORED = "ignored"
REFUSED = "refused"  # not the reporting node's instance: answered 400, not recorded


@dataclass(frozen=True)
class JobInfo:
    """A job of the queue, as far as the decisions need it: which instances its opcodes may
    stop, and on which nodes it moves instances."""

    id: int
    status: str
    end: float | None = None  # seconds since the epoch; None while unfinished
    instances: frozenset[str] = frozenset()  # instance_name of its opcodes that stop one
    # ... of those that leave the instance on its node (a late event of theirs is still
    # theirs for `grace` seconds after the job; a moved instance is ignored anyway)
    lingering: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()  # node_name of node-wide moves (migrate, evacuate)

    @classmethod
    def from_ops(cls, job_id: int, status: str, end: float | None,
                 ops: Sequence[Any]) -> JobInfo:
        ops = [op for op in ops if isinstance(op, Mapping)]
        return cls(job_id, status, end,
                   frozenset(str(op["instance_name"]) for op in ops
                             if op.get("OP_ID") in STOPPING and op.get("instance_name")),
                   frozenset(str(op["instance_name"]) for op in ops
                             if op.get("OP_ID") in IN_PLACE and op.get("instance_name")),
                   frozenset(str(op["node_name"]) for op in ops
                             if op.get("OP_ID") in NODE_MOVES and op.get("node_name")))

    @classmethod
    def from_rapi(cls, d: Mapping[str, Any]) -> JobInfo:
        end = d.get("end_ts")
        when: float | None = None
        if isinstance(end, list | tuple) and len(end) == 2:
            when = float(end[0]) + float(end[1]) / 1e6
        elif isinstance(end, int | float):
            when = float(end)
        return cls.from_ops(int(d["id"]), str(d.get("status")), when, d.get("ops") or [])


@dataclass
class Verdict:
    status: str  # "new" (an incident was created) | "ignored" | "refused"
    reason: str
    kind: str | None = None
    incident: model.Incident | None = None
    # the node-failed incident the notification was recorded on instead (maintd.nodefail)
    owner: model.Incident | None = None


def is_instance_incident(inc: model.Incident) -> bool:
    return inc.instance is not None


def active_for(incidents: Iterable[model.Incident], instance_uuid: str) -> model.Incident | None:
    """The instance's active incident that acts (a `notify` one does not block another)."""
    return next((i for i in incidents if i.instance == instance_uuid and i.action != NOTIFY
                 and incident_lifecycle.is_active(i)), None)


def movable(inst: Instance, nodes: Mapping[str, Node]) -> bool:
    """Whether a failover can start the instance on another node: shared or no disks (the
    allocator picks the node), or mirrored with its secondary online."""
    if inst.disk_template in ALLOCATED:
        return True
    if inst.disk_template in MIRRORED and inst.snodes:
        secondary = nodes.get(inst.snodes[0])
        return secondary is not None and not secondary.offline
    return False


def fallback(inc: model.Incident, inst: Instance | None,
             nodes: Sequence[Node]) -> tuple[model.RepairAction, str] | None:
    """After the incident's restart job failed: relocate instead (and why), when the instance
    should still run and can move; None: the incident fails."""
    if inc.action != RESTART or inst is None or inst.admin_state != "up":
        return None
    if not movable(inst, {n.name: n for n in nodes}):
        return None
    return RELOCATE, (f"restarting {inst.name} on {inst.pnode} failed; starting it on another "
                      "node")


def recovering(incidents: Iterable[model.Incident]) -> set[str]:
    """UUIDs of the instances with an active instance incident."""
    return {i.instance for i in incidents
            if i.instance is not None and incident_lifecycle.is_active(i)}


def original_of(note: notification.Notification, kind: str | None,
                notification_uuid: str) -> dict[str, Any]:
    return {**note.to_body()["notification"], "kind": kind,
            "notification_uuid": notification_uuid}


def same_notification(original: Any, note: notification.Notification) -> bool:
    """Whether an incident's original is this notification (a delivery again)."""
    if not isinstance(original, Mapping):
        return False
    return (original.get("hostname") == note.hostname
            and original.get("generated_time") == note.generated_time
            and original.get("payload") == note.payload)


def node_unhealthy(node: Node, incidents: Iterable[model.Incident],
                   diagnoses: Mapping[str, Any]) -> str | None:
    """Why a node is unhealthy (None: it is not): drained, offline, an active node incident,
    or its last diagnose observation is not Ok (`diagnoses`: node UUID -> diagnose object)."""
    if node.offline:
        return "offline"
    if node.drained:
        return "drained"
    if node.uuid in incident_lifecycle.leading(incidents):
        return "an active node incident"
    diag = diagnoses.get(node.uuid)
    if isinstance(diag, Mapping) and diag.get("status", "Ok") != "Ok":
        return f"its diagnose says {diag.get('status')}"
    return None


def decide(note: notification.Notification, kind: str | None, nodes: Sequence[Node],
           instances: Sequence[Instance], incidents: Sequence[model.Incident],
           jobs: Sequence[JobInfo] = (), diagnoses: Mapping[str, Any] | None = None,
           now: float | None = None, grace: float = ORDERED_GRACE,
           window: float = FAILURE_WINDOW, notification_uuid: str = "") -> Verdict:
    """What to do about one (new, valid) notification; the incident, if any, is not yet in
    `incidents` (the caller adds it)."""
    now = time.time() if now is None else now
    detail = f"{note.event}/{note.detail}"
    if kind is None:
        return Verdict(IGNORED, f"{detail} is not a failure (not in the failure table)")
    inst = next((i for i in instances if i.uuid and i.uuid == note.instance_uuid), None)
    if inst is None:
        return Verdict(IGNORED, f"no instance has the UUID {note.instance_uuid}", kind)
    if inst.pnode != note.hostname:  # only the node it runs on reports its failures
        return Verdict(REFUSED, f"{inst.name} is not hosted by {note.hostname}: its primary "
                                f"node is {inst.pnode}", kind)
    if inst.admin_state != "up":
        return Verdict(IGNORED, f"{inst.name} is administratively {inst.admin_state}", kind)
    if OPTOUT_TAG in inst.tags:
        return Verdict(IGNORED, f"{inst.name} is tagged {OPTOUT_TAG}", kind)
    if kind == notification.STOP:
        for job in jobs:
            if job.status in UNFINISHED and (inst.name in job.instances
                                             or note.hostname in job.nodes):
                return Verdict(IGNORED, f"job {job.id} stopping or moving {inst.name} is "
                                        f"{job.status} (an ordered stop)", kind)
            if (inst.name in job.lingering and job.end is not None
                    and now - job.end < grace):
                return Verdict(IGNORED, f"job {job.id} stopping {inst.name} ended "
                                        f"{now - job.end:.0f}s ago (an ordered stop)", kind)
    active = active_for(incidents, inst.uuid)
    if active is not None:
        return Verdict(IGNORED, f"{inst.name} already has the active incident {active.uuid}",
                       kind)
    node = next((n for n in nodes if n.name == inst.pnode), None)
    node_uuid = node.uuid if node is not None else inst.pnode
    action: model.RepairAction
    if kind == notification.IO_ERROR:
        action, why = DRAIN_RELOCATE, "its storage failed"
    else:
        earlier = [i for i in incidents if i.instance == inst.uuid and now - i.ctime < window]
        sick = node_unhealthy(node, incidents, diagnoses or {}) if node is not None else None
        if earlier:
            action, why = RELOCATE, (f"it failed before within {window:g}s "
                                     f"(incident {earlier[-1].uuid})")
        elif sick is not None:
            action, why = RELOCATE, f"its node {inst.pnode} is unhealthy: {sick}"
        else:
            action, why = RESTART, "first failure on a healthy node"
    event = str(uuidlib.uuid4())
    original = original_of(note, kind, notification_uuid)
    inc = model.Incident(uuid=event, node=node_uuid, instance=inst.uuid, original=original,
                         action=action, repair_status="noted", tag="",
                         ctime=now, mtime=now)
    return Verdict(NEW, f"{kind} of {inst.name}: {action} ({why})", kind, inc)


# --- planning ----------------------------------------------------------------------------------


def instmon_reason(original: Any) -> list[Any]:
    """The reason-trail entry naming the notified event (stamped with its generated_time)."""
    o = original if isinstance(original, Mapping) else {}
    payload = o.get("payload")
    if not isinstance(payload, Mapping):
        payload = {}
    when = str(o.get("generated_time", ""))
    text = (f"{payload.get('event', '?')}/{payload.get('vir_domain_event', '?')} on "
            f"{o.get('hostname', '?')} at {when}")
    try:
        stamp = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=datetime.UTC)
        ns = int(stamp.timestamp() * 1_000_000) * 1000
    except ValueError:
        ns = time.time_ns()
    return [reason.INSTMON, text, ns]


def mond_reason(inc: model.Incident) -> list[Any]:
    """The reason-trail entry naming what mond reported (an unwell instance's incident)."""
    o = inc.original if isinstance(inc.original, Mapping) else {}
    text = (f"{o.get('kind', '?')} {o.get('instance', '?')} on {o.get('hostname', '?')}: "
            f"{o.get('detail', '')}").rstrip(": ")
    return [reason.MOND, text, int(inc.ctime * 1e9)]


def _ops(inc: model.Incident, *ops: dict[str, Any]) -> list[dict[str, Any]]:
    o = inc.original if isinstance(inc.original, Mapping) else {}
    trail = mond_reason(inc) if "payload" not in o and "kind" in o else instmon_reason(o)
    return [annotate({**op, "reason": [list(trail)]}, inc.uuid) for op in ops]


def restart_op(inst: Instance, inc: model.Incident) -> dict[str, Any]:
    """Start it again where it is: a stopped instance is started, a hung or paused one (still
    active) is rebooted hard."""
    o = inc.original if isinstance(inc.original, Mapping) else {}
    if o.get("kind") in REBOOTED_KINDS:
        return {"OP_ID": "OP_INSTANCE_REBOOT", "instance_name": inst.name,
                "reboot_type": "hard"}
    return {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": inst.name, "force": False}


@dataclass
class InstancePlan:
    jobs: list[Job] = field(default_factory=list)
    canceled: list[str] = field(default_factory=list)  # events with nothing left to do
    notes: list[str] = field(default_factory=list)


def failover_op(inst: Instance) -> dict[str, Any]:
    op: dict[str, Any] = {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": inst.name,
                          "ignore_consistency": True, "shutdown_timeout": 120}
    if inst.disk_template in ALLOCATED:
        op["iallocator"] = ALLOCATOR
    return op


def plan_instances(nodes: Sequence[Node], instances: Sequence[Instance],
                   incidents: Iterable[model.Incident], plan: Plan) -> InstancePlan:
    """The jobs of the active instance incidents without jobs, after `plan`'s jobs (an
    instance used by them, or whose nodes they touch, waits for the next round)."""
    out = InstancePlan()
    by_name = {n.name: n for n in nodes}
    by_uuid = {n.uuid: n for n in nodes}
    insts = {i.uuid: i for i in instances if i.uuid}
    busy_nodes = {n for j in plan.jobs for n in j.nodes}
    used = {i for j in plan.jobs for i in j.instances}
    # not yet submitted (no job), or back to `noted` for a next step (a fallback)
    for inc in sorted((i for i in incidents if is_instance_incident(i)
                       and incident_lifecycle.is_active(i) and i.action != NOTIFY
                       and (not i.jobs or i.repair_status == "noted")),
                      key=lambda i: (i.ctime, i.uuid)):
        ev = inc.uuid
        inst = insts.get(inc.instance or "")
        if inst is None:
            out.notes.append(f"{ev}: instance {inc.instance} is gone; nothing to do")
            out.canceled.append(ev)
            continue
        if inc.action == STOP_STRAY:
            stray = by_uuid.get(inc.node)
            if stray is None or stray.offline or stray.name == inst.pnode:
                out.notes.append(f"{ev}: the copy of {inst.name} is on no other online node "
                                 "now; nothing to do")
                out.canceled.append(ev)
                continue
            if inst.name in used or {inst.pnode, stray.name} & busy_nodes:
                out.notes.append(f"{ev}: {inst.name} waits: its nodes are busy this round")
                continue
            op = {"OP_ID": "OP_INSTANCE_STOP_STRAY", "instance_name": inst.name,
                  "node_name": stray.name}
            out.jobs.append(Job(ev, "stop-stray", _ops(inc, op),
                                nodes=frozenset((inst.pnode, stray.name)),
                                instances=frozenset((inst.name,)), final=True))
            used.add(inst.name)
            busy_nodes |= {inst.pnode, stray.name}
            continue
        if inst.admin_state != "up":
            out.notes.append(f"{ev}: {inst.name} is no longer admin-up; nothing to do")
            out.canceled.append(ev)
            continue
        involved = {inst.pnode, *inst.snodes}
        if inst.name in used or involved & busy_nodes:
            out.notes.append(f"{ev}: {inst.name} waits: its nodes are busy this round")
            continue
        pnode = by_name.get(inst.pnode)
        failed_on = by_uuid.get(inc.node)
        action = inc.action
        note = ""
        if failed_on is not None and failed_on.name != inst.pnode and action != RESTART:
            action, note = RESTART, f"it moved off {failed_on.name} meanwhile"
        if action == RESTART and pnode is not None and (pnode.offline or pnode.drained):
            state = "offline" if pnode.offline else "drained"
            action, note = RELOCATE, f"its node {pnode.name} is {state}"
        ops: list[dict[str, Any]] = []
        nodes_touched = set(involved)
        if action == DRAIN_RELOCATE and failed_on is not None and not failed_on.drained \
                and not failed_on.offline:
            if failed_on.master:
                out.notes.append(f"{ev}: {failed_on.name} is the master node; not draining it")
            else:
                ops.append({"OP_ID": "OP_NODE_SET_PARAMS", "node_name": failed_on.name,
                            "drained": True, "force": True, "auto_promote": True})
                nodes_touched.add(failed_on.name)
        if action in (RELOCATE, DRAIN_RELOCATE):
            if movable(inst, by_name):
                ops.append(failover_op(inst))
                step = "relocate"
            elif pnode is not None and pnode.offline:
                out.notes.append(f"{ev}: {inst.name} ({inst.disk_template}) cannot move and its "
                                 f"node {pnode.name} is offline; waiting")
                continue
            else:
                note = (f"{inst.name} ({inst.disk_template}) cannot move to another node; "
                        "restarting it in place")
                ops.append(restart_op(inst, inc))
                step = "restart"
        else:
            ops.append(restart_op(inst, inc))
            step = "restart"
        if note:
            out.notes.append(f"{ev}: {step} {inst.name}: {note}")
        job = Job(ev, step, _ops(inc, *ops), nodes=frozenset(nodes_touched),
                  instances=frozenset((inst.name,)), final=True)
        out.jobs.append(job)
        used.add(inst.name)
        busy_nodes |= nodes_touched
    return out


def failure_tag_job(inc: model.Incident, instance_name: str) -> Job:
    """The job tagging a failed instance incident's instance `maintd:repairfailed:<event>`."""
    op = {"OP_ID": "OP_TAGS_SET", "kind": "instance", "name": instance_name,
          "tags": [incident_lifecycle.failed_tag(inc.uuid)]}
    return Job(inc.uuid, "failtag", [annotate(op, inc.uuid)],
               instances=frozenset((instance_name,)))


def forget(incidents: list[model.Incident], instance_tags: Mapping[str, Iterable[str]],
           now: float | None = None, window: float = FAILURE_WINDOW,
           busy_jobs: Iterable[int] = ()) -> list[model.Incident]:
    """Drop finished instance incidents (in place); returns them. `instance_tags`: instance
    UUID -> tags (absent: the instance is gone, its finished incidents go at once). Kept for
    `window` seconds after they ended; a failed one also while its instance carries its tag or
    its tagging job runs."""
    now = time.time() if now is None else now
    busy = set(busy_jobs)
    dropped = []
    for inc in list(incidents):
        if not is_instance_incident(inc) or inc.repair_status not in incident_lifecycle.FINAL:
            continue
        tags = instance_tags.get(inc.instance or "")
        if tags is None:
            drop = True
        elif now - inc.mtime < window:
            drop = False
        elif inc.repair_status == "failed":
            drop = inc.tag not in set(tags) and not busy.intersection(inc.jobs)
        else:
            drop = True
        if drop:
            incidents.remove(inc)
            dropped.append(inc)
    return dropped
