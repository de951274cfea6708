"""The job queue's RAPI routes: Ganeti's rlib2 (the list, one job, cancel (`DELETE`), and
`GET /2/jobs/ID/wait`, awaited without a worker thread), and herder's for what Ganeti does over
luxi only (docs/compat.md rows 49-52): archive a job, auto-archive, change a job's priority,
the queue's drain flag and state."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from herder.core import access
from herder.core.errors import NotFoundError
from herder.masterd.jobs import opcodes
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.rapi.base import (
    ROUTES,
    RapiHttpError,
    body_dict,
    body_of,
    ctx_of,
    flag,
    ok,
    only,
    takes,
)

WAIT_TIMEOUT = 10.0  # seconds a /wait request blocks before answering null (as Ganeti)


def _job_id(request: web.Request) -> int:
    try:
        return int(request.match_info["job_id"])
    except ValueError:
        raise RapiHttpError(400, f"invalid job id {request.match_info['job_id']!r}") from None


@ROUTES.allow(access.RAPI_READ)
@takes("bulk", "archived")
async def jobs(request: web.Request) -> web.Response:
    """The queue's jobs (Ganeti's list); herder's `archived=1` adds the archive's (read from
    its storage: as Ganeti's `gnt-job list --archived`, slow for a big archive)."""
    queue = ctx_of(request).queue
    archived = flag(request, "archived")
    ids = await asyncio.to_thread(queue.job_ids, archived=archived) if archived \
        else queue.job_ids()
    if flag(request, "bulk"):
        if archived:
            return ok(await asyncio.to_thread(_infos, queue, ids))
        return ok(_infos(queue, ids))
    return ok([{"id": i, "uri": f"/2/jobs/{i}"} for i in ids])


def _infos(queue: JobQueue, ids: Iterable[int]) -> list[dict[str, Any]]:
    """Each job's fields (a job archived or gone meanwhile is left out)."""
    found = []
    for job_id in ids:
        try:
            found.append(queue.info(job_id))
        except NotFoundError:
            continue
    return found


@ROUTES.allow(access.RAPI_READ)
async def job(request: web.Request) -> web.Response:
    try:
        return ok(await asyncio.to_thread(ctx_of(request).queue.info, _job_id(request)))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


@ROUTES.allow(access.RAPI_WRITE)
async def job_cancel(request: web.Request) -> web.Response:
    try:
        return ok(list(await asyncio.to_thread(ctx_of(request).queue.cancel,
                                               _job_id(request))))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def job_wait(request: web.Request) -> web.Response:
    job_id = _job_id(request)
    body = only(body_dict(await body_of(request, default={})),
                ("fields", "previous_job_info", "previous_log_serial"), "job wait")
    fields = body.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise RapiHttpError(400, "wait needs 'fields': a list of job field names")
    prev_info = body.get("previous_job_info")
    prev_serial = body.get("previous_log_serial")
    if prev_serial is not None and not isinstance(prev_serial, int):
        raise RapiHttpError(400, "previous_log_serial must be an integer or null")
    try:  # awaited, not in a thread: waiters hold no worker thread (issue 18)
        result = await ctx_of(request).queue.wait_for_change_async(
            job_id, fields, prev_info, prev_serial, WAIT_TIMEOUT)
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None
    return ok(result)


# --- herder's routes for Ganeti's luxi calls (gnt-job archive, autoarchive, change-priority;
# gnt-cluster queue) ---------------------------------------------------------------------------

@ROUTES.allow(access.RAPI_WRITE)
async def herder_job_archive(request: web.Request) -> web.Response:
    """Archive a finished job (luxi ArchiveJob): [success, message]."""
    try:
        return ok(list(await asyncio.to_thread(ctx_of(request).queue.archive,
                                               _job_id(request))))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def herder_job_priority(request: web.Request) -> web.Response:
    """Change a job's priority (luxi ChangeJobPriority): {"priority": N}; [success,
    message]."""
    body = body_dict(await body_of(request, default={}))
    if set(body) - {"priority"}:
        raise RapiHttpError(400, "change-priority: unknown field(s) "
                                 f"{', '.join(sorted(set(body) - {'priority'}))}")
    priority = body.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise RapiHttpError(400, "change-priority needs 'priority': an integer")
    try:
        return ok(list(await asyncio.to_thread(ctx_of(request).queue.change_priority,
                                               _job_id(request), priority)))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None
    except opcodes.OpcodeError as err:
        raise RapiHttpError(400, str(err)) from None


def _seconds(value: object) -> float | None:
    """A number of seconds from a body (None: not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def herder_jobs_autoarchive(request: web.Request) -> web.Response:
    """Archive the finished jobs older than `age` seconds (-1: all) within `timeout` seconds
    (luxi AutoArchiveJobs): [archived, left unexamined]."""
    body = body_dict(await body_of(request, default={}))
    unknown = sorted(set(body) - {"age", "timeout"})
    if unknown:
        raise RapiHttpError(400, f"autoarchive: unknown field(s) {', '.join(unknown)}")
    age, timeout = _seconds(body.get("age")), _seconds(body.get("timeout"))
    if age is None or (age < 0 and age != -1):
        raise RapiHttpError(400, "autoarchive needs 'age': seconds, or -1 for every job")
    if body.get("timeout") is not None and (timeout is None or timeout <= 0):
        raise RapiHttpError(400, "autoarchive: 'timeout' must be a positive number of seconds")
    archived, left = await asyncio.to_thread(ctx_of(request).queue.auto_archive, age, timeout)
    return ok([archived, left])


@ROUTES.allow(access.RAPI_READ)
async def herder_queue(request: web.Request) -> web.Response:
    """The queue's state (gnt-cluster queue info): drained or not, its jobs per status, the
    queued jobs held back and why."""
    queue = ctx_of(request).queue
    counts: dict[str, int] = {}
    for job_id in queue.job_ids():
        status = queue.status_of(job_id)
        if status is not None:
            counts[status] = counts.get(status, 0) + 1
    return ok({"drained": queue.drained, "jobs": counts,
               "held": {str(k): v for k, v in sorted(queue.held().items())}})


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def herder_queue_set(request: web.Request) -> web.Response:
    """Drain or undrain the queue (gnt-cluster queue drain|undrain): {"drained": bool}."""
    body = body_dict(await body_of(request, default={}))
    unknown = sorted(set(body) - {"drained"})
    if unknown:
        raise RapiHttpError(400, f"queue drain: unknown field(s) {', '.join(unknown)}")
    drained = body.get("drained")
    if not isinstance(drained, bool):
        raise RapiHttpError(400, "give {\"drained\": true|false}")
    queue = ctx_of(request).queue
    await asyncio.to_thread(queue.set_drained, drained)
    return ok({"drained": queue.drained})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/jobs", jobs)
    router.add_get("/2/jobs/{job_id}", job)
    router.add_delete("/2/jobs/{job_id}", job_cancel)
    router.add_get("/2/jobs/{job_id}/wait", job_wait)
    router.add_put("/2/herder/jobs/autoarchive", herder_jobs_autoarchive)
    router.add_put("/2/herder/jobs/{job_id}/archive", herder_job_archive)
    router.add_put("/2/herder/jobs/{job_id}/priority", herder_job_priority)
    router.add_get("/2/herder/queue", herder_queue)
    router.add_put("/2/herder/queue", herder_queue_set)
