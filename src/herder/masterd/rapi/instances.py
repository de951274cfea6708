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
    from_query,
    listing,
    live_of,
    ok,
    only,
    renamed,
    submit,
    submits,
    takes,
)

INSTANCE_VIEWS = views.InstanceViews()  # the bulk instance list, encoded per object


@ROUTES.allow(access.RAPI_READ)
@takes("bulk")
async def instances(request: web.Request) -> web.Response:
    config = config_of(request)
    ordered = sorted(config.instances.values(), key=lambda i: i.name)
    if flag(request, "bulk"):
        live = await live_of(request, config)
        return web.Response(body=INSTANCE_VIEWS.encode(config, ordered, live), content_type=JSON)
    return ok(listing([i.name for i in ordered], "/2/instances"))


CREATE_FIELDS = body_fields(opcodes.OpInstanceCreate)
# Ganeti's POST_RENAME of instance creation (rlib2.R_2_instances, InstancesMultiAlloc)
CREATE_RENAME = {"name": "instance_name", "os": "os_type"}


def create_opcode(body: dict[str, object], what: str,
                  modes: tuple[str, ...] = ("create", "import", "remote-import")
                  ) -> dict[str, object]:
    """One instance creation of a request body (instance-create-reqv1's fields); `modes`: the
    creation modes the route takes (an import reads an export: masterd.lu.create)."""
    fields = renamed(body, CREATE_RENAME, what)
    only(fields, CREATE_FIELDS, what)
    name = fields.get("instance_name")
    if not isinstance(name, str) or not name:
        raise RapiHttpError(400, f"{what} needs the instance name (name)")
    if fields.get("mode", "create") not in modes:
        raise RapiHttpError(400, f"{what}: mode {fields['mode']!r} is not supported by herder "
                                 f"here; only {' and '.join(repr(m) for m in modes)}")
    return {"OP_ID": "OP_INSTANCE_CREATE", **fields}


@submits(opcodes.OpInstanceCreate)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def instance_create(request: web.Request) -> web.Response:
    """Ganeti's instance-create-reqv1 body: `__version__: 1`, `name`, `disk_template`, ..."""
    body = body_dict(await body_of(request, default={}))
    version = body.pop("__version__", None)
    if version != 1:
        raise RapiHttpError(400, "instance creation needs the request body version "
                                 "(__version__: 1)")
    return await submit(request, "instances", [create_opcode(body, "instance create")])


MULTI_ALLOC_FIELDS = body_fields(opcodes.OpInstanceMultiAlloc)


@submits(opcodes.OpInstanceMultiAlloc)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def instances_multi_alloc(request: web.Request) -> web.Response:
    """Ganeti's `POST /2/instances-multi-alloc`: `instances` (instance-create-reqv1 bodies
    without `__version__`), `iallocator`, `opportunistic_locking`."""
    body = only(body_dict(await body_of(request, default={})), MULTI_ALLOC_FIELDS,
                "instances-multi-alloc")
    items = body.get("instances")
    if not isinstance(items, list) or not items:
        raise RapiHttpError(400, "Request is missing required 'instances' field in body")
    instances = [create_opcode(body_dict(item), f"instances-multi-alloc instance {index}",
                               ("create",)) for index, item in enumerate(items)]
    return await submit(request, "instances_multi_alloc", [
        {**body, "OP_ID": "OP_INSTANCE_MULTI_ALLOC", "instances": instances}])


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
@takes("static")
async def instance_info(request: web.Request) -> web.Response:
    inst = _instance(request)
    return await submit(request, "instances_name_info", [
        {"OP_ID": "OP_INSTANCE_QUERY_DATA", "instances": [inst.name],
         "static": flag(request, "static")}])


REMOVE_FIELDS = body_fields(opcodes.OpInstanceRemove, fixed=(*INSTANCE_TARGET,
                                                               "ignore_failures", "cleanup"))


@submits(opcodes.OpInstanceRemove)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def instance_delete(request: web.Request) -> web.Response:
    """Ganeti's DeleteInstance: the body may set OP_INSTANCE_REMOVE's fields (as Ganeti, not
    `ignore_failures`, which the route sets to false)."""
    inst = _instance(request)
    body = only(body_dict(await body_of(request, default={})), REMOVE_FIELDS, "instance remove")
    return await submit(request, "instances_name", [
        {"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": inst.name, "ignore_failures": False,
         **body}])


# What ModifyInstance's body may say that herder does not do, and why (400, naming it)
MODIFY_UNSUPPORTED = {
    "pnode": "herder does not change an instance's primary node in a modify; use instance "
             "failover, migrate or move",
}
MODIFY_RENAME = {"custom_beparams": "beparams", "custom_hvparams": "hvparams",
                 "custom_osparams": "osparams"}


def instance_op(op: type[opcodes.OpCode], resource: str, query_flags: tuple[str, ...] = (),
                rename: dict[str, str] | None = None,
                unsupported: dict[str, str] | None = None) -> Handler:
    """A route submitting `op` for the instance of the URL, with the opcode's fields from the
    body (Ganeti's aliases `rename`d; `unsupported` ones refused with their reason) and
    `query_flags` from the query string."""
    op_id = opcodes.op_id_of(op)
    fields = body_fields(op, fixed=INSTANCE_TARGET, extra=rename or ())
    query = (*query_flags, *(("type",) if "reboot_type" in fields else ()))

    @submits(op)
    @ROUTES.allow(access.RAPI_WRITE)
    @takes(*query, body=True)
    async def handler(request: web.Request) -> web.Response:
        inst = _instance(request)
        body = body_dict(await body_of(request, default={}))
        for name, why in (unsupported or {}).items():
            if name in body:
                raise RapiHttpError(400, f"{resource}: {name} is not supported: {why}")
        body = only(renamed(body, rename or {}, resource), fields, resource)
        values: dict[str, object] = {name.replace("-", "_"): flag(request, name)
                                     for name in query_flags if name in request.query}
        if "type" in request.query:
            values["reboot_type"] = request.query["type"]
        return await submit(request, resource, [{"OP_ID": op_id, "instance_name": inst.name,
                                                 **from_query(request, body, values)}])

    return handler


@submits(opcodes.OpInstanceRename)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def instance_rename(request: web.Request) -> web.Response:
    inst = _instance(request)
    body = only(body_dict(await body_of(request, default={})),
                body_fields(opcodes.OpInstanceRename, fixed=INSTANCE_TARGET), "instance rename")
    if not isinstance(body.get("new_name"), str) or not body["new_name"]:
        raise RapiHttpError(400, "instance rename needs new_name")
    return await submit(request, "instances_name_rename", [
        {"OP_ID": "OP_INSTANCE_RENAME", "instance_name": inst.name, **body}])


REINSTALL_FIELDS = body_fields(opcodes.OpInstanceReinstall, fixed=INSTANCE_TARGET,
                               extra=("os", "start"))


@submits(opcodes.OpInstanceReinstall, opcodes.OpInstanceStartup)
@ROUTES.allow(access.RAPI_WRITE)
@takes("os", "nostartup", body=True)
async def instance_reinstall(request: web.Request) -> web.Response:
    """Ganeti's reinstall body: `os`, `osparams`, `start` (then a startup opcode follows); or
    the old style's query string (`?os=`, `?nostartup=1`), not both."""
    inst = _instance(request)
    body = renamed(only(body_dict(await body_of(request, default={})), REINSTALL_FIELDS,
                        "instance reinstall"), {"os": "os_type"}, "instance reinstall")
    values: dict[str, object] = {}
    if "os" in request.query:
        values["os_type"] = request.query["os"]
    if "nostartup" in request.query:
        values["start"] = not flag(request, "nostartup")
    body = from_query(request, body, values)
    start = body.pop("start", True)
    if not isinstance(start, bool):
        raise RapiHttpError(400, "instance reinstall: start must be true or false")
    ops: list[dict[str, Any]] = [{"OP_ID": "OP_INSTANCE_REINSTALL", "instance_name": inst.name,
                                  **body}]
    if start:
        ops.append({"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": inst.name})
    return await submit(request, "instances_name_reinstall", ops)


@submits(opcodes.OpInstanceGrowDisk)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
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


instance_modify = instance_op(opcodes.OpInstanceSetParams, "instances_name_modify",
                              rename=MODIFY_RENAME, unsupported=MODIFY_UNSUPPORTED)
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


REPLACE_FIELDS = body_fields(opcodes.OpInstanceReplaceDisks, fixed=INSTANCE_TARGET)


@submits(opcodes.OpInstanceReplaceDisks)
@ROUTES.allow(access.RAPI_WRITE)
@takes("mode", "remote_node", "disks", "iallocator", "early_release", body=True)
async def instance_replace_disks(request: web.Request) -> web.Response:
    """Ganeti's ReplaceInstanceDisks sends `mode`, `remote_node`, `disks` (indexes, comma
    separated), `iallocator` and `early_release` in the query string; a body may give the
    opcode's fields instead (not the same one both ways)."""
    inst = _instance(request)
    body = only(body_dict(await body_of(request, default={})), REPLACE_FIELDS,
                "instance replace-disks")
    values: dict[str, object] = {name: request.query[name]
                                 for name in ("mode", "remote_node", "iallocator")
                                 if name in request.query}
    if "early_release" in request.query:
        values["early_release"] = flag(request, "early_release")
    if "disks" in request.query:
        text = request.query["disks"]
        try:
            values["disks"] = [int(index) for index in text.split(",") if index.strip()]
        except ValueError:
            raise RapiHttpError(400, f"disks must be disk indexes separated by commas, got "
                                     f"{text!r}") from None
    return await submit(request, "instances_name_replace_disks", [
        {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": inst.name,
         **from_query(request, body, values)}])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/instances", instances)
    router.add_post("/2/instances", instance_create)
    router.add_post("/2/instances-multi-alloc", instances_multi_alloc)
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
