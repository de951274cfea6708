"""Ganeti's query resource (`masterd.query` computes the answers): `GET
/2/query/{node,instance,group,export}?fields=a,b` (exports: each node asked for its list),
`PUT` with `{"fields": [...]}` (no filters: compat row 47), and `GET
/2/query/{resource}/fields[?fields=...]` (the field definitions).

Ganeti lets readers query with GET and PUT; herder's rule for every method but GET is
rapi-write (docs/security.md), so readers query with GET.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from herder.core import access, model
from herder.core.errors import HerderError
from herder.masterd import query as queries
from herder.masterd.livecache import EMPTY
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

EXPORT = "export"  # Ganeti's QR_EXPORT: answered from the nodes (export_list), not the config
EXPORT_LIST_TIMEOUT = 30.0


def resource_of(request: web.Request) -> str:
    name = request.match_info["resource"]
    if name not in queries.RESOURCES and name != EXPORT:
        known = sorted([*queries.RESOURCES, EXPORT])
        raise RapiHttpError(
            404, f"herder's query resource answers {', '.join(known)}, not {name!r}")
    return name


async def _exports(request: web.Request) -> dict[str, list[str] | None]:
    """Each online node's exports (None: it could not be asked)."""
    config, rpc = config_of(request), ctx_of(request).rpc
    nodes = sorted((n for n in config.nodes.values() if not n.offline), key=lambda n: n.name)

    async def ask(node: model.Node) -> list[str] | None:
        if rpc is None:
            return None
        try:
            found = await asyncio.to_thread(rpc.call, node, "export_list", {},
                                            timeout=EXPORT_LIST_TIMEOUT)
        except HerderError:
            return None
        return [str(name) for name in found] if isinstance(found, list) else None

    answers = await asyncio.gather(*(ask(node) for node in nodes))
    return {node.name: found for node, found in zip(nodes, answers, strict=True)}


async def respond(request: web.Request, resource: str, fields: list[str]) -> web.Response:
    if resource == EXPORT:
        return ok(queries.export_answer(await _exports(request), fields))
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
    table = queries.EXPORT_FIELDS if resource == EXPORT else queries.RESOURCES[resource].fields
    names = queries.split_fields(request.query["fields"]) if "fields" in request.query \
        else sorted(table)
    return ok({"fields": [queries.definition(f, table) for f in names]})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/query/{resource}", query_get)
    router.add_put("/2/query/{resource}", query_put)
    router.add_get("/2/query/{resource}/fields", query_fields)
