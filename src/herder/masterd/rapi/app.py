"""masterd's RAPI application: the route modules of `masterd.rapi` (and the web console's,
`masterd.web`) assembled over `base`'s middleware and context."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from herder.masterd.rapi import (
    announce,
    backup,
    backup_schedules,
    cluster,
    console,
    extensions,
    filters,
    groups,
    instances,
    jobs,
    leases,
    metrics,
    networks,
    nodes,
    oob,
    query,
    snapshots,
    tags,
)
from herder.masterd.rapi.base import CTX_KEY, MAX_BODY, RapiContext, rapi_middleware
from herder.masterd.web import api as web_api
from herder.masterd.web import pages as web_pages

# Each family adds its routes, in this order (aiohttp matches them in the order added)
ADD_ROUTES: tuple[Callable[[web.UrlDispatcher], None], ...] = (
    cluster.add_routes, tags.add_routes, nodes.add_routes, groups.add_routes,
    networks.add_routes, instances.add_routes, backup.add_routes, backup_schedules.add_routes,
    snapshots.add_routes,
    jobs.add_routes,
    filters.add_routes, extensions.add_routes, query.add_routes, console.add_routes,
    announce.add_routes, oob.add_routes, leases.add_routes, metrics.add_routes,
    web_api.add_routes, web_pages.add_routes)

# Opcodes without a RAPI route of their own (clients submit them through /2/herder/jobs),
# and why: tests/unit/test_opcode_registry.py checks that every other opcode has one.
NO_ROUTE = {
    "OP_NODE_ADD": "Ganeti's RAPI cannot add a node either (gnt-node add); herder node add",
    "OP_NODE_REMOVE": "Ganeti's RAPI cannot remove a node either (gnt-node remove); "
                      "herder node remove",
    "OP_REPAIR_COMMAND": "Ganeti 3.0's RAPI has no route for it (compat M2); herder node "
                         "repair-command and maintd",
    "OP_TEST_DELAY": "a test opcode (Ganeti's RAPI has no route for it); tests and benchmarks",
    "OP_CLUSTER_VERIFY_GROUP": "Ganeti's RAPI has no verify route either (gnt-cluster verify); "
                               "herder cluster verify submits it",
    "OP_BACKUP_REMOVE": "Ganeti's RAPI has no route for it (gnt-backup remove); herder backup "
                        "remove submits it through /2/herder/jobs",
    "OP_INSTANCE_STOP_STRAY": "herder's own, for maintd's stray copies (issue 18); through "
                              "POST /2/herder/jobs",
    "OP_GROUP_VERIFY_DISKS": "Ganeti's RAPI has no route for it (gnt-cluster verify-disks "
                             "submits it); herder cluster verify-disks",
    "OP_CLUSTER_VERIFY_DISKS": "Ganeti's RAPI has no route for it either (gnt-cluster "
                               "verify-disks); herder cluster verify-disks",
    "OP_INSTANCE_MOVE": "Ganeti's RAPI has no move route either (gnt-instance move); herder "
                        "instance move submits it",
    "OP_INSTANCE_CHANGE_GROUP": "Ganeti's RAPI has no route for it (gnt-instance "
                                "change-group); herder instance change-group",
    "OP_GROUP_EVACUATE": "Ganeti's RAPI has no route for it (gnt-group evacuate); herder group "
                         "evacuate",
    "OP_CLUSTER_REPAIR_DISK_SIZES": "Ganeti's RAPI has no route for it (gnt-cluster "
                                    "repair-disk-sizes); herder cluster repair-disk-sizes",
    "OP_CLUSTER_DESTROY": "Ganeti's RAPI has no route for it (gnt-cluster destroy); herder "
                          "cluster destroy",
    "OP_TAGS_SEARCH": "Ganeti's RAPI has no route for it (gnt-cluster search-tags); herder "
                      "cluster search-tags",
    "OP_NODE_QUERYVOLS": "Ganeti's RAPI has no route for it (gnt-node volumes); herder node "
                         "volumes",
}


def make_app(ctx: RapiContext) -> web.Application:
    app = web.Application(middlewares=[rapi_middleware], client_max_size=MAX_BODY)
    app[CTX_KEY] = ctx
    for add_routes in ADD_ROUTES:
        add_routes(app.router)
    return app
