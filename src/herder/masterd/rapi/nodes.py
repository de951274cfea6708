"""The nodes' RAPI routes (Ganeti's rlib2): the list and one node, its role, modify,
evacuate, migrate, powercycle, and its storage units (query, modify, repair: jobs)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiohttp import web

from herder.core import access, model, roles, storage_units
from herder.masterd import views
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    NODE_TARGET,
    ROUTES,
    RapiHttpError,
    body_dict,
    body_fields,
    body_of,
    config_of,
    find,
    flag,
    listing,
    live_of,
    ok,
    only,
    submit,
    submits,
    takes,
)


def _node(request: web.Request) -> model.Node:
    """The node the URL names (404 unless exactly one)."""
    config = config_of(request)
    return find(config.find_node, request.match_info["name"])


@ROUTES.allow(access.RAPI_READ)
@takes("bulk")
async def nodes(request: web.Request) -> web.Response:
    config = config_of(request)
    ordered = sorted(config.nodes.values(), key=lambda n: n.name)
    if flag(request, "bulk"):
        live = await live_of(request, config)
        return ok([views.node_view(config, n, live) for n in ordered])
    return ok(listing([n.name for n in ordered], "/2/nodes"))


@ROUTES.allow(access.RAPI_READ)
async def node(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    return ok(views.node_view(config, target, await live_of(request, config)))


@ROUTES.allow(access.RAPI_READ)
async def node_role_get(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    return ok(roles.NAMES[roles.node_role(target, config.cluster.master_node)])


ROLE_FIELDS = {
    "master-candidate": {"master_candidate": True, "offline": False, "drained": False},
    "regular": {"master_candidate": False, "offline": False, "drained": False},
    "drained": {"drained": True},
    "offline": {"offline": True},
}


@submits(opcodes.OpNodeSetParams)
@ROUTES.allow(access.RAPI_WRITE)
@takes("force", "auto-promote", body=True)
async def node_role_set(request: web.Request) -> web.Response:
    target = _node(request)
    role = await body_of(request)
    if not isinstance(role, str):
        raise RapiHttpError(400, "the body must be a node role (a JSON string)")
    if role == "master":
        raise RapiHttpError(400, "the master role can be changed only via master-failover")
    if role not in ROLE_FIELDS:
        raise RapiHttpError(400, f"unknown node role {role!r} "
                                 f"(one of {', '.join(ROLE_FIELDS)})")
    op = {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": target.name, "node_uuid": target.uuid,
          "force": flag(request, "force"), "auto_promote": flag(request, "auto-promote"),
          **ROLE_FIELDS[role]}
    return await submit(request, "nodes_name_role", [op])


NODE_MODIFY_FIELDS = body_fields(opcodes.OpNodeSetParams, fixed=NODE_TARGET)


async def _node_job(request: web.Request, op: type[opcodes.OpCode], resource: str, what: str,
                    fields: Iterable[str], extra: Mapping[str, object]) -> web.Response:
    """A job of `op` for the node of the URL: the opcode's `fields` from the body, then
    `extra` (from the query string)."""
    target = _node(request)
    body = only(body_dict(await body_of(request, default={})), fields, what)
    both = sorted(set(body) & set(extra))
    if both:
        raise RapiHttpError(400, f"{what}: {', '.join(both)} given both in the query string "
                                 "and in the body")
    return await submit(request, resource, [
        {"OP_ID": opcodes.op_id_of(op), "node_name": target.name, "node_uuid": target.uuid,
         **body, **extra}])


@submits(opcodes.OpNodeSetParams)
@ROUTES.allow(access.RAPI_WRITE)
@takes("force", body=True)
async def node_modify(request: web.Request) -> web.Response:
    return await _node_job(request, opcodes.OpNodeSetParams, "nodes_name_modify", "node modify",
                           NODE_MODIFY_FIELDS, {"force": True} if flag(request, "force") else {})


@submits(opcodes.OpNodeEvacuate)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def node_evacuate(request: web.Request) -> web.Response:
    return await _node_job(request, opcodes.OpNodeEvacuate, "nodes_name_evacuate",
                           "node evacuate",
                           body_fields(opcodes.OpNodeEvacuate, fixed=NODE_TARGET), {})


@submits(opcodes.OpNodeMigrate)
@ROUTES.allow(access.RAPI_WRITE)
@takes("mode", "live", body=True)
async def node_migrate(request: web.Request) -> web.Response:
    """node-migrate-reqv1's body, or the old style's `?mode=` or `?live=0|1` (one of them)."""
    if "mode" in request.query and "live" in request.query:
        raise RapiHttpError(400, "Only one of 'live' and 'mode' should be passed")
    mode: dict[str, object] = {}
    if "mode" in request.query:
        mode["mode"] = request.query["mode"]
    elif "live" in request.query:
        mode["mode"] = "live" if flag(request, "live") else "non-live"
    body = body_dict(await body_of(request, default={}))
    if mode and "mode" in body:
        raise RapiHttpError(400, "node migrate: mode given both in the query string and in "
                                 "the body")
    return await _node_job(request, opcodes.OpNodeMigrate, "nodes_name_migrate", "node migrate",
                           body_fields(opcodes.OpNodeMigrate, fixed=NODE_TARGET), mode)


@submits(opcodes.OpNodePowercycle)
@ROUTES.allow(access.RAPI_WRITE)
@takes("force")
async def node_powercycle(request: web.Request) -> web.Response:
    target = _node(request)
    return await submit(request, "nodes_name_powercycle", [
        {"OP_ID": "OP_NODE_POWERCYCLE", "node_name": target.name, "node_uuid": target.uuid,
         "force": flag(request, "force")}])


@submits(opcodes.OpNodeQueryStorage)
@ROUTES.allow(access.RAPI_WRITE)
@takes("storage_type", "output_fields", "name")
async def node_storage(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_node, request.match_info["name"])
    kind = request.query.get("storage_type", "lvm-vg")
    fields = [f for f in request.query.get("output_fields", "name,size,used,free,"
                                           "allocatable").split(",") if f]
    name = request.query.get("name")
    problem = storage_units.query_problem(config, kind, name) if name is not None else None
    if problem:  # only the node's configured storage units (issue 18)
        raise RapiHttpError(400, f"cannot query storage unit: {problem}")
    return await submit(request, "nodes_name_storage", [
        {"OP_ID": "OP_NODE_QUERY_STORAGE", "nodes": [target.name], "storage_type": kind,
         "output_fields": fields, "name": name}])


@submits(opcodes.OpNodeModifyStorage)
@ROUTES.allow(access.RAPI_WRITE)
@takes("storage_type", "name", "allocatable")
async def node_storage_modify(request: web.Request) -> web.Response:
    """Ganeti's ModifyNodeStorageUnits: `allocatable` may be left out (nothing changes)."""
    target = _node(request)
    if not request.query.get("name"):
        raise RapiHttpError(400, "Missing the required 'name' parameter")
    changes = {"allocatable": flag(request, "allocatable")} \
        if "allocatable" in request.query else {}
    return await submit(request, "nodes_name_storage_modify", [
        {"OP_ID": "OP_NODE_MODIFY_STORAGE", "node_name": target.name,
         "storage_type": request.query.get("storage_type", "lvm-pv"),
         "name": request.query["name"], "changes": changes}])


@submits(opcodes.OpRepairNodeStorage)
@ROUTES.allow(access.RAPI_WRITE)
@takes("storage_type", "name", "ignore_consistency")
async def node_storage_repair(request: web.Request) -> web.Response:
    target = _node(request)
    if "name" not in request.query:
        raise RapiHttpError(400, "give ?storage_type=lvm-vg&name=VG")
    return await submit(request, "nodes_name_storage_repair", [
        {"OP_ID": "OP_REPAIR_NODE_STORAGE", "node_name": target.name,
         "storage_type": request.query.get("storage_type", "lvm-vg"),
         "name": request.query["name"],
         "ignore_consistency": flag(request, "ignore_consistency")}])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/nodes", nodes)
    router.add_get("/2/nodes/{name}", node)
    router.add_get("/2/nodes/{name}/role", node_role_get)
    router.add_put("/2/nodes/{name}/role", node_role_set)
    router.add_post("/2/nodes/{name}/modify", node_modify)
    router.add_post("/2/nodes/{name}/evacuate", node_evacuate)
    router.add_post("/2/nodes/{name}/migrate", node_migrate)
    router.add_post("/2/nodes/{name}/powercycle", node_powercycle)
    router.add_get("/2/nodes/{name}/storage", node_storage)
    router.add_put("/2/nodes/{name}/storage/modify", node_storage_modify)
    router.add_put("/2/nodes/{name}/storage/repair", node_storage_repair)
