"""Ganeti's query resource (`masterd.query` computes the answers) for Ganeti's resources (node,
instance, group, job, export, network, filter, lock): `GET /2/query/RESOURCE?fields=a,b`, `PUT
/2/query/RESOURCE` with `{"fields": [...], "qfilter": FILTER}` (Ganeti's older `filter` too),
and `GET /2/query/RESOURCE/fields[?fields=a,b]` (the field definitions).

As in Ganeti's rlib2, the query routes need a RAPI user (a read-only user will do) even when
the RAPI allows anonymous reads, for both methods; the field definitions are for anyone who
may read. A filter Ganeti would refuse is a 400 naming the problem, before anything is
computed; so is a parameter the route does not take.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiohttp import web

from herder.core import access, model
from herder.core.errors import HerderError
from herder.core.rpcdefs import backup_calls
from herder.masterd import query as queries
from herder.masterd.livecache import EMPTY
from herder.masterd.queries.fields import Objects
from herder.masterd.queries.qfilter import FilterError
from herder.masterd.queries.registry import RESOURCES
from herder.masterd.rapi.base import (
    JSON,
    ROUTES,
    RapiHttpError,
    body_dict,
    body_of,
    config_of,
    ctx_of,
    live_of,
    ok,
    only,
    takes,
)


def resource_of(request: web.Request) -> str:
    name = request.match_info["resource"]
    if name not in RESOURCES:
        raise RapiHttpError(
            404, f"no query resource {name!r} (Ganeti's: {', '.join(sorted(RESOURCES))})")
    return name


async def _exports(request: web.Request) -> dict[str, list[str] | None]:
    """Each online node's exports (None: it could not be asked), asked at once."""
    config, rpc = config_of(request), ctx_of(request).rpc
    nodes = sorted((n for n in config.nodes.values() if not n.offline), key=lambda n: n.name)

    async def ask(node: model.Node) -> list[str] | None:
        if rpc is None:
            return None
        try:
            return await asyncio.to_thread(rpc.call, node, backup_calls.ExportList())
        except HerderError:
            return None

    answers = await asyncio.gather(*(ask(node) for node in nodes))
    return {node.name: found for node, found in zip(nodes, answers, strict=True)}


def split_fields(text: str) -> list[str]:
    return [f.strip() for f in text.split(",") if f.strip()]


def _fields_of(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise RapiHttpError(400, "'fields' must be a list of field names")
    return value


async def respond(request: web.Request, resource: str, fields: Sequence[str],
                  given_filter: object) -> web.Response:
    try:
        compiled = queries.compile_filter(resource, given_filter)
    except FilterError as err:
        raise RapiHttpError(400, str(err)) from None
    config = config_of(request)
    ctx = ctx_of(request)
    # the nodes are asked for their figures only when a field (shown or filtered on) needs
    # them: a group list, or a node list of names and roles, waits for no node
    live = (await live_of(request, config) if queries.needs_live(resource, fields, compiled)
            else EMPTY)
    exports = await _exports(request) if resource == "export" else None
    source = Objects(config, jobs=ctx.queue, locks=ctx.locks, exports=exports)
    try:
        body = queries.encode_answer(source, resource, fields, live, compiled)
    except FilterError as err:  # a value of a field the filter cannot compare (kind `other`)
        raise RapiHttpError(400, str(err)) from None
    return web.Response(body=body, content_type=JSON)


@ROUTES.allow(access.RAPI_USER)
@takes("fields")
async def query_get(request: web.Request) -> web.Response:
    resource = resource_of(request)
    if "fields" not in request.query:
        raise RapiHttpError(400, "Missing 'fields' query argument")
    return await respond(request, resource, split_fields(request.query["fields"]), None)


@ROUTES.allow(access.RAPI_USER)
@takes("fields", body=True)
async def query_put(request: web.Request) -> web.Response:
    resource = resource_of(request)
    body = only(body_dict(await body_of(request, default={})), ("fields", "qfilter", "filter"),
                "query")
    if "fields" in body:
        fields = _fields_of(body["fields"])
    elif "fields" in request.query:
        fields = split_fields(request.query["fields"])
    else:
        raise RapiHttpError(400, "Missing 'fields' query argument")
    given = body.get("qfilter")
    if given is None:  # Ganeti's name before 2.7, still taken by its rlib2
        given = body.get("filter")
    elif body.get("filter") is not None:
        raise RapiHttpError(400, "give the filter once: qfilter (or the older filter)")
    return await respond(request, resource, fields, given)


@ROUTES.allow(access.RAPI_READ)
@takes("fields")
async def query_fields(request: web.Request) -> web.Response:
    resource = resource_of(request)
    names = split_fields(request.query["fields"]) if "fields" in request.query else None
    return ok(queries.field_definitions(resource, names))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/query/{resource}", query_get)
    router.add_put("/2/query/{resource}", query_put)
    router.add_get("/2/query/{resource}/fields", query_fields)
