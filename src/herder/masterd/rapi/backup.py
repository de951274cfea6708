"""Ganeti's export routes (rlib2's R_2_instances_name_prepare_export and _export):
`PUT /2/instances/NAME/prepare-export?mode=local|remote` (OP_BACKUP_PREPARE) and `PUT
/2/instances/NAME/export` (OP_BACKUP_EXPORT; the body's `destination` is the opcode's
`target_node`). Imports are `POST /2/instances` with `mode: import` (`rapi/instances`); the
list is `/2/query/export` (`rapi/query`)."""

from __future__ import annotations

from aiohttp import web

from herder.core import access
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    INSTANCE_TARGET,
    ROUTES,
    RapiHttpError,
    body_dict,
    body_fields,
    body_of,
    config_of,
    find,
    only,
    submit,
    submits,
    takes,
)

EXPORT_FIELDS = body_fields(opcodes.OpBackupExport, fixed=INSTANCE_TARGET, extra=("destination",))


@submits(opcodes.OpBackupPrepare)
@ROUTES.allow(access.RAPI_WRITE)
@takes("mode")
async def instance_prepare_export(request: web.Request) -> web.Response:
    inst = find(config_of(request).find_instance, request.match_info["name"])
    mode = request.query.get("mode")
    if not mode:
        raise RapiHttpError(400, "prepare-export needs the export mode (?mode=local)")
    return await submit(request, "instances_name_prepare_export", [
        {"OP_ID": "OP_BACKUP_PREPARE", "instance_name": inst.name, "mode": mode}])


@submits(opcodes.OpBackupExport)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def instance_export(request: web.Request) -> web.Response:
    inst = find(config_of(request).find_instance, request.match_info["name"])
    body = only(body_dict(await body_of(request, default={})), EXPORT_FIELDS, "export")
    if "destination" in body:
        if "target_node" in body:
            raise RapiHttpError(400, "export: give destination or target_node, not both")
        body["target_node"] = body.pop("destination")
    target = body.get("target_node")
    if not target or not isinstance(target, (str, list)):  # list: mode remote's destinations
        raise RapiHttpError(400, "export needs the target node (destination)")
    return await submit(request, "instances_name_export", [
        {"OP_ID": "OP_BACKUP_EXPORT", "instance_name": inst.name, **body}])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_put("/2/instances/{name}/prepare-export", instance_prepare_export)
    router.add_put("/2/instances/{name}/export", instance_export)
