"""Node failure: maintd's detection, fencing and recovery (docs/ha.md "Node failure").

Each tick maintd reads the nodes' lease ages from masterd (`masterd.leases`). A node whose lease
is older than `failure_time` is asked about: masterd asks the other master candidates whether
they reach it (`liveness`); only a strict majority of all master candidates (the master's
vote: the missed lease) that cannot reach it, nor were asked by it within the lease time,
makes it **failed**. Then one `node-failed` incident runs these steps (its `original` records
them, so a restarted maintd goes on where it stopped):

    offline -> offlining -> fencing (OOB power-off, confirmed by power-status)
                         -> waiting (no OOB: until last alive + lease + watchdog + 1 s)
            -> recover -> recovering -> completed | failed
    (the node online again) -> resyncing (activate-disks of the DRBD instances it is the
            secondary of) -> forgotten

Nothing is restarted before the fence is confirmed; an unconfirmed fence fails the incident.

The incident **owns its node's instances**: no second recovery may race it for one. When it
opens, the active instance incidents of the node (instmon's crash or stop reports that came
first) are canceled and listed in its `taken_over`; and a notification about an instance of the
node, from the node itself (its instmon before it died, or after its return) or about an
instance the incident is moving, is recorded in its `notifications` and starts nothing (`owner`,
asked by the daemon before it decides on a notification), while the incident is active and,
once it ended, as long as its node stays offline.

The planning (`suspects`, `decide`, `plan_recovery`) is pure; `NodeFailures` does the I/O
through the cluster (`RapiCluster`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from herder.core import model, reason
from herder.core.rapi import job_error_message
from herder.maintd import incidents as incident_lifecycle
from herder.maintd.rounds import MIRRORED, MOVABLE, Instance, Node

log = logging.getLogger("herder.maintd")

NODE_FAILED = incident_lifecycle.NODE_FAILED
FAILURE_TIME = 12.0  # seconds without a lease renewal before a node is suspect (default)
# seconds after lease + watchdog timeout, counted from the offline mark: the mark reaching the
# master candidates' ssconf (redistribution checks every 2 s), then a second to spare
FENCE_MARGIN = 3.0
DEFAULT_WATCHDOG_TIMEOUT = 10
RS_NORMAL = 0  # Ganeti's query result status (masterd.livefields)
UNFINISHED = ("queued", "waiting", "running", "canceling")
NOTIFICATIONS_KEPT = 20  # the newest notifications an incident records (its `notifications`)


@runtime_checkable
class Cluster(Protocol):
    """What node-failure handling needs of the cluster (`daemon.RapiCluster`)."""

    def leases(self) -> dict[str, Any]: ...

    def liveness(self, node: str) -> dict[str, Any]: ...

    def nodes(self) -> list[Node]: ...

    def instances(self) -> list[Instance]: ...

    def node_figures(self) -> dict[str, dict[str, Any]]: ...  # name -> RAPI node (bulk)

    def submit(self, ops: list[dict[str, Any]]) -> int: ...

    def job_info(self, job_id: int) -> dict[str, Any] | None: ...


# --- pure planning ------------------------------------------------------------------------------

def suspects(nodes: Sequence[Node], ages: Mapping[str, float | None], failure_time: float,
             busy: Iterable[str]) -> list[Node]:
    """Online, VM-capable nodes but the master whose lease is older than `failure_time`
    (`busy`: node UUIDs with an active node-failed incident)."""
    skip = set(busy)
    out = []
    for node in nodes:
        age = ages.get(node.name)
        if (node.master or node.offline or not node.vm_capable or node.uuid in skip
                or age is None or age < failure_time):
            continue
        out.append(node)
    return out


@dataclass(frozen=True)
class Verdict:
    failed: bool
    cannot_reach: list[str]  # the candidates (the master first) that cannot reach the node
    candidates: list[str]
    last_asked: float | None  # seconds since the node last asked a candidate for its lease
    why: str


def decide(answer: Mapping[str, Any], lease_time: float) -> Verdict:
    """The verdict on a suspect from masterd's liveness answer: failed only when a strict
    majority of the master candidates but the suspect itself cannot reach it (the master
    counts: it missed the lease) and it asked none of them for its lease within
    `lease_time`."""
    suspect = answer.get("node")
    candidates = sorted(c for c in answer.get("candidates") or [] if c != suspect)
    master = str(answer.get("master") or "")
    cannot = [master] if master in candidates else []
    asked: list[float] = []
    for name, vote in sorted((answer.get("votes") or {}).items()):
        if not isinstance(vote, Mapping) or "error" in vote:
            continue  # a candidate that did not answer says nothing
        age = vote.get("asked_age")
        if isinstance(age, (int, float)):
            asked.append(float(age))
        if vote.get("reachable") is False and not (isinstance(age, (int, float))
                                                   and age <= lease_time):
            cannot.append(name)
    last_asked = min(asked) if asked else None
    failed = len(candidates) > 0 and 2 * len(cannot) > len(candidates)
    why = (f"{len(cannot)} of {len(candidates)} other master candidates cannot reach it"
           + (f" ({', '.join(cannot)})" if cannot else ""))
    return Verdict(failed, cannot, candidates, last_asked, why)


@dataclass
class RecoveryPlan:
    moves: list[tuple[Instance, str]] = field(default_factory=list)  # in priority order
    lost: list[str] = field(default_factory=list)  # local disks: gone with the node
    unfit: list[str] = field(default_factory=list)  # no node has the memory left
    skipped: list[str] = field(default_factory=list)  # auto_recover off, or not up


def plan_recovery(failed: str, nodes: Sequence[Node], instances: Sequence[Instance],
                  free_memory: Mapping[str, int | None]) -> RecoveryPlan:
    """Where the failed node's primary instances go, higher `ha_priority` first, within the
    memory left (N+1: what does not fit is reported, not forced)."""
    plan = RecoveryPlan()
    by_name = {n.name: n for n in nodes}
    group = by_name[failed].group if failed in by_name else ""
    free = {name: value for name, value in free_memory.items()}

    def usable(name: str) -> bool:
        node = by_name.get(name)
        return (node is not None and name != failed and not node.offline and not node.drained
                and node.vm_capable and (not group or node.group == group))

    mine = [i for i in instances if i.pnode == failed]
    for inst in sorted(mine, key=lambda i: (-i.ha_priority, i.name)):
        if inst.admin_state != "up" or not inst.auto_recover:
            plan.skipped.append(inst.name)
            continue
        if inst.disk_template not in MOVABLE:
            plan.lost.append(inst.name)
            continue
        if inst.disk_template in MIRRORED:
            candidates = [s for s in inst.snodes if usable(s)]
        else:
            candidates = [n.name for n in nodes if usable(n.name)]

        def fits(name: str, need: int = inst.memory) -> bool:
            room = free.get(name)
            return room is None or room >= need

        fitting = [c for c in candidates if fits(c)]
        if not fitting:
            plan.unfit.append(inst.name)
            continue
        target = max(fitting, key=lambda c: (free.get(c) or 0, c))
        room = free.get(target)
        if room is not None:
            free[target] = room - inst.memory
        plan.moves.append((inst, target))
    return plan


def job_priority(ha_priority: int) -> int:
    """A job's priority (Ganeti's: -20 highest .. 19 lowest) from `ha_priority`."""
    return max(-20, min(19, -ha_priority))


def failover_ops(event: str, inst: Instance, target: str) -> list[dict[str, Any]]:
    return [{"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": inst.name,
             "ignore_consistency": True, "target_node": target, "shutdown_timeout": 0,
             "priority": job_priority(inst.ha_priority),
             "reason": [[reason.MAINTD, event, time.time_ns()]]}]


def fence_confirmed(results: Any) -> tuple[bool, str]:
    """Whether a fence job's result (OOB power-off, power-status) confirms the node is off."""
    try:
        (_, (off_status, _)), = results[-2]
        (_, (status, payload)), = results[-1]
    except (TypeError, ValueError, IndexError):
        return False, f"unexpected result of the fence job: {results!r:.200}"
    if off_status != RS_NORMAL:
        return False, "the out-of-band power-off failed (see the job's log)"
    if status != RS_NORMAL or not isinstance(payload, Mapping):
        return False, "the out-of-band power-status failed (see the job's log)"
    if payload.get("powered") is not False:
        return False, "the node is still powered after the out-of-band power-off"
    return True, "powered off (out-of-band power-status confirms)"


def new_incident(node: Node, original: dict[str, Any]) -> model.Incident:
    stamp = time.time()
    return model.Incident(uuid=str(uuidlib.uuid4()), node=node.uuid, original=original,
                          action="node-failed", repair_status="noted", tag="", ctime=stamp,
                          mtime=stamp)


def active(incidents: Iterable[model.Incident]) -> list[model.Incident]:
    return [i for i in incidents if i.action == NODE_FAILED and incident_lifecycle.is_active(i)]


def owner(incidents: Sequence[model.Incident], nodes: Sequence[Node], inst: Instance | None,
          hostname: str) -> model.Incident | None:
    """The node-failed incident that owns a notification from `hostname` about `inst` (None:
    the ordinary decision applies): one of the notifying node or of the instance's primary,
    while it is active or, ended, while its node is offline (a lost instance stays the
    incident's until the node returns); or an active one that is moving the instance (its
    `recovered`: a report of the target's start or of the source's end is part of the move)."""
    by_uuid = {n.uuid: n for n in nodes}
    for inc in reversed([i for i in incidents if i.action == NODE_FAILED]):
        node = by_uuid.get(inc.node)
        running = incident_lifecycle.is_active(inc)
        if node is not None and (running or node.offline) and (
                hostname == node.name or (inst is not None and inst.pnode == node.name)):
            return inc
        moving = inc.original.get("recovered") if isinstance(inc.original, dict) else None
        if running and inst is not None and isinstance(moving, dict) and inst.name in moving:
            return inc
    return None


def record(inc: model.Incident, key: str, entry: Mapping[str, Any]) -> None:
    """Append `entry` to the incident's `original[key]` (the newest NOTIFICATIONS_KEPT):
    what it took over or was told, shown with it."""
    state = inc.original if isinstance(inc.original, dict) else {}
    kept = [*(state.get(key) or []), dict(entry)][-NOTIFICATIONS_KEPT:]
    inc.original = {**state, key: kept}
    inc.touch()


def take_over(inc: model.Incident, incidents: Sequence[model.Incident]) -> list[model.Incident]:
    """Cancel the active instance incidents that act on the failed node (`inc.node`; a
    `notify` one only shows something), recorded in
    `inc`'s `taken_over`: the node-failed incident alone recovers its instances, after the
    fence (a restart or relocation planned from an earlier crash report would race it). A
    job of theirs already submitted runs on; the recovery plans from the instances as they
    are then."""
    taken = [i for i in incidents if i.instance is not None and i.node == inc.node
             and i.action != incident_lifecycle.NOTIFY and incident_lifecycle.is_active(i)]
    for other in taken:
        incident_lifecycle.set_status(other, "canceled")
        name = other.original.get("instance") if isinstance(other.original, dict) else None
        record(inc, "taken_over", {"incident": other.uuid, "instance": name or other.instance,
                                   "action": other.action, "jobs": list(other.jobs)})
        log.warning("node-failed incident %s takes over instance incident %s (%s of %s)",
                    inc.uuid, other.uuid, other.action, name or other.instance)
    return taken


# --- the steps (I/O through the cluster) --------------------------------------------------------

class NodeFailures:
    """Detection and the incidents' steps, once per maintd tick."""

    def __init__(self, cluster: Cluster, *, failure_time: float = FAILURE_TIME) -> None:
        self.cluster = cluster
        # maintd's own (--node-failure-time); the cluster's maintenance nodeFailureTime, read
        # with the lease ages, overrides it
        self.own_failure_time = failure_time
        self.failure_time = failure_time
        self.notes: dict[str, str] = {}  # node -> the last thing said about it (the page)
        self.unsupported = ""  # masterd has no leases (an older one, or a Ganeti cluster)
        self.off = False  # the cluster's setting (maintenance nodeRecovery) turned it off

    def summary(self) -> dict[str, Any]:
        """What the status page and `maintd status` say about node failures."""
        state = ("off (cluster setting nodeRecovery)" if self.off
                 else f"no leases: {self.unsupported}" if self.unsupported else "on")
        return {"state": state, "failure_time": self.failure_time,
                "notes": [self.notes[n] for n in sorted(self.notes)]}

    async def tick(self, incidents: list[model.Incident]) -> bool:
        """Look for failed nodes and advance their incidents; whether anything changed."""
        try:
            leases = await asyncio.to_thread(self.cluster.leases)
        except Exception as err:  # no leases: nothing to detect (said once on the page)
            if not self.unsupported:
                log.warning("node failures: cannot read the leases: %s", err)
            self.unsupported = str(err)
            return False
        self.unsupported = ""
        if leases.get("node_recovery") is False:  # the cluster's switch: nothing is done
            if not self.off:
                log.warning("node failures: off by the cluster's setting (herder cluster "
                            "modify --maintenance-node-recovery no); active incidents wait")
            self.off = True
            return False
        if self.off:
            log.info("node failures: on again by the cluster's setting")
        self.off = False
        setting = leases.get("node_failure_time")
        chosen = (float(setting) if isinstance(setting, (int, float)) and setting > 0
                  else self.own_failure_time)
        if chosen != self.failure_time:
            log.info("node failures: a node is suspect after %g s without a lease renewal (%s)",
                     chosen, "the cluster's maintenance nodeFailureTime" if chosen !=
                     self.own_failure_time else "maintd's --node-failure-time")
            self.failure_time = chosen
        nodes = await asyncio.to_thread(self.cluster.nodes)
        changed = await self._detect(nodes, leases, incidents)
        for inc in active(incidents):
            changed |= await self._advance(inc, nodes, float(leases["lease"]))
        by_uuid = {n.uuid: n for n in nodes}
        for inc in [i for i in incidents if i.action == NODE_FAILED and forgettable(i, by_uuid)]:
            before = inc.original
            if await self._returned(inc, by_uuid[inc.node].name if inc.node in by_uuid
                                    else None):
                log.info("forgetting node-failed incident %s: its node is back", inc.uuid)
                incidents.remove(inc)
                changed = True
            changed |= inc.original is not before
        return changed

    async def _returned(self, inc: model.Incident, name: str | None) -> bool:
        """The node is online again: its DRBD disks resync as the secondary of the instances
        failed over from it (activate-disks, as Ganeti's watcher runs for an instance whose
        secondary rebooted: `_CheckDisks`); whether the incident can be forgotten now (those
        jobs ended, or there were none)."""
        state = inc.original if isinstance(inc.original, dict) else {}
        if name is None:
            return True
        if "resync_jobs" not in state:
            instances = await asyncio.to_thread(self.cluster.instances)
            jobs = {}
            for inst in resync_instances(name, instances):
                jobs[inst.name] = await asyncio.to_thread(self.cluster.submit, [
                    {"OP_ID": "OP_INSTANCE_ACTIVATE_DISKS", "instance_name": inst.name,
                     "reason": [[reason.MAINTD, inc.uuid, time.time_ns()]]}])
            inc.original = {**state, "resync_jobs": jobs}
            self._step(inc, "resyncing" if jobs else "returned",
                       f"{name} is online again; " + (
                           f"its DRBD disks resync as the secondary of {', '.join(jobs)}"
                           if jobs else "nothing of it to resync"))
            return not jobs
        infos = {n: await self._job(int(j)) for n, j in state["resync_jobs"].items()}
        if any(i is not None and i.get("status") in UNFINISHED for i in infos.values()):
            return False
        bad = [f"{n}: {_job_error(i) if i else 'the job vanished'}" for n, i in infos.items()
               if i is None or i.get("status") != "success"]
        if bad:
            log.error("node-failed incident %s: activating disks after %s's return failed: "
                      "%s", inc.uuid, name, "; ".join(bad))
        return True

    async def _detect(self, nodes: list[Node], leases: Mapping[str, Any],
                      incidents: list[model.Incident]) -> bool:
        busy = {i.node for i in active(incidents)}
        changed = False
        for node in suspects(nodes, leases.get("nodes") or {}, self.failure_time, busy):
            age = float(leases["nodes"][node.name])
            answer = await asyncio.to_thread(self.cluster.liveness, node.name)
            verdict = decide(answer, float(leases["lease"]))
            if not verdict.failed:
                note = (f"{node.name}: no lease renewal for {age:.0f} s, but not failed: "
                        f"{verdict.why}")
                if self.notes.get(node.name) != note:
                    log.warning("%s", note)
                self.notes[node.name] = note
                continue
            inc = new_incident(node, {
                "kind": NODE_FAILED, "step": "offline", "lease_age": round(age, 1),
                "verdict": verdict.why, "recovered": {},
                "lost": [], "unfit": [], "skipped": [], "detail": "declared failed"})
            incidents.append(inc)
            incident_lifecycle.supersede(incidents)
            take_over(inc, incidents)
            log.error("node %s failed: no lease renewal for %.1f s and %s; incident %s",
                      node.name, age, verdict.why, inc.uuid)
            self.notes[node.name] = f"{node.name}: failed ({verdict.why})"
            changed = True
        return changed

    async def _submit(self, inc: model.Incident, ops: list[dict[str, Any]]) -> int:
        for op in ops:
            op.setdefault("reason", [[reason.MAINTD, inc.uuid, time.time_ns()]])
        job = await asyncio.to_thread(self.cluster.submit, ops)
        inc.jobs.append(job)
        incident_lifecycle.set_status(inc, "pending")
        return int(job)

    async def _job(self, job_id: int) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.cluster.job_info, job_id)

    def _step(self, inc: model.Incident, step: str, detail: str) -> None:
        times = {**(inc.original.get("times") or {}), step: round(time.time(), 3)}
        inc.original = {**inc.original, "step": step, "detail": detail, "times": times}
        inc.touch()
        log.info("node-failed incident %s: %s (%s)", inc.uuid, step, detail)

    def _fail(self, inc: model.Incident, detail: str) -> None:
        self._step(inc, "failed", detail)
        incident_lifecycle.set_status(inc, "failed")
        log.error("node-failed incident %s failed: %s", inc.uuid, detail)

    async def _advance(self, inc: model.Incident, nodes: list[Node], lease_time: float) -> bool:
        state = inc.original if isinstance(inc.original, dict) else {}
        step = state.get("step")
        name = next((n.name for n in nodes if n.uuid == inc.node), None)
        if name is None:
            self._fail(inc, "the node is no longer in the cluster")
            return True
        if step == "offline":
            await self._submit(inc, [{"OP_ID": "OP_NODE_SET_PARAMS", "node_name": name,
                                      "offline": True, "auto_promote": True, "force": True}])
            self._step(inc, "offlining", f"marking {name} offline")
            return True
        if step in ("offlining", "fencing", "recovering"):
            return await self._after_jobs(inc, name, lease_time, step)
        if step == "waiting":
            if time.time() < float(state["fence_after"]):
                return False
            self._step(inc, "recover", "the lease and the watchdog timeout have run out")
            return True
        if step == "recover":
            return await self._recover(inc, name, nodes)
        return False

    async def _after_jobs(self, inc: model.Incident, name: str, lease_time: float,
                          step: str) -> bool:
        infos = [await self._job(j) for j in self._step_jobs(inc)]
        if any(i is not None and i.get("status") in UNFINISHED for i in infos):
            return False
        failed = [i for i in infos if i is None or i.get("status") != "success"]
        if step == "recovering":
            return self._finish(inc, infos)
        if failed:
            why = "the job vanished" if failed[0] is None else _job_error(failed[0])
            self._fail(inc, f"{step}: {why}; nothing was recovered")
            return True
        if step == "offlining":
            return await self._fence(inc, name, lease_time)
        confirmed, detail = fence_confirmed(infos[-1].get("opresult") if infos[-1] else None)
        if not confirmed:
            self._fail(inc, f"fence not confirmed: {detail}; nothing was recovered")
            return True
        self._step(inc, "recover", detail)
        return True

    def _step_jobs(self, inc: model.Incident) -> list[int]:
        first = int(inc.original.get("step_jobs_from", 0))
        return inc.jobs[first:]

    async def _fence(self, inc: model.Incident, name: str, lease_time: float) -> bool:
        details = await asyncio.to_thread(self.cluster.node_figures)
        ndparams = (details.get(name) or {}).get("ndparams") or {}
        inc.original = {**inc.original, "step_jobs_from": len(inc.jobs)}
        if ndparams.get("oob_program"):
            await self._submit(inc, [
                {"OP_ID": "OP_OOB_COMMAND", "node_names": [name], "command": "power-off"},
                {"OP_ID": "OP_OOB_COMMAND", "node_names": [name], "command": "power-status"}])
            inc.original = {**inc.original, "fence": "oob"}
            self._step(inc, "fencing", f"powering {name} off out of band")
            return True
        watchdog = int(ndparams.get("watchdog_timeout") or DEFAULT_WATCHDOG_TIMEOUT)
        # from the offline mark (no renewal is granted after it) rather than the last renewal
        # seen, in case the node renewed after it was suspected
        after = time.time() + lease_time + watchdog + FENCE_MARGIN
        inc.original = {**inc.original, "fence": "watchdog", "fence_after": after}
        self._step(inc, "waiting", f"no oob_program: waiting {after - time.time():.0f} s for "
                                   f"{name}'s lease ({lease_time:g} s) and watchdog "
                                   f"({watchdog} s) to run out")
        return True

    async def _recover(self, inc: model.Incident, name: str, nodes: list[Node]) -> bool:
        instances = await asyncio.to_thread(self.cluster.instances)
        details = await asyncio.to_thread(self.cluster.node_figures)
        free = {n: _free_memory(d) for n, d in details.items()}
        plan = plan_recovery(name, nodes, instances, free)
        inc.original = {**inc.original, "step_jobs_from": len(inc.jobs),
                        "lost": plan.lost, "unfit": plan.unfit, "skipped": plan.skipped,
                        "recovered": {i.name: t for i, t in plan.moves}}
        for inst, target in plan.moves:
            await self._submit(inc, failover_ops(inc.uuid, inst, target))
        for lost in plan.lost:
            log.error("node-failed incident %s: %s had its disks on %s: lost until the node "
                      "returns", inc.uuid, lost, name)
        for unfit in plan.unfit:
            log.error("node-failed incident %s: no node has the memory left for %s",
                      inc.uuid, unfit)
        moves = ", ".join(f"{i.name} -> {t}" for i, t in plan.moves) or "nothing to move"
        self._step(inc, "recovering", moves)
        if not plan.moves:
            return self._finish(inc, [])
        return True

    def _finish(self, inc: model.Incident, infos: list[dict[str, Any] | None]) -> bool:
        bad = [_job_error(i) if i else "a job vanished" for i in infos
               if i is None or i.get("status") != "success"]
        lost, unfit = inc.original.get("lost") or [], inc.original.get("unfit") or []
        summary = "; ".join(filter(None, [
            f"recovered {len(infos) - len(bad)} instance(s)",
            f"lost: {', '.join(lost)}" if lost else "",
            f"no capacity for: {', '.join(unfit)}" if unfit else "",
            f"failed: {'; '.join(bad)}" if bad else ""]))
        if bad:
            self._fail(inc, summary)
        else:
            self._step(inc, "done", summary)
            incident_lifecycle.set_status(inc, "completed")
        return True


def resync_instances(node: str, instances: Sequence[Instance]) -> list[Instance]:
    """The instances whose DRBD disks a returning node holds as their secondary, with their
    disks active (Ganeti's watcher: `_CheckDisks` on a node whose boot id changed)."""
    return sorted((i for i in instances if node in i.snodes and i.disk_template == "drbd"
                   and i.disks_active), key=lambda i: i.name)


def _free_memory(details: Mapping[str, Any]) -> int | None:
    value = details.get("mfree")
    return int(value) if isinstance(value, (int, float)) else None


def _job_error(info: Mapping[str, Any]) -> str:
    return f"job {info.get('id')} {info.get('status')}: {job_error_message(info)}"


def forgettable(inc: model.Incident, nodes: Mapping[str, Node]) -> bool:
    """A finished node-failed incident is kept while its node is offline (the operator sees
    it), and forgotten once the node is back online or gone."""
    node = nodes.get(inc.node)
    return not incident_lifecycle.is_active(inc) and (node is None or not node.offline)
