"""`POST /2/herder/nodes/NAME/announce`: a node telling masterd it is up (`masterd.announce`:
what is accepted and why; herder's route, not Ganeti's: docs/compat.md). The caller is
checked here, by the signature of the body (`access.NODE_ANNOUNCE`), not by the middleware.
"""

from __future__ import annotations

import logging

from aiohttp import web

from herder.core import access, purpose_keys
from herder.masterd import announce
from herder.masterd.rapi.base import ROUTES, RapiHttpError, ctx_of, ok, signed_node, takes

log = logging.getLogger("herder.masterd")


@ROUTES.allow(access.NODE_ANNOUNCE)
@takes(body=True)
async def node_announce(request: web.Request) -> web.Response:
    announcements = ctx_of(request).announce
    if announcements is None:
        raise RapiHttpError(503, "this masterd takes no announcements")
    node, _ = await signed_node(request, announcements.keys(), announcements.replay,
                             announce.METHOD, purpose_keys.NODE_ANNOUNCE, "announcement")
    down = announcements.reachability.down(node.uuid)
    announcements.reachability.seen(node.uuid)
    if down is not None:
        log.info("node %s announced itself: unreachable since %s, asked again now",
                 node.name, down.describe(announcements.reachability.clock()))
    return ok({"node": node.name, "was_unreachable": down is not None})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/2/herder/nodes/{name}/announce", node_announce)
