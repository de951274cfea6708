"""Ganeti's query resource (`masterd.query` computes the answers): `GET
/2/query/{node,instance,group}?fields=a,b`, `PUT` with `{"fields": [...]}` (no filters:
compat row 47), and `GET /2/query/{resource}/fields[?fields=...]` (the field definitions).

Ganeti lets readers query with GET and PUT; herder's rule for every method but GET is
rapi-write (docs/security.md), so readers query with GET.
"""

from __future__ import annotations

from aiohttp import web

from herder.core import access
from herder.masterd import query as queries
from herder.masterd.livecache import EMPTY
from herder.masterd.rapi.base import (
    JSON,
    ROUTES,
    RapiHttpError,
    body_dict,
    body_of,
    config_of,
    live_of,
    ok,
    only,
    takes,
)


def resource_of(request: web.Request) -> str:
    name = request.match_info["resource"]
    if name not in queries.RESOURCES:
        raise RapiHttpError(
            404, f"herder's query resource answers {' and '.join(sorted(queries.RESOURCES))}, "
                 f"not {name!r}")
    return name


async def respond(request: web.Request, resource: str, fields: list[str]) -> web.Response:
    config = config_of(request)
    # the nodes are asked for their figures only when a field needs them (a group list, or a
    # node list of names and roles, waits for no node)
    live = await live_of(request, config) if queries.needs_live(resource, fields) else EMPTY
    return web.Response(body=queries.encode_answer(config, resource, fields, live),
                        content_type=JSON)


@ROUTES.allow(access.RAPI_READ)
@takes("fields")
async def query_get(request: web.Request) -> web.Response:
    resource = resource_of(request)
    if "fields" not in request.query:
        raise RapiHttpError(400, "Missing 'fields' query argument")
    return await respond(request, resource, queries.split_fields(request.query["fields"]))


@ROUTES.allow(access.RAPI_WRITE)
@takes("fields", body=True)
async def query_put(request: web.Request) -> web.Response:
    resource = resource_of(request)
    body = only(body_dict(await body_of(request, default={})), ("fields", "qfilter", "filter"),
                "query")
    if body.get("qfilter") is not None or body.get("filter") is not None:
        raise RapiHttpError(400, "herder's query resource takes no filter; ask for the fields "
                                 "and filter the rows")
    fields = body.get("fields")
    if fields is None:
        if "fields" not in request.query:
            raise RapiHttpError(400, "Missing 'fields' query argument")
        fields = queries.split_fields(request.query["fields"])
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise RapiHttpError(400, "'fields' must be a list of field names")
    return await respond(request, resource, fields)


@ROUTES.allow(access.RAPI_READ)
@takes("fields")
async def query_fields(request: web.Request) -> web.Response:
    resource = resource_of(request)
    table = queries.RESOURCES[resource].fields
    names = queries.split_fields(request.query["fields"]) if "fields" in request.query \
        else sorted(table)
    return ok({"fields": [queries.definition(f, table) for f in names]})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/query/{resource}", query_get)
    router.add_put("/2/query/{resource}", query_put)
    router.add_get("/2/query/{resource}/fields", query_fields)
