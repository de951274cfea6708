"""The nodes' liveness leases on RAPI (`masterd.leases`: what they are; herder's routes, not
Ganeti's: docs/compat.md):

- `POST /2/herder/nodes/NAME/heartbeat`: a node renewing its lease, checked here (the
  signature of the body, NAME's own node certificate, its counter: `access.NODE_LEASE`), not
  by the middleware; a counter not above the last one is 409 with that one (`counter`);
- `GET /2/herder/leases` (RAPI readers): the seconds since each node's last heartbeat, and the
  cluster's switch of node recovery (maintenance `nodeRecovery`), which maintd reads with them;
- `GET /2/herder/nodes/NAME/liveness` (RAPI readers): the other master candidates' view of
  NAME.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from herder.core import access, purpose_keys, rpcauth
from herder.core.errors import SignatureError
from herder.masterd import leases as node_leases
from herder.masterd.rapi.base import (
    ROUTES,
    RapiHttpError,
    config_of,
    ctx_of,
    find,
    ok,
    peer_certificate,
    signed_node,
    takes,
)


def leases_of(request: web.Request) -> node_leases.Leases:
    leases = ctx_of(request).leases
    if leases is None:
        raise RapiHttpError(503, "this masterd keeps no leases")
    return leases


@ROUTES.allow(access.NODE_LEASE)
@takes(body=True)
async def node_heartbeat(request: web.Request) -> web.Response:
    leases = leases_of(request)
    node, args = await signed_node(request, leases.keys(), None, node_leases.METHOD,
                                   purpose_keys.NODE_LEASE, "heartbeat")
    refused = node_leases.sender_refusal(config_of(request), node, peer_certificate(request))
    if refused is not None:
        raise RapiHttpError(403, f"heartbeat refused: {refused}")
    counter = args.get("counter") if isinstance(args, dict) else None
    try:
        leases.counters.admit(node.uuid, counter)
    except rpcauth.StaleCounter as err:  # the node counts on from `counter`
        body = {"code": 409, "message": "Conflict", "explain": f"heartbeat refused: {err}",
                "counter": err.last}
        return web.json_response(body, status=409)
    except SignatureError as err:
        raise RapiHttpError(403, f"heartbeat refused: {err}") from None
    leases.renewed(node.uuid)
    return ok({"node": node.name, "offline": node.offline, "lease": node_leases.LEASE_TIME})


@ROUTES.allow(access.RAPI_READ)
async def lease_ages(request: web.Request) -> web.Response:
    leases = leases_of(request)
    config = config_of(request)
    ages = leases.ages(list(config.nodes))
    return ok({"lease": node_leases.LEASE_TIME, "renew": node_leases.RENEW_PERIOD,
               "masterd_age": leases.clock() - leases.started,
               # the cluster's switch (maintenance `nodeRecovery`), read with the leases
               "node_recovery": config.maintenance.node_recovery,
               # ... and its detection time (maintenance `nodeFailureTime`; None: maintd's)
               "node_failure_time": config.maintenance.node_failure_time,
               "nodes": {config.nodes[u].name: round(age, 3) for u, age in ages.items()}})


@ROUTES.allow(access.RAPI_READ)
async def node_liveness(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    if ctx.rpc is None:
        raise RapiHttpError(503, "this masterd makes no node calls")
    config = config_of(request)
    node = find(config.find_node, request.match_info["name"])
    votes = await asyncio.to_thread(node_leases.liveness_votes, config, node, ctx.rpc)
    candidates = sorted(n.name for n in config.nodes.values() if n.master_candidate)
    return ok({"node": node.name, "candidates": candidates,
               "master": config.node_name(config.cluster.master_node), "votes": votes})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/2/herder/nodes/{name}/heartbeat", node_heartbeat)
    router.add_get("/2/herder/leases", lease_ages)
    router.add_get("/2/herder/nodes/{name}/liveness", node_liveness)
