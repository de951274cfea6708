"""`POST /2/herder/nodes/NAME/announce`: a node telling masterd it is up (`masterd.announce`:
what is accepted and why; herder's route, not Ganeti's: docs/compat.md). The caller is
checked here, by the signature of the body (`access.NODE_ANNOUNCE`), not by the middleware.
"""

from __future__ import annotations

import logging

from aiohttp import web

from herder.core import access, purpose_keys, rpcauth
from herder.core.errors import SignatureError
from herder.masterd import announce
from herder.masterd.rapi.base import ROUTES, RapiHttpError, config_of, ctx_of, ok

log = logging.getLogger("herder.masterd")


@ROUTES.allow(access.NODE_ANNOUNCE)
async def node_announce(request: web.Request) -> web.Response:
    announcements = ctx_of(request).announce
    if announcements is None:
        raise RapiHttpError(503, "this masterd takes no announcements")
    name = request.match_info["name"]
    body = await request.read()
    try:
        rpcauth.check_call(announcements.keys(), body, method=announce.METHOD, node=name,
                           replay=announcements.replay, purpose=purpose_keys.NODE_ANNOUNCE)
    except SignatureError as err:
        raise RapiHttpError(403, f"announcement refused: {err}") from None
    node = next((n for n in config_of(request).nodes.values() if n.name == name), None)
    if node is None:
        raise RapiHttpError(404, f"node {name} is not a node of the cluster")
    down = announcements.reachability.down(node.uuid)
    announcements.reachability.seen(node.uuid)
    if down is not None:
        log.info("node %s announced itself: unreachable since %s, asked again now",
                 name, down.describe(announcements.reachability.clock()))
    return ok({"node": name, "was_unreachable": down is not None})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/2/herder/nodes/{name}/announce", node_announce)
