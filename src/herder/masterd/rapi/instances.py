"""The instances' RAPI routes (Ganeti's rlib2): the list, create (instance-create-reqv1),
one instance and its info job, remove, rename, reinstall (instance-reinstall-reqv1), disk grow,
and the operations that submit one opcode for the instance of the URL (`instance_op`:
modify, startup, shutdown, reboot, migrate, failover, activate/deactivate disks, recreate and
replace disks). The consoles are `masterd.rapi.console`'s."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from herder.core import access, model
from herder.masterd import views
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    INSTANCE_TARGET,
    JSON,
    ROUTES,
    Handler,
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
)

INSTANCE_VIEWS = views.InstanceViews()  # the bulk instance list, encoded per object


@ROUTES.allow(access.RAPI_READ)
async def instances(request: web.Request) -> web.Response:
    config = config_of(request)
    ordered = sorted(config.instances.values(), key=lambda i: i.name)
    if flag(request, "bulk"):
        live = await live_of(request, config)
        return web.Response(body=INSTANCE_VIEWS.encode(config, ordered, live), content_type=JSON)
    return ok(listing([i.name for i in ordered], "/2/instances"))


CREATE_FIELDS = body_fields(opcodes.OpInstanceCreate)


@submits(opcodes.OpInstanceCreate)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_create(request: web.Request) -> web.Response:
    """Ganeti's instance-create-reqv1 body: `__version__: 1`, `name`, `disk_template`, ..."""
    body = body_dict(await body_of(request, default={}))
    version = body.pop("__version__", None)
    if version != 1:
        raise RapiHttpError(400, "instance creation needs the request body version "
                                 "(__version__: 1)")
    name = body.pop("name", None) or body.pop("instance_name", None)
    if not isinstance(name, str) or not name:
        raise RapiHttpError(400, "instance creation needs the instance name (name)")
    only(body, CREATE_FIELDS, "instance create")
    return await submit(request, "instances", [{"OP_ID": "OP_INSTANCE_CREATE",
                                                "instance_name": name, **body}])


@ROUTES.allow(access.RAPI_READ)
async def instance(request: web.Request) -> web.Response:
    config = config_of(request)
    target = find(config.find_instance, request.match_info["name"])
    return ok(views.instance_view(config, target, await live_of(request, config)))


def _instance(request: web.Request) -> model.Instance:
    config = config_of(request)
    return find(config.find_instance, request.match_info["name"])


@submits(opcodes.OpInstanceQueryData)
@ROUTES.allow(access.RAPI_READ)
async def instance_info(request: web.Request) -> web.Response:
    inst = _instance(request)
    return await submit(request, "instances_name_info", [
        {"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": [inst.name],
         "static": flag(request, "static")}])


@submits(opcodes.OpInstanceRemove)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_delete(request: web.Request) -> web.Response:
    inst = _instance(request)
    return await submit(request, "instances_name", [
        {"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": inst.name}])


def instance_op(op: type[opcodes.OpCode], resource: str,
                query_flags: tuple[str, ...] = ()) -> Handler:
    """A route submitting `op` for the instance of the URL, with the opcode's fields from the
    body and `query_flags` from the query string."""
    op_id = opcodes.op_id_of(op)
    fields = body_fields(op, fixed=INSTANCE_TARGET)

    @submits(op)
    @ROUTES.allow(access.RAPI_WRITE)
    async def handler(request: web.Request) -> web.Response:
        inst = _instance(request)
        body = only(body_dict(await body_of(request, default={})), fields, resource)
        for name in query_flags:
            if name in request.query:
                body[name.replace("-", "_")] = flag(request, name)
        if "type" in request.query and "reboot_type" in fields:
            body["reboot_type"] = request.query["type"]
        return await submit(request, resource, [{"OP_ID": op_id, "instance_name": inst.name,
                                                 **body}])

    return handler


@submits(opcodes.OpInstanceRename)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_rename(request: web.Request) -> web.Response:
    inst = _instance(request)
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpInstanceRename, fixed=INSTANCE_TARGET), "instance rename")
    if not isinstance(body.get("new_name"), str) or not body["new_name"]:
        raise RapiHttpError(400, "instance rename needs new_name")
    return await submit(request, "instances_name_rename", [
        {"OP_ID": "OP_INSTANCE_RENAME", "instance_name": inst.name, **body}])


@submits(opcodes.OpInstanceReinstall, opcodes.OpInstanceStartup)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_reinstall(request: web.Request) -> web.Response:
    """Ganeti's reinstall body: `os`, `osparams`, `start` (then a startup opcode follows)."""
    inst = _instance(request)
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpInstanceReinstall, fixed=INSTANCE_TARGET,
                            extra=("os", "start")),
                "instance reinstall")
    ops: list[dict[str, Any]] = [{
        "OP_ID": "OP_INSTANCE_REINSTALL", "instance_name": inst.name,
        "os_type": body.get("os_type") or body.get("os") or request.query.get("os"),
        "osparams": body.get("osparams"), "force_variant": bool(body.get("force_variant"))}]
    if body.get("start", not flag(request, "nostartup")):
        ops.append({"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": inst.name})
    return await submit(request, "instances_name_reinstall", ops)


@submits(opcodes.OpInstanceGrowDisk)
@ROUTES.allow(access.RAPI_WRITE)
async def instance_grow_disk(request: web.Request) -> web.Response:
    """Ganeti's `POST /2/instances/NAME/disk/N/grow`: body `amount` (MiB), `wait_for_sync`,
    `absolute`."""
    inst = _instance(request)
    try:
        index = int(request.match_info["disk"])
    except ValueError:
        raise RapiHttpError(400, f"invalid disk index {request.match_info['disk']!r}") from None
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpInstanceGrowDisk, fixed=(*INSTANCE_TARGET, "disk")),
                "instance disk grow")
    if not isinstance(body.get("amount"), int) or isinstance(body.get("amount"), bool):
        raise RapiHttpError(400, "instance disk grow needs amount (MiB, an integer)")
    return await submit(request, "instances_name_disk_grow", [{
        "OP_ID": "OP_INSTANCE_GROW_DISK", "instance_name": inst.name, "disk": index, **body}])


instance_modify = instance_op(opcodes.OpInstanceSetParams, "instances_name_modify")
instance_startup = instance_op(opcodes.OpInstanceStartup, "instances_name_startup",
                               ("force", "no_remember"))
instance_shutdown = instance_op(opcodes.OpInstanceShutdown, "instances_name_shutdown",
                                ("no_remember",))
instance_reboot = instance_op(opcodes.OpInstanceReboot, "instances_name_reboot",
                              ("ignore_secondaries",))
instance_migrate = instance_op(opcodes.OpInstanceMigrate, "instances_name_migrate")
instance_failover = instance_op(opcodes.OpInstanceFailover, "instances_name_failover")
instance_activate_disks = instance_op(opcodes.OpInstanceActivateDisks,
                                      "instances_name_activate_disks", ("ignore_size",))
instance_deactivate_disks = instance_op(opcodes.OpInstanceDeactivateDisks,
                                        "instances_name_deactivate_disks", ("force",))
instance_recreate_disks = instance_op(opcodes.OpInstanceRecreateDisks,
                                      "instances_name_recreate_disks")
instance_replace_disks = instance_op(opcodes.OpInstanceReplaceDisks,
                                     "instances_name_replace_disks")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/instances", instances)
    router.add_post("/2/instances", instance_create)
    router.add_get("/2/instances/{name}", instance)
    router.add_delete("/2/instances/{name}", instance_delete)
    router.add_get("/2/instances/{name}/info", instance_info)
    router.add_put("/2/instances/{name}/rename", instance_rename)
    router.add_put("/2/instances/{name}/modify", instance_modify)
    router.add_put("/2/instances/{name}/startup", instance_startup)
    router.add_put("/2/instances/{name}/shutdown", instance_shutdown)
    router.add_post("/2/instances/{name}/reboot", instance_reboot)
    router.add_put("/2/instances/{name}/migrate", instance_migrate)
    router.add_put("/2/instances/{name}/failover", instance_failover)
    router.add_put("/2/instances/{name}/activate-disks", instance_activate_disks)
    router.add_put("/2/instances/{name}/deactivate-disks", instance_deactivate_disks)
    router.add_post("/2/instances/{name}/reinstall", instance_reinstall)
    router.add_post("/2/instances/{name}/disk/{disk}/grow", instance_grow_disk)
    router.add_post("/2/instances/{name}/recreate-disks", instance_recreate_disks)
    router.add_post("/2/instances/{name}/replace-disks", instance_replace_disks)
