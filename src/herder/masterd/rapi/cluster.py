"""The cluster's RAPI routes (Ganeti's rlib2): `GET /`, `/version`, `/2/features`,
`/2/info`; `PUT /2/modify` (OP_CLUSTER_SET_PARAMS), `PUT /2/redistribute-config`."""

from __future__ import annotations

from aiohttp import web

from herder.core import access
from herder.masterd import views
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    ROUTES,
    body_dict,
    body_fields,
    body_of,
    config_of,
    ok,
    only,
    submit,
    submits,
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
async def cluster_modify(request: web.Request) -> web.Response:
    body = body_dict(await body_of(request, default={}))
    only(body, CLUSTER_FIELDS, "cluster modify")
    return await submit(request, "modify", [{"OP_ID": "OP_CLUSTER_SET_PARAMS", **body}])


@submits(opcodes.OpClusterRedistConf)
@ROUTES.allow(access.RAPI_WRITE)
async def redistribute_config(request: web.Request) -> web.Response:
    return await submit(request, "redist_config", [{"OP_ID": "OP_CLUSTER_REDIST_CONF"}])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/", root)
    router.add_get("/version", version)
    router.add_get("/2/features", features)
    router.add_get("/2/info", info)
    router.add_put("/2/modify", cluster_modify)
    router.add_put("/2/redistribute-config", redistribute_config)
