"""herder's own RAPI routes under `/2/herder/` (docs/compat.md): `POST /2/herder/jobs` (a job
of any opcodes, as Ganeti's luxi SubmitJob, or several as SubmitManyJobs), `GET
/2/herder/config` (the whole config, for writers), `GET|PUT /2/herder/maintenance` (maintd's
settings) and `PUT /2/herder/maintenance/state` (maintd's bookkeeping)."""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from herder.core import access, model
from herder.masterd import views
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    JSON,
    ROUTES,
    RapiHttpError,
    body_dict,
    body_of,
    config_of,
    ctx_of,
    ok,
    only,
    prepared,
    queued,
    submit,
    submits,
    takes,
)


@ROUTES.allow(access.RAPI_READ)
async def herder_maintenance(request: web.Request) -> web.Response:
    return ok(views.maintenance_view(config_of(request)))


MAINT_FIELDS = {"enabled": "maint_enabled", "harep": "maint_harep",
                "roundDelay": "maint_round_delay",
                "balance": "maint_balance", "balanceThreshold": "maint_balance_threshold",
                "balanceDiskMoves": "maint_balance_disk_moves",
                "balanceDynamicLoad": "maint_balance_dynamic_load",
                "nodeRecovery": "maint_node_recovery",
                "nodeFailureTime": "maint_node_failure_time",
                "diagnoseCommand": "diagnose_data_collector_filename"}


@submits(opcodes.OpClusterSetParams)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def herder_maintenance_set(request: web.Request) -> web.Response:
    body = only(body_dict(await body_of(request, default={})), set(MAINT_FIELDS),
                "maintenance settings")
    op: dict[str, object] = {"OP_ID": "OP_CLUSTER_SET_PARAMS"}
    op.update({MAINT_FIELDS[k]: v for k, v in body.items() if k in MAINT_FIELDS})
    return await submit(request, "herder_maintenance", [op])


STATE_FIELDS = {"incidents", "jobs", "evacuated", "intents", "seen", "backupRuns"}


@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def herder_maintenance_state(request: web.Request) -> web.Response:
    """maintd's state (incidents, jobs of the current round, evacuated instances): replaced as
    given, validated, written atomically to the config (not a job: maintd's bookkeeping, like
    Ganeti's WConfd maintenance RPCs). Answers the whole maintenance section."""
    body = only(body_dict(await body_of(request, default={})), STATE_FIELDS,
                "maintenance state")
    if not body:
        raise RapiHttpError(400, f"give one of {', '.join(sorted(STATE_FIELDS))}")
    store = ctx_of(request).store
    if store is None:
        raise RapiHttpError(503, "this server has no config store")

    def update() -> dict[str, object]:
        with store.update() as config:
            current = model.to_builtins(config.maintenance)
            current.update(body)
            try:
                config.maintenance = msgspec.convert(current, model.Maintenance)
            except msgspec.ValidationError as err:
                raise RapiHttpError(400, f"maintenance state: {err}") from None
            config.maintenance.touch()
            return model.to_builtins(config.maintenance)

    return ok(await asyncio.to_thread(update))


@ROUTES.allow(access.RAPI_WRITE)
async def herder_config(request: web.Request) -> web.Response:
    """The whole cluster config, as masterd holds it (herder's CLI reads it from a machine
    without a copy: `node list`, `instance info`, ...). It carries the DRBD secrets: for users
    with the `write` option only (the access rule)."""
    return web.Response(body=model.encode(config_of(request)), content_type=JSON)


@ROUTES.allow(access.RAPI_WRITE)
@takes("dry-run", body=True)
async def herder_jobs_submit(request: web.Request) -> web.Response:
    """Submit a job of any opcodes (like Ganeti's luxi SubmitJob): {"ops": [{"OP_ID": ...}]},
    answered by its id; or several (luxi SubmitManyJobs, a job's `depends` may name an earlier
    one of them relatively: -1 the one before): {"jobs": [[...], ...]}, answered as Ganeti's
    [[true, id], ...]. Nothing is queued when one opcode is bad."""
    body = body_dict(await body_of(request, default={}))
    unknown = sorted(set(body) - {"ops", "jobs"})
    if unknown:
        raise RapiHttpError(400, f"job submission: unknown field(s) {', '.join(unknown)}")
    if len(body) != 1:
        raise RapiHttpError(400, "give either 'ops' (one job) or 'jobs' (a list of jobs)")
    if "ops" in body:
        return await submit(request, "herder_jobs", _opcodes(body["ops"], "'ops'"))
    many = body["jobs"]
    if not isinstance(many, list) or not many:
        raise RapiHttpError(400, "'jobs': a non-empty list of jobs (lists of opcodes)")
    jobs = [_opcodes(ops, f"job {index}") for index, ops in enumerate(many)]
    trails = [prepared(request, "herder_jobs", ops) for ops in jobs]  # (all alike)
    return ok([[True, job_id] for job_id in await queued(request, jobs, trails[0])])


def _opcodes(value: object, what: str) -> list[dict[str, object]]:
    if not isinstance(value, list) or not value or not all(isinstance(o, dict) for o in value):
        raise RapiHttpError(400, f"{what}: a non-empty list of opcode objects")
    return [dict(o) for o in value]


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/2/herder/jobs", herder_jobs_submit)
    router.add_get("/2/herder/config", herder_config)
    router.add_get("/2/herder/maintenance", herder_maintenance)
    router.add_put("/2/herder/maintenance", herder_maintenance_set)
    router.add_put("/2/herder/maintenance/state", herder_maintenance_state)
