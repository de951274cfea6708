"""Tags of the cluster, nodes, instances and node groups (Ganeti's rlib2): `GET|PUT|DELETE
/2/tags` and `/2/{nodes,instances,groups}/NAME/tags`, the tags given as `?tag=...`."""

from __future__ import annotations

from aiohttp import web

from herder.core import access
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    ROUTES,
    RapiHttpError,
    body_of,
    config_of,
    find,
    ok,
    submit,
    submits,
    takes,
)


def tag_target(request: web.Request) -> tuple[str, str | None, list[str]]:
    kind = request.match_info.get("kind", "cluster")
    config = config_of(request)
    if kind == "cluster":
        return "cluster", None, list(config.cluster.tags)
    name = request.match_info["name"]
    finder = {"nodes": config.find_node, "instances": config.find_instance,
              "groups": config.find_group, "networks": config.find_network}[kind]
    obj = find(finder, name)
    return {"nodes": "node", "instances": "instance", "groups": "nodegroup",
            "networks": "network"}[kind], obj.name, list(obj.tags)


@ROUTES.allow(access.RAPI_READ)
async def tags_get(request: web.Request) -> web.Response:
    return ok(tag_target(request)[2])


@submits(opcodes.OpTagsSet, opcodes.OpTagsDel)
@ROUTES.allow(access.RAPI_WRITE)
@takes("tag", body=True)
async def tags_change(request: web.Request) -> web.Response:
    """The tags as `?tag=...&tag=...`; a body, as Ganeti's AddNodeTags sends, must be the
    same list (or give the tags alone)."""
    kind, name, _ = tag_target(request)
    tags = request.query.getall("tag", [])
    body = await body_of(request)
    if body is not None:
        if not isinstance(body, list) or not all(isinstance(t, str) for t in body):
            raise RapiHttpError(400, "the body must be the list of tags")
        if tags and body != tags:
            raise RapiHttpError(400, "the tags of the body differ from those of the query "
                                     "string")
        tags = list(body)
    if not tags:
        raise RapiHttpError(400, "give the tags as ?tag=...&tag=...")
    op_id = "OP_TAGS_SET" if request.method == "PUT" else "OP_TAGS_DEL"
    resource = "tags" if kind == "cluster" else f"{request.match_info['kind']}_name_tags"
    return await submit(request, resource, [{"OP_ID": op_id, "kind": kind, "name": name,
                                             "tags": tags}])


def add_routes(router: web.UrlDispatcher) -> None:
    paths = ["/2/tags"] + [f"/2/{{kind:{kind}}}/{{name}}/tags"
                           for kind in ("nodes", "instances", "groups", "networks")]
    for path in paths:
        router.add_get(path, tags_get)
        router.add_put(path, tags_change)
        router.add_delete(path, tags_change)
