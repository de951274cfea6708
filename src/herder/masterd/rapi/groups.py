"""The node groups' RAPI routes (Ganeti's rlib2): list, add, one group, modify, rename,
delete."""

from __future__ import annotations

from aiohttp import web

from herder.core import access, model
from herder.masterd import views
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    ROUTES,
    RapiHttpError,
    body_dict,
    body_fields,
    body_of,
    config_of,
    find,
    flag,
    listing,
    ok,
    only,
    renamed,
    submit,
    submits,
    takes,
)


def _group(request: web.Request) -> model.NodeGroup:
    """The node group the URL names (404 unless exactly one)."""
    config = config_of(request)
    return find(config.find_group, request.match_info["name"])


@ROUTES.allow(access.RAPI_READ)
@takes("bulk")
async def groups(request: web.Request) -> web.Response:
    config = config_of(request)
    ordered = sorted(config.nodegroups.values(), key=lambda g: g.name)
    if flag(request, "bulk"):
        return ok([views.group_view(config, g) for g in ordered])
    return ok(listing([g.name for g in ordered], "/2/groups", key="name"))


@ROUTES.allow(access.RAPI_READ)
async def group(request: web.Request) -> web.Response:
    config = config_of(request)
    return ok(views.group_view(config, find(config.find_group, request.match_info["name"])))


GROUP_FIELDS = body_fields(opcodes.OpGroupAdd, extra=("name",))  # Ganeti's alias of group_name


@submits(opcodes.OpGroupAdd)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def group_add(request: web.Request) -> web.Response:
    body = renamed(only(body_dict(await body_of(request, default={})), GROUP_FIELDS,
                        "group add"), {"name": "group_name"}, "group add")
    if not body.get("group_name"):
        raise RapiHttpError(400, "group add needs group_name")
    return await submit(request, "groups", [{"OP_ID": "OP_GROUP_ADD", **body}])


# Ganeti's PUT_RENAME of group modify (rlib2.R_2_groups_name_modify)
GROUP_MODIFY_RENAME = {"custom_ndparams": "ndparams", "custom_ipolicy": "ipolicy",
                       "custom_diskparams": "diskparams"}
GROUP_MODIFY_FIELDS = body_fields(opcodes.OpGroupSetParams, fixed=("group_name",),
                                  extra=GROUP_MODIFY_RENAME)


@submits(opcodes.OpGroupSetParams)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def group_modify(request: web.Request) -> web.Response:
    target = _group(request)
    body = renamed(only(body_dict(await body_of(request, default={})), GROUP_MODIFY_FIELDS,
                        "group modify"), GROUP_MODIFY_RENAME, "group modify")
    return await submit(request, "groups_name_modify", [
        {"OP_ID": "OP_GROUP_SET_PARAMS", "group_name": target.name, **body}])


@submits(opcodes.OpGroupRename)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def group_rename(request: web.Request) -> web.Response:
    target = _group(request)
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpGroupRename, fixed=("group_name",)), "group rename")
    new_name = body.get("new_name")
    if not isinstance(new_name, str) or not new_name:
        raise RapiHttpError(400, "group rename needs new_name")
    return await submit(request, "groups_name_rename", [
        {"OP_ID": "OP_GROUP_RENAME", "group_name": target.name, **body}])


@submits(opcodes.OpGroupAssignNodes)
@ROUTES.allow(access.RAPI_WRITE)
@takes("force", body=True)
async def group_assign_nodes(request: web.Request) -> web.Response:
    """Ganeti's AssignGroupNodes: body `nodes`, `?force=1`."""
    target = _group(request)
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpGroupAssignNodes, fixed=("group_name", "force")),
                "group assign-nodes")
    if not isinstance(body.get("nodes"), list):
        raise RapiHttpError(400, "group assign-nodes needs nodes (a list of node names)")
    return await submit(request, "groups_name_assign_nodes", [
        {"OP_ID": "OP_GROUP_ASSIGN_NODES", "group_name": target.name,
         "force": flag(request, "force"), **body}])


@submits(opcodes.OpGroupRemove)
@ROUTES.allow(access.RAPI_WRITE)
async def group_delete(request: web.Request) -> web.Response:
    target = _group(request)
    return await submit(request, "groups_name", [{"OP_ID": "OP_GROUP_REMOVE",
                                                  "group_name": target.name}])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/groups", groups)
    router.add_post("/2/groups", group_add)
    router.add_get("/2/groups/{name}", group)
    router.add_delete("/2/groups/{name}", group_delete)
    router.add_put("/2/groups/{name}/modify", group_modify)
    router.add_put("/2/groups/{name}/rename", group_rename)
    router.add_put("/2/groups/{name}/assign-nodes", group_assign_nodes)
