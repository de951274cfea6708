"""The cluster's RAPI routes (Ganeti's rlib2): `GET /`, `/version`, `/2/features`,
`/2/info`, `/2/os` (an OP_OS_DIAGNOSE job, awaited); `PUT /2/modify`
(OP_CLUSTER_SET_PARAMS), `PUT /2/redistribute-config`."""

from __future__ import annotations

import asyncio

from aiohttp import web

from herder.core import access
from herder.masterd import views
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    ROUTES,
    RapiHttpError,
    body_dict,
    body_fields,
    body_of,
    config_of,
    ctx_of,
    ok,
    only,
    submit,
    submit_job,
    submits,
    takes,
)

FEATURES = ["instance-create-reqv1", "instance-reinstall-reqv1", "node-migrate-reqv1",
            "node-evac-res1"]


@ROUTES.allow(access.RAPI_READ)
async def version(request: web.Request) -> web.Response:
    return ok(views.RAPI_VERSION)


@ROUTES.allow(access.RAPI_READ)
async def root(request: web.Request) -> web.Response:
    return ok(None)


@ROUTES.allow(access.RAPI_READ)
async def features(request: web.Request) -> web.Response:
    return ok(FEATURES)


@ROUTES.allow(access.RAPI_READ)
async def info(request: web.Request) -> web.Response:
    return ok(views.cluster_view(config_of(request)))


CLUSTER_FIELDS = body_fields(opcodes.OpClusterSetParams)


@submits(opcodes.OpClusterSetParams)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def cluster_modify(request: web.Request) -> web.Response:
    body = body_dict(await body_of(request, default={}))
    only(body, CLUSTER_FIELDS, "cluster modify")
    return await submit(request, "modify", [{"OP_ID": "OP_CLUSTER_SET_PARAMS", **body}])


@submits(opcodes.OpClusterRedistConf)
@ROUTES.allow(access.RAPI_WRITE)
async def redistribute_config(request: web.Request) -> web.Response:
    return await submit(request, "redist_config", [{"OP_ID": "OP_CLUSTER_REDIST_CONF"}])


OS_WAIT = 120.0  # seconds GET /2/os waits for its OP_OS_DIAGNOSE job (the nodes' 30 s each)
FINAL_JOB_STATUSES = frozenset({"success", "error", "canceled"})


@submits(opcodes.OpOsDiagnose)
@ROUTES.allow(access.RAPI_READ)
async def operating_systems(request: web.Request) -> web.Response:
    """Ganeti's `GET /2/os`: the usable OSes as `name+variant` (or `name`), from an
    OP_OS_DIAGNOSE job this request waits for (502 when it fails, as Ganeti's "Can't get OS
    list")."""
    queue = ctx_of(request).queue
    job_id = await submit_job(request, "os", [{"OP_ID": "OP_OS_DIAGNOSE",
                                               "output_fields": ["name", "variants"]}])
    deadline = asyncio.get_running_loop().time() + OS_WAIT
    status: object = None
    while status not in FINAL_JOB_STATUSES:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise RapiHttpError(504, f"job {job_id} listing the OSes did not end within "
                                     f"{OS_WAIT:g} s")
        change = await queue.wait_for_change_async(job_id, ["status"], [status], None,
                                                   min(left, 10.0))
        if change is not None:
            status = change["job_info"][0]
    job = queue.info(job_id, ["status", "opresult"])
    if job["status"] != "success":
        raise RapiHttpError(502, f"Can't get OS list: job {job_id} {job['status']}")
    (rows,) = job["opresult"]
    return ok([full for name, variants in rows
               for full in ([f"{name}+{v}" for v in variants] if variants else [name])])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/os", operating_systems)
    router.add_get("/", root)
    router.add_get("/2", root)  # Ganeti's R_2: the same legacy answer as /
    router.add_get("/version", version)
    router.add_get("/2/features", features)
    router.add_get("/2/info", info)
    router.add_put("/2/modify", cluster_modify)
    router.add_put("/2/redistribute-config", redistribute_config)
