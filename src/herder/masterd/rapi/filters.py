"""Job filter rules (Ganeti's `/2/filters` and `/2/filters/UUID`, rlib2's R_2_filters): the
config's `filters` read, and written (a config write, no job: Ganeti's luxi writes them so too,
and neither a drained nor a paused queue may stop them), then applied to the queue at once
(`masterd.jobs.filters`; docs/compat.md row 53)."""

from __future__ import annotations

import asyncio
import uuid as uuid_module
from collections.abc import Callable

import msgspec
from aiohttp import web

from herder.core import access, model, reason
from herder.masterd.rapi.base import (
    ROUTES,
    RapiContext,
    RapiHttpError,
    body_dict,
    body_of,
    config_of,
    ctx_of,
    flag,
    ok,
    takes,
)

# Ganeti's rlib2 FILTER_RULE_FIELDS, and checkFilterParameters' body
FIELDS = ("watermark", "priority", "predicates", "action", "reason_trail", "uuid")
BODY = frozenset({"priority", "predicates", "action", "reason"})


def _uuid(request: web.Request) -> str:
    text = request.match_info["uuid"]
    try:
        return str(uuid_module.UUID(text))
    except ValueError:
        raise RapiHttpError(400, f"invalid filter UUID {text!r}") from None


def _view(rule: model.FilterRule) -> dict[str, object]:
    shown: dict[str, object] = msgspec.to_builtins(rule)
    return {name: shown[name] for name in FIELDS}


@ROUTES.allow(access.RAPI_READ)
@takes("bulk")
async def filters(request: web.Request) -> web.Response:
    rules = sorted(config_of(request).filters.values(),
                   key=lambda r: (r.priority, r.watermark, r.uuid))
    if flag(request, "bulk"):
        return ok([_view(rule) for rule in rules])
    return ok([{"uuid": rule.uuid, "uri": f"/2/filters/{rule.uuid}"} for rule in rules])


@ROUTES.allow(access.RAPI_READ)
async def filter_get(request: web.Request) -> web.Response:
    rule = config_of(request).filters.get(_uuid(request))
    if rule is None:
        raise RapiHttpError(404, f"filter {request.match_info['uuid']} not found")
    return ok(_view(rule))


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def filter_add(request: web.Request) -> web.Response:
    """A new rule (Ganeti's ReplaceFilter without a UUID): its UUID."""
    return ok(await _replace(request, model.new_uuid()))


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def filter_replace(request: web.Request) -> web.Response:
    """The rule replaced, or made with this UUID (Ganeti's ReplaceFilter): its UUID."""
    return ok(await _replace(request, _uuid(request)))


async def _replace(request: web.Request, uuid: str) -> str:
    """Ganeti's checkFilterParameters, then the rule written with a new watermark (the highest
    job id now) and the queue told."""
    body = body_dict(await body_of(request, default={}))
    unknown = sorted(set(body) - BODY)
    if unknown:
        raise RapiHttpError(400, "Invalid body parameters: filter rule doesn't support the "
                                 f"parameter '{unknown[0]}'")
    ctx = ctx_of(request)
    try:
        trail = [*reason.validate(body.get("reason", [])), reason.rapi("filters")]
    except ValueError as err:
        raise RapiHttpError(400, str(err)) from None
    fields = {"uuid": uuid, "watermark": ctx.queue.highest_id(),
              "priority": body.get("priority", 0), "predicates": body.get("predicates", []),
              "action": body.get("action", "CONTINUE"), "reason_trail": trail}
    try:
        rule = msgspec.convert(fields, model.FilterRule)
    except msgspec.ValidationError as err:
        raise RapiHttpError(400, f"invalid filter rule: {err}") from None
    await asyncio.to_thread(_write, ctx, lambda rules: rules.__setitem__(uuid, rule))
    return uuid


def _write(ctx: RapiContext, change: Callable[[dict[str, model.FilterRule]], None]) -> None:
    """Change the config's filter rules, then apply them to the queue."""
    if ctx.store is None:
        raise RapiHttpError(503, "this masterd has no config store to write filter rules to")
    with ctx.store.update() as config:
        rules = dict(config.filters)
        change(rules)
        config.filters = rules
    ctx.queue.reconsider()


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def filter_delete(request: web.Request) -> web.Response:
    body = body_dict(await body_of(request, default={}))  # (Ganeti's client sends {})
    if body:
        raise RapiHttpError(400, f"filter delete: unknown field(s) {', '.join(sorted(body))}")
    uuid = _uuid(request)

    def drop(rules: dict[str, model.FilterRule]) -> None:
        if rules.pop(uuid, None) is None:
            raise RapiHttpError(404, f"filter {uuid} not found")

    await asyncio.to_thread(_write, ctx_of(request), drop)
    return ok(None)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/filters", filters)
    router.add_post("/2/filters", filter_add)
    router.add_get("/2/filters/{uuid}", filter_get)
    router.add_put("/2/filters/{uuid}", filter_replace)
    router.add_delete("/2/filters/{uuid}", filter_delete)
