"""The web console's JSON twins in RAPI (docs/compat.md W1-W5), read routes for any RAPI user:

- `GET /2/herder/overview`: the overview page (`overview.build`);
- `GET /2/herder/nodes/NAME/samples?since=T`: the node's samples of the last hour and its
  storage units now (`samples`);
- `GET /2/herder/instances/NAME/jobs`: the jobs whose opcodes name the instance (its history);
- `GET /2/herder/maintd`: maintd's overview (incidents, rounds, notifications, reports), asked
  from maintd's read API;
- `GET /2/herder/events[?job=ID]`: server-sent events: `overview` (the overview, whenever it
  changes), or with `job` the job's changes and log messages as they come (`job`), until it
  ends; a stream whose session or user goes ends with `ended` and the reason (`web.streams`).

Pages use these and Ganeti's own routes (`/2/nodes/NAME`, `/2/instances/NAME`, `/2/jobs`...);
every action of the console is an ordinary RAPI write route.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import web

from herder.core import access, model, ports
from herder.core.errors import NotFoundError
from herder.masterd.rapi.base import (
    ROUTES,
    RapiHttpError,
    config_of,
    ctx_of,
    find,
    live_of,
    ok,
    takes,
)
from herder.masterd.web import overview, streams
from herder.masterd.web.context import WebContext

MAINTD_TIMEOUT = 2.0  # seconds to wait for maintd's overview
MAINTD_TTL = 1.0  # seconds an answer of maintd is reused
OVERVIEW_EVERY = 1.0  # seconds between two looks for a changed overview
PING_EVERY = 15.0  # seconds between keep-alive comments on an idle event stream
JOBS_LOOKED_AT = 300  # newest jobs the overview and an instance's history look at
JOB_FIELDS = ["id", "status", "summary", "received_ts", "start_ts", "end_ts", "opresult",
              "oplog", "opstatus"]


def web_of(request: web.Request) -> WebContext:
    ctx = ctx_of(request).web
    if ctx is None:
        raise RapiHttpError(404, "this server has no web console")
    return ctx


async def maintd_overview(request: web.Request, config: model.ConfigData
                          ) -> tuple[dict[str, Any] | None, str | None]:
    """maintd's overview (None and why when it cannot be had); reused for MAINTD_TTL."""
    ctx = web_of(request)
    now = time.monotonic()
    if ctx.maintd_last is not None and now - ctx.maintd_last[0] < MAINTD_TTL:
        return ctx.maintd_last[1], ctx.maintd_last[2]
    url = ctx.maintd_url or f"http://{config.cluster.master_ip}:{ports.MAINTD}"
    answer: dict[str, Any] | None = None
    error: str | None = None
    try:
        async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=MAINTD_TIMEOUT)) as session, \
                session.get(f"{url}/1/overview") as response:
            if response.status != 200:
                error = f"maintd at {url} answered {response.status}"
            else:
                answer = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        error = f"maintd at {url} cannot be asked: {err or type(err).__name__}"
    ctx.maintd_last = (now, answer, error)
    return answer, error


def recent_jobs(request: web.Request, fields: list[str]) -> list[dict[str, Any]]:
    queue = ctx_of(request).queue
    found = []
    for job_id in queue.job_ids()[-JOBS_LOOKED_AT:]:
        try:
            found.append(queue.info(job_id, fields))
        except NotFoundError:  # archived meanwhile
            continue
    return found


async def overview_of(request: web.Request) -> overview.Overview:
    """The overview; one built within OVERVIEW_EVERY / 2 seconds is shared (every open page's
    events stream asks each second)."""
    ctx = web_of(request)
    now = time.monotonic()
    if ctx.overview_last is not None and now - ctx.overview_last[0] < OVERVIEW_EVERY / 2:
        return ctx.overview_last[1]
    config = config_of(request)
    live = await live_of(request, config)
    maintd, error = await maintd_overview(request, config)
    jobs = recent_jobs(request, ["id", "status", "summary", "received_ts"])
    latest = {uuid: ctx.samples.latest(uuid) for uuid in config.nodes}
    daemons = {uuid: sample["daemons_bad"] for uuid, sample in latest.items()
               if sample is not None and "daemons_bad" in sample}
    built = overview.build(config, live, jobs, maintd, error, daemons)
    ctx.overview_last = (now, built)
    return built


@ROUTES.allow(access.RAPI_READ)
async def overview_route(request: web.Request) -> web.Response:
    return ok(await overview_of(request))


@ROUTES.allow(access.RAPI_READ)
@takes("since")
async def node_samples(request: web.Request) -> web.Response:
    config = config_of(request)
    node = find(config.find_node, request.match_info["name"])
    try:
        since = float(request.query.get("since", "0"))
    except ValueError:
        raise RapiHttpError(400, "since must be a time (seconds since the epoch)") from None
    live = await live_of(request, config)
    info = live.info(node.uuid)
    samples = web_of(request).samples
    return ok({"node": node.name, "interval": samples.interval, "keep": samples.keep,
               "samples": samples.of(node.uuid, since),
               "storage": [] if info is None else [model.to_builtins(u) for u in info.storage],
               "error": live.error(node.uuid)})


def names_instance(job: Mapping[str, object], name: str) -> bool:
    """Whether an opcode of the job (its `ops`) names the instance."""
    ops = job.get("ops")
    return isinstance(ops, list) and any(
        isinstance(op, dict) and name in (op.get("instance_name"), op.get("instance_uuid"))
        for op in ops)


@ROUTES.allow(access.RAPI_READ)
async def instance_jobs(request: web.Request) -> web.Response:
    config = config_of(request)
    inst = find(config.find_instance, request.match_info["name"])
    jobs = recent_jobs(request, ["id", "status", "summary", "ops", "received_ts", "end_ts"])
    return ok([{k: v for k, v in job.items() if k != "ops"} for job in jobs
               if names_instance(job, inst.name) or names_instance(job, inst.uuid)])


@ROUTES.allow(access.RAPI_READ)
async def maintd_route(request: web.Request) -> web.Response:
    answer, error = await maintd_overview(request, config_of(request))
    if answer is None:
        raise RapiHttpError(503, error or "maintd gave no answer")
    return ok(answer)


def sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _ended(reason: str) -> bytes:
    return sse("ended", {"reason": f"the stream ended: {reason}"})


async def _stream_overview(request: web.Request, response: web.StreamResponse) -> None:
    last: str | None = None
    quiet_since = time.monotonic()
    while True:
        lost = streams.authority_lost(request, access.RAPI_READ)
        if lost is not None:
            await response.write(_ended(lost))
            return
        data = await overview_of(request)
        text = json.dumps(data, sort_keys=True)
        if text != last:
            await response.write(sse("overview", data))
            last, quiet_since = text, time.monotonic()
        elif time.monotonic() - quiet_since > PING_EVERY:
            await response.write(b": ping\n\n")
            quiet_since = time.monotonic()
        await asyncio.sleep(OVERVIEW_EVERY)


async def _stream_job(request: web.Request, response: web.StreamResponse, job_id: int) -> None:
    queue = ctx_of(request).queue
    await response.write(sse("job", {"job_info": queue.info(job_id, JOB_FIELDS),
                                     "log_entries": []}))
    prev_info: Any = None
    serial: int | None = None
    quiet_since = time.monotonic()
    while True:
        change = await queue.wait_for_change_async(job_id, JOB_FIELDS, prev_info, serial,
                                                   streams.AUTHORITY_EVERY)
        lost = streams.authority_lost(request, access.RAPI_READ)
        if lost is not None:
            await response.write(_ended(lost))
            return
        if change is None:
            if time.monotonic() - quiet_since > PING_EVERY:
                await response.write(b": ping\n\n")
                quiet_since = time.monotonic()
            continue
        quiet_since = time.monotonic()
        prev_info = change["job_info"]
        entries = change["log_entries"]
        if entries:
            serial = max(e[0] for e in entries)
        info = dict(zip(JOB_FIELDS, prev_info, strict=True))
        await response.write(sse("job", {"job_info": info, "log_entries": entries}))
        if info["status"] in overview.FINISHED_JOB:
            await response.write(sse("end", {"id": job_id}))
            return


@ROUTES.allow(access.RAPI_READ)
@takes("job")
async def events(request: web.Request) -> web.StreamResponse:
    web_of(request)  # 404 at once on a server without the console
    job_id: int | None = None
    if "job" in request.query:
        try:
            job_id = int(request.query["job"])
            ctx_of(request).queue.get(job_id)
        except ValueError:
            raise RapiHttpError(400, f"invalid job id {request.query['job']!r}") from None
        except NotFoundError as err:
            raise RapiHttpError(404, str(err)) from None
    else:
        config_of(request)  # 503 at once when there is no config
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    try:
        if job_id is None:
            await _stream_overview(request, response)
        else:
            await _stream_job(request, response, job_id)
    except ConnectionResetError:
        pass  # the browser went away
    return response


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/herder/overview", overview_route)
    router.add_get("/2/herder/nodes/{name}/samples", node_samples)
    router.add_get("/2/herder/instances/{name}/jobs", instance_jobs)
    router.add_get("/2/herder/maintd", maintd_route)
    router.add_get("/2/herder/events", events)
