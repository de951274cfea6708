"""The networks' RAPI routes, as Ganeti 3.0's rlib2 (R_2_networks, R_2_networks_name,
R_2_networks_name_modify, _connect, _disconnect): list (`bulk`: NET_FIELDS), add, one
network, modify, connect to and disconnect from a node group, delete. Their tags are
`rapi/tags.py`'s; `/2/query/network` is `rapi/query.py`'s."""

from __future__ import annotations

from aiohttp import web

from herder.core import access, model
from herder.masterd import views
from herder.masterd.jobs import opcodes
from herder.masterd.rapi.base import (
    ROUTES,
    Handler,
    RapiHttpError,
    body_dict,
    body_fields,
    body_of,
    config_of,
    find,
    flag,
    listing,
    ok,
    only,
    submit,
    submits,
    takes,
)

# Ganeti's NET_FIELDS: what a bulk list and one network answer
NET_FIELDS = ("name", "network", "gateway", "network6", "gateway6", "mac_prefix",
              "free_count", "reserved_count", "map", "group_list", "inst_list",
              "external_reservations", "tags", "ctime", "mtime", "uuid", "serial_no")


def _network(request: web.Request) -> model.Network:
    """The network the URL names (404 unless exactly one)."""
    return find(config_of(request).find_network, request.match_info["name"])


def _shown(config: model.ConfigData, net: model.Network) -> dict[str, object]:
    view = views.network_view(config, net)
    return {key: view[key] for key in NET_FIELDS}


@ROUTES.allow(access.RAPI_READ)
@takes("bulk")
async def networks(request: web.Request) -> web.Response:
    config = config_of(request)
    ordered = sorted(config.networks.values(), key=lambda n: n.name)
    if flag(request, "bulk"):
        return ok([_shown(config, n) for n in ordered])
    return ok(listing([n.name for n in ordered], "/2/networks", key="name"))


@ROUTES.allow(access.RAPI_READ)
async def network(request: web.Request) -> web.Response:
    return ok(_shown(config_of(request), _network(request)))


ADD_FIELDS = body_fields(opcodes.OpNetworkAdd, extra=("name",))  # Ganeti's POST_RENAME


@submits(opcodes.OpNetworkAdd)
@ROUTES.allow(access.RAPI_WRITE)
@takes(body=True)
async def network_add(request: web.Request) -> web.Response:
    body = only(body_dict(await body_of(request, default={})), ADD_FIELDS, "network add")
    # Ganeti's client sends every parameter, None for one not given: the opcode's default
    body = {key: value for key, value in body.items() if value is not None}
    name = body.pop("network_name", None) or body.pop("name", None)
    if not name:
        raise RapiHttpError(400, "network add needs network_name")
    return await submit(request, "networks", [{"OP_ID": "OP_NETWORK_ADD",
                                               "network_name": name, **body}])


def _network_op(op: type[opcodes.OpCode], resource: str, what: str) -> Handler:
    """A route submitting `op` for the network of the URL with the opcode's fields from the
    body (Ganeti's R_2_networks_name_modify, _connect, _disconnect)."""
    op_id = opcodes.op_id_of(op)
    fields = body_fields(op, fixed=("network_name",))

    @submits(op)
    @ROUTES.allow(access.RAPI_WRITE)
    @takes(body=True)
    async def handler(request: web.Request) -> web.Response:
        # the body is checked before the network is looked up: bad input is a 400 whatever
        # the URL names, as on the other resources' routes
        body = only(body_dict(await body_of(request, default={})), fields, what)
        target = _network(request)
        return await submit(request, resource, [
            {"OP_ID": op_id, "network_name": target.name, **body}])

    return handler


network_modify = _network_op(opcodes.OpNetworkSetParams, "networks_name_modify",
                             "network modify")
network_connect = _network_op(opcodes.OpNetworkConnect, "networks_name_connect",
                              "network connect")
network_disconnect = _network_op(opcodes.OpNetworkDisconnect, "networks_name_disconnect",
                                 "network disconnect")


@submits(opcodes.OpNetworkRemove)
@ROUTES.allow(access.RAPI_WRITE)
@takes("force")
async def network_delete(request: web.Request) -> web.Response:
    target = _network(request)
    return await submit(request, "networks_name", [
        {"OP_ID": "OP_NETWORK_REMOVE", "network_name": target.name,
         "force": flag(request, "force")}])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/2/networks", networks)
    router.add_post("/2/networks", network_add)
    router.add_get("/2/networks/{name}", network)
    router.add_delete("/2/networks/{name}", network_delete)
    router.add_put("/2/networks/{name}/modify", network_modify)
    router.add_put("/2/networks/{name}/connect", network_connect)
    router.add_put("/2/networks/{name}/disconnect", network_disconnect)
