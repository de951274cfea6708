"""`POST /2/herder/oob`: OP_OOB_COMMAND as a job (herder's route: Ganeti's RAPI has none,
docs/compat.md N3; the program is run by `masterd.oob`)."""

from __future__ import annotations

from aiohttp import web

from herder.core import access
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    ROUTES,
    body_dict,
    body_fields,
    body_of,
    only,
    submit,
    submits,
    takes,
)


@submits(opcodes.OpOobCommand)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def oob_command(request: web.Request) -> web.Response:
    """OP_OOB_COMMAND as a job (the result: Ganeti's per-node [[status, name], [status,
    payload]] list)."""
    body = only(body_dict(await body_of(request)),
                body_fields(opcodes.OpOobCommand, fixed=("node_uuids",)), "out-of-band command")
    return await submit(request, "herder_oob", [{"OP_ID": "OP_OOB_COMMAND", **body}])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/2/herder/oob", oob_command)
