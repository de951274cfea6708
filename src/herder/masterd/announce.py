"""A node telling masterd it is up: `POST /2/herder/nodes/NAME/announce` (herder's, not
Ganeti's: docs/compat.md), sent by noded when it starts (`noded.announce`).

The body is a call of `node_announce` signed for node NAME with the cluster key's announce key
(`core.purpose_keys.NODE_ANNOUNCE`, `core.rpcauth`): only a holder of the cluster key can
announce, for the node it names, within ±300 s, each body once. It changes nothing but
masterd's record of unreachable nodes (`core.reachability`): the node is seen again, so
the live cache asks it and the redistribution pushes it what it missed at once, instead of
when its back-off runs out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from herder.core import access, model, purpose_keys, rpcauth
from herder.core.errors import SignatureError
from herder.core.reachability import Reachability

log = logging.getLogger("herder.masterd")
METHOD = "node_announce"


@dataclass
class Announcements:
    """What the route needs: the cluster keys accepted (the current one, and during a
    rotation the retiring one), the record, and the nonces seen."""

    keys: Callable[[], list[bytes]]
    reachability: Reachability
    replay: rpcauth.ReplayCache = field(default_factory=rpcauth.ReplayCache)


async def signed_node(request: web.Request, keys: list[bytes], replay: rpcauth.ReplayCache,
                      method: str, purpose: str, what: str) -> model.Node:
    """The node named in the URL whose call of `method` the body is, signed for it with the
    `purpose` key (403 `what` refused, with the reason), and known to the config (404)."""
    from herder.masterd import rapi

    name = request.match_info["name"]
    try:
        rpcauth.check_call(keys, await request.read(), method=method, node=name,
                           replay=replay, purpose=purpose)
    except SignatureError as err:
        raise rapi.RapiHttpError(403, f"{what} refused: {err}") from None
    node = next((n for n in rapi.config_of(request).nodes.values() if n.name == name), None)
    if node is None:
        raise rapi.RapiHttpError(404, f"node {name} is not a node of the cluster")
    return node


def add_routes(router: web.UrlDispatcher) -> None:
    from herder.masterd import rapi

    @rapi.ROUTES.allow(access.NODE_ANNOUNCE)
    async def node_announce(request: web.Request) -> web.Response:
        announcements = rapi.ctx_of(request).announce
        if announcements is None:
            raise rapi.RapiHttpError(503, "this masterd takes no announcements")
        node = await signed_node(request, announcements.keys(), announcements.replay, METHOD,
                                 purpose_keys.NODE_ANNOUNCE, "announcement")
        name = node.name
        down = announcements.reachability.down(node.uuid)
        announcements.reachability.seen(node.uuid)
        if down is not None:
            log.info("node %s announced itself: unreachable since %s, asked again now",
                     name, down.describe(announcements.reachability.clock()))
        return rapi.ok({"node": name, "was_unreachable": down is not None})

    router.add_post("/2/herder/nodes/{name}/announce", node_announce)
