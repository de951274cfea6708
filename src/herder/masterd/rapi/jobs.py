"""The job queue's RAPI routes (Ganeti's rlib2): the list, one job, cancel (`DELETE`), and
`GET /2/jobs/ID/wait` (wait for a change, awaited without a worker thread)."""

from __future__ import annotations

from aiohttp import web

from herder.core import access
from herder.core.errors import NotFoundError
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
@takes("bulk")
async def jobs(request: web.Request) -> web.Response:
    queue = ctx_of(request).queue
    ids = queue.job_ids()
    if flag(request, "bulk"):
        return ok([queue.info(i) for i in ids])
    return ok([{"id": i, "uri": f"/2/jobs/{i}"} for i in ids])


@ROUTES.allow(access.RAPI_READ)
async def job(request: web.Request) -> web.Response:
    try:
        return ok(ctx_of(request).queue.info(_job_id(request)))
    except NotFoundError as err:
        raise RapiHttpError(404, str(err)) from None


@ROUTES.allow(access.RAPI_WRITE)
async def job_cancel(request: web.Request) -> web.Response:
    try:
        return ok(list(ctx_of(request).queue.cancel(_job_id(request))))
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


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/jobs", jobs)
    router.add_get("/2/jobs/{job_id}", job)
    router.add_delete("/2/jobs/{job_id}", job_cancel)
    router.add_get("/2/jobs/{job_id}/wait", job_wait)
