"""Scheduled backups run by maintd (issue 30 item 6, compat B66; Proxmox VE's backup jobs are
the model, Ganeti has none): every tick the cluster's schedules (config
`maintenance.backupSchedules`, core.backupsched) are compared with the clock; each instance a
schedule names whose scheduled time has come gets one run: an OP_BACKUP_EXPORT job to the
schedule's node (the instance shut down for it and started again, as `gnt-backup export`),
recorded like an incident (`BackupRun`: its job, outcome, times) in maintd's state, which
lives in the config (a master failover keeps it). A run missed while maintd was paused or
down is run once when it is back (not once per missed time). An instance with a run still
going gets no second one.

Crash safety as the rounds' jobs: the run is saved before its job is submitted and the job
carries the run's UUID in its reason trail, so after a crash the job is found and adopted,
never submitted twice. `plan` is pure; `BackupRunner` does the I/O."""

from __future__ import annotations

import asyncio
import logging
import uuid as uuidlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

import msgspec

from herder.core import backupsched
from herder.core.backupsched import BackupRun, BackupSchedule
from herder.maintd.rounds import Instance, annotate

log = logging.getLogger("herder.maintd.backups")

ACTIVE = ("pending", "running")
ENDED = {"success": "success", "error": "failed", "canceled": "failed"}


class BackupCluster(Protocol):
    def submit(self, ops: list[dict[str, Any]]) -> int: ...

    def job_status(self, job_id: int) -> str | None: ...

    def maintd_jobs(self) -> dict[int, set[str]]: ...


def schedules_of(settings: dict[str, Any]) -> list[BackupSchedule]:
    """The schedules in the maintenance settings; a bad one is skipped with a warning (the
    routes validate them, so only a hand-edited config has one)."""
    found = []
    for raw in settings.get("backupSchedules") or []:
        try:
            found.append(backupsched.parse_schedule(raw))
        except backupsched.BadSchedule as err:
            log.warning("ignoring a backup schedule: %s", err)
    return found


def targets(schedule: BackupSchedule, instances: Iterable[Instance]) -> list[Instance]:
    """The instances a schedule exports: the one it names or those carrying its tag."""
    if schedule.instance:
        return [i for i in instances if i.name == schedule.instance]
    return sorted((i for i in instances if schedule.tag in i.tags), key=lambda i: i.name)


def plan(schedules: Sequence[BackupSchedule], instances: Sequence[Instance],
         runs: Sequence[BackupRun], now: float) -> list[BackupRun]:
    """The runs to start at `now`: per schedule and instance, when the newest time the
    schedule names is after the one its last run was for (or after the schedule was made),
    and no run of that instance is still going."""
    busy = {r.instance for r in runs if r.status in ACTIVE}
    last: dict[tuple[str, str], float] = {}
    for run in runs:
        key = (run.schedule, run.instance)
        last[key] = max(last.get(key, 0.0), run.due)
    new: list[BackupRun] = []
    for schedule in schedules:
        due = backupsched.last_due(schedule.when, now)
        for inst in targets(schedule, instances):
            if inst.name in busy or due <= max(last.get((schedule.name, inst.name), 0.0),
                                                schedule.ctime):
                continue
            busy.add(inst.name)
            new.append(BackupRun(uuid=str(uuidlib.uuid4()), schedule=schedule.name,
                                 instance=inst.name, target_node=schedule.target_node,
                                 keep=schedule.keep, due=due, start=now))
    return new


def exporting(runs: Iterable[BackupRun]) -> set[str]:
    """The instances a run is exporting: shut down for it (the watcher leaves them be; the
    export starts them again)."""
    return {r.instance for r in runs if r.status in ACTIVE}


def export_op(run: BackupRun) -> dict[str, Any]:
    """The run's export job's opcode (its schedule's `keep` exports of the instance kept on
    the target), its reason trail naming the run."""
    return annotate({"OP_ID": "OP_BACKUP_EXPORT", "instance_name": run.instance,
                     "target_node": run.target_node, "mode": "local", "shutdown": True,
                     "keep": run.keep},
                    run.uuid)


def ended(run: BackupRun, job_status: str | None, now: float, error: str = "") -> bool:
    """Record the end of the run's job when it ended (None: the job is gone); whether it
    did."""
    if job_status is None:
        run.status, run.error = "failed", f"job {run.jobs[-1]} is gone from the queue"
    elif job_status in ENDED:
        run.status = "success" if job_status == "success" else "failed"
        run.error = "" if job_status == "success" else (error or f"job {job_status}")
    else:
        if run.status == "pending":
            run.status = "running"
            return True
        return False
    run.end = now
    return True


def job_error(info: dict[str, Any] | None) -> str:
    """The one line a failed job's result says (Ganeti's [class, [message, ...]] shape)."""
    for result in (info or {}).get("opresult") or []:
        if isinstance(result, list) and len(result) == 2 and isinstance(result[1], list):
            return " ".join(str(part) for part in result[1][:1])
    return ""


class BackupRunner:
    """The I/O around `plan`: runs recorded and saved, then submitted; their jobs followed."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock

    async def tick(self, cluster: BackupCluster, runs: list[BackupRun],
                   settings: dict[str, Any], instances: Sequence[Instance], enabled: bool,
                   save: Callable[[], Awaitable[None]]) -> bool:
        """One pass; whether the runs changed (the caller saves them)."""
        changed = await self._follow(cluster, runs)
        if not enabled:
            return changed
        new = plan(schedules_of(settings), instances, runs, self.clock())
        if not new:
            return changed
        runs.extend(new)
        await save()  # recorded before submitted: a crash in between is adopted, not redone
        for run in new:
            await self._submit(cluster, run)
        del runs[:-backupsched.RUNS_KEPT]
        return True

    async def _submit(self, cluster: BackupCluster, run: BackupRun) -> None:
        try:
            run.jobs.append(await asyncio.to_thread(cluster.submit, [export_op(run)]))
            log.info("backup run %s: %s to %s, job %d", run.uuid, run.instance,
                     run.target_node, run.jobs[-1])
        except Exception as err:  # the run fails visibly; the next scheduled time tries again
            run.status, run.end = "failed", self.clock()
            run.error = f"could not submit the export: {err}".splitlines()[0]
            log.warning("backup run %s: %s", run.uuid, run.error)

    async def _follow(self, cluster: BackupCluster, runs: list[BackupRun]) -> bool:
        changed = False
        for run in runs:
            if run.status not in ACTIVE or not run.jobs:
                continue
            status = await asyncio.to_thread(cluster.job_status, run.jobs[-1])
            error = ""
            if status in ("error", "canceled"):
                info = getattr(cluster, "job_info", None)
                error = job_error(await asyncio.to_thread(info, run.jobs[-1])) if info else ""
            if ended(run, status, self.clock(), error):
                changed = True
                if run.status in ("success", "failed"):
                    log.info("backup run %s of %s: %s %s", run.uuid, run.instance,
                             run.status, run.error)
        return changed

    async def adopt(self, cluster: BackupCluster, runs: list[BackupRun]) -> bool:
        """After a crash: a run saved without its job gets the job found in the queue by
        its reason trail, or is submitted now (it never was)."""
        orphans = [r for r in runs if r.status in ACTIVE and not r.jobs]
        if not orphans:
            return False
        queue = await asyncio.to_thread(cluster.maintd_jobs)
        for run in orphans:
            found = sorted(job for job, events in queue.items() if run.uuid in events)
            if found:
                log.warning("adopting job %d of backup run %s (submitted before a crash)",
                            found[-1], run.uuid)
                run.jobs.append(found[-1])
            else:
                await self._submit(cluster, run)
        return True


def runs_of(raw: object) -> list[BackupRun]:
    return msgspec.convert(raw or [], list[BackupRun])
