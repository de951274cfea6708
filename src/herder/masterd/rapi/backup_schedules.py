"""herder's scheduled backups (Ganeti has none; compat B66): `GET /2/herder/backup-schedules`
(the schedules with their next time, and maintd's records of their runs), `POST
/2/herder/backup-schedules` (one schedule added) and `DELETE
/2/herder/backup-schedules/NAME`. The schedules live in the config's maintenance section,
written atomically (not a job, like maintd's bookkeeping); maintd runs them
(herder.maintd.backups)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from herder.core import access, backupsched, model
from herder.core.errors import AmbiguousError, NotFoundError
from herder.masterd.rapi.base import (
    ROUTES,
    RapiHttpError,
    body_dict,
    body_of,
    config_of,
    ctx_of,
    ok,
    takes,
)

PATH = "/2/herder/backup-schedules"


def _listing(config: model.ConfigData) -> dict[str, object]:
    """The schedules, each with its next time (`nextRun`, seconds since the epoch), and the
    runs."""
    now = model.now()
    schedules = [{**model.to_builtins(schedule),
                  "nextRun": backupsched.next_due(schedule.when, max(now, schedule.ctime))}
                 for schedule in config.maintenance.backup_schedules]
    return {"schedules": schedules, "runs": model.to_builtins(config.maintenance.backup_runs)}


@ROUTES.allow(access.RAPI_READ)
async def backup_schedules(request: web.Request) -> web.Response:
    return ok(_listing(config_of(request)))


def _resolved(config: model.ConfigData, schedule: backupsched.BackupSchedule
              ) -> backupsched.BackupSchedule:
    """The schedule with its node's and instance's full names; 404 for an unknown one."""
    try:
        node = config.find_node(schedule.target_node)
        instance = config.find_instance(schedule.instance).name if schedule.instance else ""
    except (NotFoundError, AmbiguousError) as err:
        raise RapiHttpError(404, f"backup schedule {schedule.name}: {err}") from None
    if node.offline:
        raise RapiHttpError(400, f"backup schedule {schedule.name}: node {node.name} is "
                                 "offline")
    return backupsched.BackupSchedule(
        name=schedule.name, when=schedule.when, target_node=node.name, instance=instance,
        tag=schedule.tag, keep=schedule.keep, ctime=model.now())


async def _update(request: web.Request,
                  change: Callable[[model.ConfigData], None]) -> web.Response:
    store = ctx_of(request).store
    if store is None:
        raise RapiHttpError(503, "this server has no config store")

    def update() -> dict[str, object]:
        with store.update() as config:
            change(config)
            config.maintenance.touch()
            return _listing(config)

    return ok(await asyncio.to_thread(update))


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def backup_schedule_add(request: web.Request) -> web.Response:
    body = body_dict(await body_of(request, default={}))
    body.pop("ctime", None)  # the server's
    try:
        schedule = backupsched.parse_schedule(body)
    except backupsched.BadSchedule as err:
        raise RapiHttpError(400, str(err)) from None

    def add(config: model.ConfigData) -> None:
        schedules = config.maintenance.backup_schedules
        if any(s.name == schedule.name for s in schedules):
            raise RapiHttpError(409, f"backup schedule {schedule.name} exists already")
        schedules.append(_resolved(config, schedule))

    return await _update(request, add)


@ROUTES.allow(access.RAPI_WRITE)
async def backup_schedule_remove(request: web.Request) -> web.Response:
    name = request.match_info["name"]

    def remove(config: model.ConfigData) -> None:
        schedules = config.maintenance.backup_schedules
        kept = [s for s in schedules if s.name != name]
        if len(kept) == len(schedules):
            raise RapiHttpError(404, f"backup schedule {name} not found")
        config.maintenance.backup_schedules = kept

    return await _update(request, remove)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get(PATH, backup_schedules)
    router.add_post(PATH, backup_schedule_add)
    router.add_delete(PATH + "/{name}", backup_schedule_remove)
