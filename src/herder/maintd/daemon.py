"""The maintenance loop (design-maintd "Mode of operation").

Every `interval` seconds: read the cluster (through the RAPI client), poll every node's agent
once (`agents`: its reports serve the incident sources, the watcher and balancing), ask the
incident sources, merge observations into incidents, forget acknowledged ones, check the running
round's jobs; when they have all finished (and `round_delay` has passed since the last round),
plan the next round and submit all its jobs at once.

After the incidents' jobs a round gets harep's repairs (when enabled), the watcher's
(`watcher`: activate disks, restart instances that are down) and balancing moves (`balance`,
when the cluster's maintenance setting `balance` is true), each on the nodes the others leave.

A failed (or vanished) job fails its incident: no further jobs, the node is tagged
`maintd:repairfailed:<event>`. The final step's success completes it (seen in the cluster: the
node offline and tagged, or the live-repair's tag present).

Instance incidents (`notify`: instmon's failure notifications, `herder.maintd.instances`) are
decided when the notification arrives and planned right after the node incidents' jobs, also
before `round_delay` has passed (a crashed instance does not wait for the pacing of
evacuations); their job's success completes them, a failure tags the instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from herder.core import model, notification, reason
from herder.maintd import backups, incidents, nodefail, vmhealth
from herder.maintd import instances as instance_incidents
from herder.maintd import watcher as watcher_repairs
from herder.maintd.agents import CPU_LOAD, INST_STATUS, AgentRound
from herder.maintd.rounds import Instance, Job, Node, Plan, failure_tag_job, plan_round
from herder.maintd.sources import IncidentSource, Observation
from herder.maintd.state import MaintState, StateStore, intent_key

log = logging.getLogger("herder.maintd")

FINISHED_OK = "success"
UNFINISHED = ("queued", "waiting", "running", "canceling")
NODE_FAILURE_INTERVAL = 1.0  # seconds between looks at the nodes' leases
SEEN_SAVE_INTERVAL = 5.0  # seconds between saves of only the replay-protection stamps
RECEIVED_KEEP = 1000  # notifications remembered for the duplicate check
NOTIFICATIONS_SHOWN = 200  # ... of which /1/notifications and /1/overview show the newest


class Agents(Protocol):
    """The nodes' agents (`herder.maintd.agents.AgentPoller`)."""

    async def poll(self, nodes: Sequence[Node]) -> AgentRound: ...


class Cluster(Protocol):
    """What maintd needs of the cluster (sync; called in a thread)."""

    def nodes(self) -> list[Node]: ...

    def instances(self) -> list[Instance]: ...

    def submit(self, ops: list[dict[str, Any]]) -> int: ...

    def job_status(self, job_id: int) -> str | None: ...  # None: unknown job

    def maintd_jobs(self) -> dict[int, set[str]]: ...  # job id -> event uuids in its reasons

    def policy_tags(self) -> tuple[list[str], dict[str, list[str]]]: ...  # cluster, per group

    # optional: def jobs(self) -> list[instance_incidents.JobInfo] (the queue, for the
    # ordered-stop check)


class RapiCluster:
    """`Cluster` through `herder.core.rapi.RapiClient`."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def nodes(self) -> list[Node]:
        return [Node.from_rapi(d) for d in self.client.get_nodes(bulk=True)]

    def instances(self) -> list[Instance]:
        return [Instance.from_rapi(d) for d in self.client.get_instances(bulk=True)]

    def submit(self, ops: list[dict[str, Any]]) -> int:
        return int(self.client.request("POST", "/2/herder/jobs", None, {"ops": ops}))

    def job_status(self, job_id: int) -> str | None:
        try:
            return str(self.client.get_job_status(job_id).get("status"))
        except Exception as err:
            if getattr(err, "status", None) == 404:
                return None
            raise

    def leases(self) -> dict[str, Any]:
        return dict(self.client.get_herder("leases"))

    def liveness(self, node: str) -> dict[str, Any]:
        return dict(self.client.get_herder(f"nodes/{node}/liveness"))

    def job_info(self, job_id: int) -> dict[str, Any] | None:
        try:
            return dict(self.client.get_job_status(job_id))
        except Exception as err:
            if getattr(err, "status", None) == 404:
                return None
            raise

    def maintenance(self) -> dict[str, Any]:
        return dict(self.client.get_herder("maintenance"))

    def node_figures(self) -> dict[str, dict[str, Any]]:
        return {d["name"]: d for d in self.client.get_nodes(bulk=True)}

    def policy_tags(self) -> tuple[list[str], dict[str, list[str]]]:
        groups = {g["uuid"]: list(g.get("tags") or []) for g in self.client.get_groups(bulk=True)}
        return list(self.client.get_cluster_tags()), groups

    def jobs(self) -> list[instance_incidents.JobInfo]:
        return [instance_incidents.JobInfo.from_rapi(j) for j in self.client.get_jobs(bulk=True)]

    def maintd_jobs(self) -> dict[int, set[str]]:
        found: dict[int, set[str]] = {}
        for job in self.client.get_jobs(bulk=True):
            events = {r[1] for op in job.get("ops") or [] for r in op.get("reason") or []
                      if isinstance(r, list) and len(r) == 3 and r[0] == reason.MAINTD}
            if events:
                found[int(job["id"])] = events
        return found


class Maintd:
    def __init__(self, cluster: Cluster, store: StateStore, sources: Sequence[IncidentSource],
                 round_delay: float = 0.0, interval: float = 5.0, enabled: bool = True,
                 harep: bool = False, watcher: bool = True, agents: Agents | None = None,
                 balance: bool | None = None, balance_threshold: float | None = None,
                 restart_budget: int = watcher_repairs.BUDGET,
                 restart_window: float = watcher_repairs.WINDOW,
                 restart_settle: float = watcher_repairs.SETTLE,
                 failure_table: Mapping[tuple[str, str], str] | None = None,
                 failure_window: float = instance_incidents.FAILURE_WINDOW,
                 ordered_grace: float = instance_incidents.ORDERED_GRACE,
                 recovery: notification.Recovery | None = None,
                 node_recovery: bool = True,
                 node_failure_time: float = nodefail.FAILURE_TIME,
                 clock: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        # scheduled backups (maintd.backups); `clock` says when schedules are due (tests)
        self.backups = backups.BackupRunner(clock)
        # dead nodes: detected, fenced, their instances recovered (maintd.nodefail); a
        # cluster without leases (Ganeti's) has none to watch
        self.node_failures = (nodefail.NodeFailures(cluster, failure_time=node_failure_time)
                              if node_recovery and isinstance(cluster, nodefail.Cluster)
                              else None)
        self.store = store
        self.sources = list(sources)
        self.round_delay = round_delay
        self.interval = interval
        self.enabled = enabled
        self.harep = harep
        self.watcher = watcher
        # every node's mond, polled once per tick: diagnoses, instance states, cpu load
        self.agents = agents
        self.agent_round = AgentRound()
        self.balance = balance  # None: the cluster's maintenance setting `balance`
        self.balance_threshold = balance_threshold  # None: the setting `balanceThreshold`
        self.settings: dict[str, Any] = {}
        self.restart_budget = restart_budget
        self.restart_window = restart_window
        self.restart_settle = restart_settle
        self.restarts: dict[str, list[float]] = {}  # instance -> restart submissions (memory)
        self.last_balance: dict[str, Any] = {}
        self.state = MaintState()
        self.observations: dict[str, Observation] = {}
        self.nodes: list[Node] = []
        self._instances: list[Instance] = []
        self.notes: list[str] = []
        self.rounds = 0
        self.ticks = 0  # polls of the cluster and the agents
        self.last_round_end = 0.0
        self.last_tick = 0.0
        self.last_error = ""
        self.round_cpu: list[float] = []
        self.failure_table = dict(notification.DEFAULT_FAILURES if failure_table is None
                                  else failure_table)
        # what to do about hung and paused instances (mond's reports; herder.maintd.vmhealth)
        self.recovery = recovery or notification.Recovery(self.failure_table,
                                                          dict(notification.DEFAULT_ACTIONS))
        self.sightings = vmhealth.SightingCounter()
        self.failure_window = failure_window
        self.ordered_grace = ordered_grace
        # notification key -> the record answered (duplicates: 409); the newest RECEIVED_KEEP
        self.received: dict[Any, dict[str, Any]] = {}
        self._started = False
        self._node_failure_task: asyncio.Task[None] | None = None
        self._seen_saved = 0.0
        self._wake = asyncio.Event()
        self._save_lock = asyncio.Lock()
        self._notify_lock = asyncio.Lock()

    # --- state ---------------------------------------------------------------------------------

    async def _save(self) -> None:
        async with self._save_lock:  # in order: the tick and the notification route both save
            await asyncio.to_thread(self.store.save, self.state)

    async def start(self) -> None:
        self.state = await asyncio.to_thread(self.store.load)
        for source in self.sources:
            restore = getattr(source, "restore", None)
            if restore is not None:
                restore(self.state.seen)
        if self.state.intents:
            await self._adopt()
        if await self.backups.adopt(self.cluster, self.state.backups):
            await self._save()
        self._started = True

    async def _adopt(self) -> None:
        """After a crash: jobs submitted for an intent whose id was never recorded."""
        known = {j for inc in self.state.incidents for j in inc.jobs}
        queue = await asyncio.to_thread(self.cluster.maintd_jobs)
        for intent in self.state.intents:
            inc = self.state.incident(intent["event"])
            for job_id, events in sorted(queue.items()):
                if intent["event"] not in events or job_id in known:
                    continue
                if inc is None and job_id in self.state.jobs:
                    continue
                log.warning("adopting job %d of event %s (submitted before a crash)",
                            job_id, intent["event"])
                known.add(job_id)
                if job_id not in self.state.jobs:
                    self.state.jobs.append(job_id)  # the next round waits for it
                if inc is not None:  # (None: a harep repair, tracked by its tags)
                    inc.jobs.append(job_id)
                    if incidents.is_active(inc):
                        incidents.set_status(inc, "pending")
        self.state.intents = []
        await self._save()

    # --- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        if not self._started:
            await self.start()
        if self.node_failures is not None:
            # apart from the tick: a dead node's agent makes a tick wait for its timeout
            self._node_failure_task = asyncio.create_task(self._watch_nodes())
        try:
            while True:
                await self._tick_once()
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval)
        finally:
            if self._node_failure_task is not None:
                self._node_failure_task.cancel()

    async def _read_settings(self) -> None:
        """The cluster's maintenance settings, read every tick: `enabled` (herder cluster
        modify --maintenance no, a merge's pause) takes effect at once, also on the node
        failure watch, and balancing follows its settings."""
        getter = getattr(self.cluster, "maintenance", None)
        if getter is None:
            return
        try:
            self.settings = dict(await asyncio.to_thread(getter) or {})
        except Exception as err:  # keep the last known settings
            log.warning("cannot read the maintenance settings: %s", err)
            return
        enabled = self.settings.get("enabled")
        if isinstance(enabled, bool) and enabled != self.enabled:
            log.info("maintenance %s", "enabled" if enabled else "disabled: nothing is done")
            self.enabled = enabled

    async def _tick_once(self) -> None:
        try:
            await self.tick()
            self.last_error = ""
        except asyncio.CancelledError:
            raise
        except Exception as err:  # keep running; show it on the page
            self.last_error = f"{type(err).__name__}: {err}"
            log.exception("maintenance tick failed")

    async def _watch_nodes(self) -> None:
        """Node failures every `NODE_FAILURE_INTERVAL` seconds (maintd.nodefail)."""
        assert self.node_failures is not None
        while True:
            try:
                if self.enabled and await self.node_failures.tick(self.state.incidents):
                    await self._save()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # keep watching; show it on the page
                self.last_error = f"node failures: {type(err).__name__}: {err}"
                log.exception("node failure check failed")
            await asyncio.sleep(NODE_FAILURE_INTERVAL)

    def wake(self) -> None:
        self._wake.set()

    async def observe(self, nodes: list[Node]) -> None:
        self.agent_round = await self.agents.poll(nodes) if self.agents else AgentRound()
        merged: dict[str, Observation] = {}
        for source in self.sources:
            merged.update(await source.poll(nodes, self.agent_round))
        self.observations = merged

    async def tick(self) -> Plan | None:
        """One pass; returns the plan when a round was started."""
        if not self._started:
            await self.start()
        self.last_tick = time.time()
        self.ticks += 1
        await self._read_settings()
        nodes = await asyncio.to_thread(self.cluster.nodes)
        instances = await asyncio.to_thread(self.cluster.instances)
        self.nodes = nodes
        self._instances = instances
        await self.observe(nodes)
        cpu0 = time.process_time()
        jobs_before = list(self.state.jobs)
        busy = await self._check_jobs(nodes, instances)
        if jobs_before and self.state.jobs != jobs_before:
            # Jobs ended after the nodes were read: read them again, so that what those jobs
            # did (a repairfailed tag) is seen before an incident is forgotten for its absence.
            nodes = await asyncio.to_thread(self.cluster.nodes)
            instances = await asyncio.to_thread(self.cluster.instances)
            self.nodes = nodes
            self._instances = instances
        st = self.state
        changed = False
        data = {u: o.data for u, o in self.observations.items() if o.data is not None}
        seen = self._seen()
        seen_changed = seen != st.seen
        st.seen = seen
        created = incidents.observe(st.incidents, data)
        for inc in created:
            log.info("new incident %s on node %s: %s", inc.uuid, inc.node, inc.action)
        changed |= bool(created)
        changed |= await self._health(nodes, instances)
        changed |= await self.backups.tick(self.cluster, st.backups, self.settings, instances,
                                           self.enabled, self._save)
        tags = {n.uuid: n.tags for n in nodes}
        dropped = incidents.forget(st.incidents, data, tags, st.jobs)
        for inc in dropped:
            log.info("forgetting incident %s (%s)", inc.uuid, inc.repair_status)
        changed |= bool(dropped)
        inst_tags = {i.uuid: i.tags for i in instances if i.uuid}
        dropped = instance_incidents.forget(st.incidents, inst_tags, window=self.failure_window,
                                            busy_jobs=st.jobs)
        for inc in dropped:
            log.info("forgetting instance incident %s (%s)", inc.uuid, inc.repair_status)
        changed |= bool(dropped)
        plan = None
        paced = time.time() - self.last_round_end >= self.round_delay
        if not busy and self.enabled and not paced and instance_incidents.recovering(st.incidents):
            # only the instance incidents: they do not wait for the round delay
            plan = Plan()
            changed |= self._instance_jobs(nodes, instances, plan)
            self.notes = plan.notes
            if plan.jobs:
                await self._execute(plan, nodes)
                changed = True
            else:
                plan = None
        elif not busy and self.enabled and paced:
            plan = plan_round(nodes, instances, st.incidents,
                              try_unmovable=getattr(self.cluster, "delegates_checks", False))
            self.notes = plan.notes
            changed |= self._instance_jobs(nodes, instances, plan)
            if self.harep:
                plan.jobs.extend(await self._harep_jobs(nodes, instances, plan))
            if self.watcher:
                plan.jobs.extend(await self._watcher_jobs(nodes, instances, plan))
            plan.jobs.extend(await self._balance_jobs(nodes, instances, plan))
            if plan.jobs or plan.completed or plan.failed:
                await self._execute(plan, nodes)
                changed = True
            else:
                plan = None
        if changed:
            await self._save()
        elif seen_changed and time.monotonic() - self._seen_saved >= SEEN_SAVE_INTERVAL:
            # only the replay-protection stamps changed: the local file suffices
            await asyncio.to_thread(getattr(self.store, "save_local", self.store.save), st)
            self._seen_saved = time.monotonic()
        self.round_cpu.append(time.process_time() - cpu0)
        del self.round_cpu[:-100]
        return plan

    async def _health(self, nodes: list[Node], instances: list[Instance]) -> bool:
        """Incidents for the unwell instances this tick's inst-status reports show (hung,
        paused on an I/O error, stray copies: `vmhealth`); whether the state changed."""
        reports = self.agent_round.by_name(nodes, INST_STATUS)
        found = vmhealth.sightings(reports, instances)
        counts = self.sightings.update(found, reports)
        busy: set[str] = set()
        jobs = getattr(self.cluster, "jobs", None)
        if found and jobs is not None:
            try:
                queue = await asyncio.to_thread(jobs)
            except Exception as err:  # no evidence that no job moves them: no stray stopped
                log.warning("cannot read the job queue: %s", err)
                busy = {s.instance for s in found}
            else:
                busy = {name for job in queue if job.status in UNFINISHED
                        for name in job.instances | job.lingering}
        result = vmhealth.assess(
            found, counts, nodes, instances, self.state.incidents, self.recovery.actions,
            polled=reports, busy=busy,
            strays_allowed=not getattr(self.cluster, "delegates_checks", False),
            hung_polls=self.recovery.hung_polls, window=self.failure_window)
        for note in result.notes:
            log.warning("%s", note)
        for inc in result.incidents + result.node_incidents:
            log.info("new incident %s (%s): %s", inc.uuid, vmhealth.kind_of(inc) or "storage",
                     inc.action)
        self.state.incidents.extend(result.incidents + result.node_incidents)
        for event in result.resolved:
            well = self.state.incident(event)
            if well is not None:
                log.info("incident %s: its instance is well again", event)
                incidents.set_status(well, "completed")
        return bool(result.incidents or result.node_incidents or result.resolved)

    async def _harep_jobs(self, nodes: list[Node], instances: list[Instance],
                          plan: Plan) -> list[Job]:
        from herder.maintd import harep

        cluster_tags, group_tags = await asyncio.to_thread(self.cluster.policy_tags)
        pending = [s for i in instances
                   for s in (harep.parse_state_tag(t) for t in i.tags)
                   if s is not None and s.kind == "pending"]
        event_jobs: dict[str, list[int]] = {}
        if any(not s.jobs for s in pending):
            queue = await asyncio.to_thread(self.cluster.maintd_jobs)
            for job_id, events in queue.items():
                for event in events:
                    event_jobs.setdefault(event, []).append(job_id)
        ids = {j for s in pending for j in (s.jobs or event_jobs.get(s.uuid, ()))}
        status = {j: await asyncio.to_thread(self.cluster.job_status, j) for j in ids}
        names = {n.uuid: n.name for n in nodes}
        affected = {names[u] for u in incidents.leading(self.state.incidents) if u in names}
        return harep.plan_harep(nodes, instances, plan, cluster_tags, group_tags, status,
                                event_jobs, affected)

    def _not_failing(self, nodes: list[Node], instances: list[Instance]) -> list[Instance]:
        """`instances` less those of nodes with an active node-failed incident: that incident
        alone moves them, once the node is fenced (maintd.nodefail)."""
        failing = {i.node for i in nodefail.active(self.state.incidents)}
        names = {n.name for n in nodes if n.uuid in failing}
        return [i for i in instances if i.pnode not in names] if names else instances

    def _instance_jobs(self, nodes: list[Node], instances: list[Instance], plan: Plan) -> bool:
        """Adds the instance incidents' jobs to `plan`; whether an incident changed."""
        instances = self._not_failing(nodes, instances)
        res = instance_incidents.plan_instances(nodes, instances, self.state.incidents, plan)
        for event in res.canceled:
            inc = self.state.incident(event)
            if inc is not None:
                log.info("instance incident %s: nothing left to do", event)
                incidents.set_status(inc, "canceled")
        plan.jobs.extend(res.jobs)
        plan.notes.extend(res.notes)
        return bool(res.canceled)

    def _affected(self, nodes: list[Node], failed: bool = False) -> set[str]:
        """Names of nodes with an active incident (`failed`: or a failed one, or tagged so)."""
        names = {n.uuid: n.name for n in nodes}
        out = {names[u] for u in incidents.leading(self.state.incidents) if u in names}
        if failed:
            out |= {names[i.node] for i in self.state.incidents
                    if i.repair_status == "failed" and i.node in names
                    and incidents.is_node_incident(i)}
            out |= {n.name for n in nodes
                    if any(t.startswith(incidents.FAILED_PREFIX) for t in n.tags)}
        return out

    async def _watcher_jobs(self, nodes: list[Node], instances: list[Instance],
                            plan: Plan) -> list[Job]:
        # an agent that did not answer: no states, no restarts there; disks are still activated
        reports = self.agent_round.by_name(watcher_repairs.live_nodes(nodes), INST_STATUS)
        states = watcher_repairs.states_of(reports, instances)
        now = time.time()
        for name in list(self.restarts):
            self.restarts[name] = [t for t in self.restarts[name]
                                   if now - t < self.restart_window]
            if not self.restarts[name]:
                del self.restarts[name]
        skip = instance_incidents.recovering(self.state.incidents)
        instances = self._not_failing(nodes, instances)
        res = watcher_repairs.plan_watcher(nodes, instances, plan, states, self.restarts,
                                           self._affected(nodes), now, self.restart_budget,
                                           self.restart_window, self.restart_settle,
                                           skip={i.name for i in instances if i.uuid in skip
                                                 or instance_incidents.OPTOUT_TAG in i.tags}
                                           | backups.exporting(self.state.backups))
        for name in res.restarted:
            log.info("restarting instance %s: it should run but is down", name)
            self.restarts.setdefault(name, []).append(now)
        plan.notes.extend(res.notes)
        return res.jobs

    async def _balance_jobs(self, nodes: list[Node], instances: list[Instance],
                            plan: Plan) -> list[Job]:
        from herder.maintd import balance

        enabled = (bool(self.settings.get("balance", False)) if self.balance is None
                   else self.balance)
        if not enabled:
            return []
        threshold = self.balance_threshold
        if threshold is None:
            try:
                threshold = float(self.settings.get("balanceThreshold", 0.1))
            except (TypeError, ValueError):
                threshold = 0.1
        figures_of = getattr(self.cluster, "node_figures", None)
        figures = await asyncio.to_thread(figures_of) if figures_of is not None else None
        disk_moves = self.settings.get("balanceDiskMoves", True) is not False
        mond_data = None
        if self.settings.get("balanceDynamicLoad") is True and self.agents is not None:
            # hbal --mond: every node's cpu-avg-load, or (Ganeti's rule) none is used
            reports = self.agent_round.by_name(watcher_repairs.live_nodes(nodes), CPU_LOAD)
            mond_data = {name: [rep] for name, rep in reports.items()}
        cpu0 = time.process_time()
        res = await asyncio.to_thread(balance.plan_balance, nodes, instances, plan, threshold,
                                      self._affected(nodes, failed=True), figures,
                                      disk_moves=disk_moves, mond_data=mond_data)
        self.last_balance = {"initial_score": res.initial_score,
                             "final_score": res.final_score, "jobs": len(res.jobs),
                             "disk_moves": disk_moves, "dynamic_load": res.dynamic_load,
                             "cpu": round(time.process_time() - cpu0, 4)}
        plan.notes.extend(res.notes)
        return res.jobs

    async def _check_jobs(self, nodes: list[Node],
                          instances: Sequence[Instance] = ()) -> bool:
        """Whether the running round's jobs still run; handles their end."""
        st = self.state
        if not st.jobs:
            return False
        statuses = {j: await asyncio.to_thread(self.cluster.job_status, j) for j in st.jobs}
        if any(s in UNFINISHED for s in statuses.values()):
            return True
        names = {n.uuid: n.name for n in nodes}
        inst_names = {i.uuid: i.name for i in instances if i.uuid}
        failures: list[Job] = []
        for job_id, status in statuses.items():
            if status == FINISHED_OK:
                for inc in st.incidents:
                    if (job_id in inc.jobs and incidents.is_active(inc)
                            and instance_incidents.is_instance_incident(inc)):
                        log.info("instance incident %s completed (job %d)", inc.uuid, job_id)
                        incidents.set_status(inc, "completed")
                continue
            for inc in st.incidents:
                if job_id in inc.jobs and incidents.is_active(inc) and self._fall_back(
                        inc, job_id, status, nodes, instances):
                    continue
                if job_id in inc.jobs and incidents.is_active(inc):
                    log.warning("job %d of incident %s ended %s: incident failed", job_id,
                                inc.uuid, status or "unknown")
                    self._fail(inc)
                    if instance_incidents.is_instance_incident(inc):
                        if inc.instance in inst_names:
                            failures.append(instance_incidents.failure_tag_job(
                                inc, inst_names[inc.instance]))
                    elif inc.node in names:
                        failures.append(failure_tag_job(inc, names[inc.node]))
                elif (job_id in inc.jobs and inc.repair_status == "failed"
                      and job_id == inc.jobs[-1]):
                    log.warning("the repairfailed tag job %d of incident %s ended %s",
                                job_id, inc.uuid, status or "unknown")
                    inc.tag = ""  # not tagged: see incidents.forget
        st.jobs = []
        self.last_round_end = time.time()
        if failures:
            await self._submit(failures)
        await self._save()
        return bool(failures)

    def _fall_back(self, inc: model.Incident, job_id: int, status: str | None,
                   nodes: Sequence[Node], instances: Sequence[Instance]) -> bool:
        """A failed restart of an instance that can move: the incident is planned again as a
        relocation (the spec's "then on a different host"); whether it was."""
        if not instance_incidents.is_instance_incident(inc):
            return False
        inst = next((i for i in instances if i.uuid == inc.instance), None)
        step = instance_incidents.fallback(inc, inst, nodes)
        if step is None:
            return False
        inc.action, why = step
        log.warning("job %d of incident %s ended %s: %s", job_id, inc.uuid,
                    status or "unknown", why)
        incidents.set_status(inc, "noted")
        return True

    def _seen(self) -> dict[str, list[Any]]:
        seen: dict[str, list[Any]] = dict(self.state.seen)
        for source in self.sources:
            last = getattr(source, "last", None)
            if isinstance(last, dict):
                seen.update({k: list(v) for k, v in last.items()})
        return seen

    def _fail(self, inc: model.Incident) -> None:
        incidents.set_status(inc, "failed")
        inc.tag = incidents.failed_tag(inc.uuid)

    async def _execute(self, plan: Plan, nodes: list[Node]) -> None:
        st = self.state
        names = {n.uuid: n.name for n in nodes}
        for event in plan.completed:
            inc = st.incident(event)
            if inc is not None:
                log.info("incident %s completed", event)
                incidents.set_status(inc, "completed")
        extra: list[Job] = []
        for event in plan.failed:
            inc = st.incident(event)
            if inc is not None:
                log.warning("incident %s cannot be handled (live-repair without command)", event)
                self._fail(inc)
                if inc.node in names:
                    extra.append(failure_tag_job(inc, names[inc.node]))
        jobs = plan.jobs + extra
        if jobs:
            self.rounds += 1
            await self._submit(jobs)

    async def _submit(self, jobs: Iterable[Job], tag_failures: bool = True) -> None:
        """Intent first, then submit, then the job id (crash-safe; see `state`). A job the
        cluster refuses at submission fails its incident, which is tagged as failed too."""
        st = self.state
        refused: list[Job | None] = []  # their failure-tag jobs (None: the object is gone)
        jobs = list(jobs)
        keys = [intent_key(j.event, j.step, self.rounds) for j in jobs]
        st.intents.extend({"key": k, "event": j.event, "step": j.step}
                          for k, j in zip(keys, jobs, strict=True))
        for job in jobs:
            inc = st.incident(job.event)
            if inc is not None and inc.repair_status == "noted":
                incidents.set_status(inc, "pending")
        await self._save()
        for key, job in zip(keys, jobs, strict=True):
            try:
                job_id = await asyncio.to_thread(self.cluster.submit, job.ops)
            except Exception as err:
                log.error("submitting %s job for %s failed: %s", job.step, job.event, err)
                inc = st.incident(job.event)
                if inc is not None and incidents.is_active(inc):
                    self._fail(inc)
                    if tag_failures and job.step != "failtag":
                        refused.append(self._failure_tag(inc))
                if inc is not None and job.step == "failtag":
                    inc.tag = ""  # not tagged: see incidents.forget
                st.intents = [i for i in st.intents if i["key"] != key]
                await self._save()
                continue
            log.info("submitted job %d (%s) for incident %s", job_id, job.step, job.event)
            inc = st.incident(job.event)
            if inc is not None:
                inc.jobs.append(job_id)
            st.jobs.append(job_id)
            st.intents = [i for i in st.intents if i["key"] != key]
            await self._save()
        tags = [j for j in refused if j is not None]
        if tags:
            await self._submit(tags, tag_failures=False)

    def _failure_tag(self, inc: model.Incident) -> Job | None:
        """The job tagging a failed incident's node (or, for an instance incident, its
        instance) `maintd:repairfailed:<event>`; None when it is gone."""
        if instance_incidents.is_instance_incident(inc):
            inst = next((i for i in self._instances if i.uuid == inc.instance), None)
            return instance_incidents.failure_tag_job(inc, inst.name) if inst is not None else None
        node = next((n for n in self.nodes if n.uuid == inc.node), None)
        return failure_tag_job(inc, node.name) if node is not None else None

    # --- views and commands --------------------------------------------------------------------

    async def cancel(self, event: str) -> model.Incident:
        """Cancel an incident (KeyError if unknown): nothing more is done for it."""
        inc = incidents.cancel(self.state.incidents, event)
        await self._save()
        return inc

    async def notify(self, note: notification.Notification) -> tuple[int, dict[str, Any]]:
        """A validated failure notification (`POST /1/notifications`; its `hostname` is the
        node whose certificate sent it, `maintd.server`): (HTTP status, body).

        409 for a notification received before (masakari's duplicate: the sender drops it);
        400 for a failure of an instance whose primary is not the reporting node (nothing is
        recorded); else 202 with the notification, its `notification_uuid` and `status` "new"
        (an instance incident was created) or "ignored", with the `reason`."""
        async with self._notify_lock:  # one at a time, like masakari's per-host lock
            if note.key in self.received or any(
                    instance_incidents.same_notification(i.original, note)
                    for i in self.state.incidents
                    if instance_incidents.is_instance_incident(i)):
                return 409, {"error": "conflict", "message": "duplicate notification"}
            kind = notification.failure_kind(note, self.failure_table)
            record: dict[str, Any] = {**note.to_body()["notification"],
                                      "notification_uuid": str(uuidlib.uuid4()),
                                      "kind": kind, "received": time.time()}
            try:
                verdict = await self._decide(note, kind, record["notification_uuid"])
            except Exception as err:  # the cluster could not be read: the sender retries
                log.warning("notification %s: cannot decide: %s", note.key, err)
                return 503, {"error": "unavailable",
                             "message": f"cannot read the cluster: {err}"}
            if verdict.status == instance_incidents.REFUSED:
                log.warning("notification from %s refused: %s", note.hostname, verdict.reason)
                return 400, {"error": "bad request", "message": verdict.reason}
            recorded_on = verdict.incident or verdict.owner
            record.update(status=verdict.status, reason=verdict.reason,
                          incident=recorded_on.uuid if recorded_on else None)
            self.received[note.key] = record
            while len(self.received) > RECEIVED_KEEP:
                del self.received[next(iter(self.received))]
            if verdict.incident is not None:
                log.info("notification from %s: new instance incident %s: %s", note.hostname,
                         verdict.incident.uuid, verdict.reason)
                self.state.incidents.append(verdict.incident)
                await self._save()
                self.wake()
            elif verdict.owner is not None:
                nodefail.record(verdict.owner, "notifications", {
                    "received": record["received"], "hostname": note.hostname,
                    "instance": note.instance_uuid, "event": note.event,
                    "detail": note.detail, "kind": kind,
                    "generated_time": note.generated_time})
                log.info("notification from %s (%s/%s) recorded on node-failed incident %s: "
                         "%s", note.hostname, note.event, note.detail, verdict.owner.uuid,
                         verdict.reason)
                await self._save()
            else:
                log.info("notification from %s (%s/%s) ignored: %s", note.hostname,
                         note.event, note.detail, verdict.reason)
            return 202, {"notification": dict(record)}

    async def _decide(self, note: notification.Notification, kind: str | None,
                      notification_uuid: str) -> instance_incidents.Verdict:
        if kind is None:  # no need to read the cluster
            return instance_incidents.decide(note, kind, [], [], self.state.incidents)
        nodes = await asyncio.to_thread(self.cluster.nodes)
        instances = await asyncio.to_thread(self.cluster.instances)
        inst = next((i for i in instances if i.uuid and i.uuid == note.instance_uuid), None)
        # a node-failed incident owns its node's instances: no second recovery races it
        owning = nodefail.owner(self.state.incidents, nodes, inst, note.hostname)
        if owning is not None:
            name = inst.name if inst is not None else note.instance_uuid
            step = (owning.original.get("step") if isinstance(owning.original, dict)
                    else None)
            return instance_incidents.Verdict(
                instance_incidents.IGNORED,
                f"{kind} of {name}: node-failed incident {owning.uuid} ({step}) owns it; "
                "recorded there, no recovery of its own", kind, owner=owning)
        jobs: list[instance_incidents.JobInfo] = []
        getter = getattr(self.cluster, "jobs", None)
        if kind == notification.STOP and getter is not None:
            jobs = await asyncio.to_thread(getter)
        diagnoses = {u: o.data for u, o in self.observations.items() if o.data is not None}
        return instance_incidents.decide(note, kind, nodes, instances, self.state.incidents,
                                         jobs, diagnoses,
                                         grace=self.ordered_grace, window=self.failure_window,
                                         notification_uuid=notification_uuid)

    def notifications(self) -> list[dict[str, Any]]:
        """The newest notifications received (oldest first) with their verdicts."""
        return [dict(r) for r in list(self.received.values())[-NOTIFICATIONS_SHOWN:]]

    def status(self) -> list[dict[str, Any]]:
        return [model.to_builtins(i) for i in self.state.incidents]

    def reports(self) -> list[dict[str, Any]]:
        by_uuid = {n.uuid: n for n in self.nodes}
        out = []
        for node_uuid, obs in sorted(self.observations.items()):
            node = by_uuid.get(node_uuid)
            out.append({"node": node_uuid, "name": node.name if node else node_uuid,
                        "data": obs.data, "error": obs.error, "timestamp": obs.timestamp,
                        "drained": bool(node and node.drained),
                        "offline": bool(node and node.offline)})
        return out

    def overview(self) -> dict[str, Any]:
        return {"incidents": self.status(), "jobs": list(self.state.jobs),
                "node_names": {n.uuid: n.name for n in self.nodes},
                "evacuated": list(self.state.evacuated), "reports": self.reports(),
                "notes": list(self.notes), "rounds": self.rounds, "ticks": self.ticks,
                # requests to the cluster's API so far (the Ganeti adapter counts them)
                "cluster_calls": getattr(self.cluster, "calls", None),
                "error": self.last_error,
                "last_tick": self.last_tick,
                "restarts": {k: len(v) for k, v in sorted(self.restarts.items())},
                "balance": dict(self.last_balance), "notifications": self.notifications(),
                "backups": {"schedules": self.settings.get("backupSchedules") or [],
                            "runs": model.to_builtins(self.state.backups)},
                # dead nodes (maintd.nodefail): on, off (and by what), what was said lately
                "node_failures": (self.node_failures.summary() if self.node_failures
                                  is not None else {"state": "off (maintd --no-node-recovery"
                                                    " or no leases to watch)", "notes": []})}


def observations_of(reports: Mapping[str, Any]) -> dict[str, Observation]:
    """Test helper: node UUID -> diagnose object as accepted observations."""
    return {u: Observation(u, d) for u, d in reports.items()}
