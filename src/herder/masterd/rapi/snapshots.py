"""herder's snapshot routes (Ganeti has no snapshots; compat B63), under `/2/herder/`:
`GET /2/herder/instances/NAME/snapshots` (the recorded snapshots, read from the config: no
node is asked), `POST` there (OP_INSTANCE_SNAPSHOT_ADD, body `{"snapshot_name": ...}`),
`GET|DELETE /2/herder/instances/NAME/snapshots/SNAPSHOT` (one; OP_INSTANCE_SNAPSHOT_REMOVE)
and `PUT .../SNAPSHOT/rollback` (OP_INSTANCE_SNAPSHOT_ROLLBACK)."""

from __future__ import annotations

from aiohttp import web

from herder.core import access, model, names
from herder.masterd import views
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
    ok,
    only,
    submit,
    submits,
    takes,
)

ADD_FIELDS = body_fields(opcodes.OpInstanceSnapshotAdd, fixed=INSTANCE_TARGET)
NAMED_FIELDS = body_fields(opcodes.OpInstanceSnapshotRemove,
                           fixed=(*INSTANCE_TARGET, "snapshot_name"))
# `cleanup`: what the queue's recovery submits after a master died in a rollback, for an
# operator to run again when that job could not finish
ROLLBACK_FIELDS = body_fields(opcodes.OpInstanceSnapshotRollback,
                              fixed=(*INSTANCE_TARGET, "snapshot_name"))


def _instance(request: web.Request) -> model.Instance:
    return find(config_of(request).find_instance, request.match_info["name"])


def _snapshot_name(value: object) -> str:
    try:
        return names.snapshot_name(value)
    except names.BadName as err:
        raise RapiHttpError(400, str(err)) from None


def _recorded(request: web.Request) -> tuple[model.Instance, model.InstanceSnapshot]:
    name = _snapshot_name(request.match_info["snapshot"])
    inst = _instance(request)
    snapshot = inst.snapshot(name)
    if snapshot is None:
        raise RapiHttpError(404, f"instance {inst.name} has no snapshot {name}")
    return inst, snapshot


@ROUTES.allow(access.RAPI_READ)
async def snapshot_list(request: web.Request) -> web.Response:
    inst = _instance(request)
    return ok([views.snapshot_view(inst, snapshot) for snapshot in inst.snapshots])


@ROUTES.allow(access.RAPI_READ)
async def snapshot_one(request: web.Request) -> web.Response:
    inst, snapshot = _recorded(request)
    return ok(views.snapshot_view(inst, snapshot))


@submits(opcodes.OpInstanceSnapshotAdd)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def snapshot_add(request: web.Request) -> web.Response:
    body = only(body_dict(await body_of(request, default={})), ADD_FIELDS, "snapshot add")
    body["snapshot_name"] = _snapshot_name(body.get("snapshot_name"))
    inst = _instance(request)
    return await submit(request, "herder_instances_name_snapshots", [
        {"OP_ID": "OP_INSTANCE_SNAPSHOT_ADD", "instance_name": inst.name, **body}])


async def _named(request: web.Request, op_id: str, what: str,
                 fields: frozenset[str] = NAMED_FIELDS) -> web.Response:
    body = only(body_dict(await body_of(request, default={})), fields, what)
    inst, snapshot = _recorded(request)
    return await submit(request, "herder_instances_name_snapshots_name", [
        {"OP_ID": op_id, "instance_name": inst.name, "snapshot_name": snapshot.name, **body}])


@submits(opcodes.OpInstanceSnapshotRollback)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def snapshot_rollback(request: web.Request) -> web.Response:
    return await _named(request, "OP_INSTANCE_SNAPSHOT_ROLLBACK", "snapshot rollback",
                        ROLLBACK_FIELDS)


@submits(opcodes.OpInstanceSnapshotRemove)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def snapshot_remove(request: web.Request) -> web.Response:
    return await _named(request, "OP_INSTANCE_SNAPSHOT_REMOVE", "snapshot remove")


def add_routes(router: web.UrlDispatcher) -> None:
    base = "/2/herder/instances/{name}/snapshots"
    router.add_get(base, snapshot_list)
    router.add_post(base, snapshot_add)
    router.add_get(base + "/{snapshot}", snapshot_one)
    router.add_delete(base + "/{snapshot}", snapshot_remove)
    router.add_put(base + "/{snapshot}/rollback", snapshot_rollback)
