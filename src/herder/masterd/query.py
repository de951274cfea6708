"""Ganeti's query resource for nodes and instances: `GET /2/query/{node,instance}?fields=a,b`,
`PUT` with `{"fields": [...]}`, and `GET /2/query/{resource}/fields[?fields=...]` (the field
definitions).

The answer is Ganeti's `{"fields": [{"name", "title", "kind", "doc"}], "data": [[[status,
value], ...], ...]}`, one row per object in name order; each value comes with Ganeti's result
status (`livefields.RS_*`): a live figure of an offline node is RS_OFFLINE, of a node that did
not answer RS_NODATA, an unknown field RS_UNKNOWN (its definition's kind `unknown`). The fields
are those of the bulk answers (Ganeti's `N_FIELDS`, `I_FIELDS`) and a few more (`bootid`,
`master`, `group`, ...); Ganeti's per-parameter fields (`be/…`, `hv/…`, `ndp/…`) and
per-index ones (`disk.size/0`, `nic.ip/0`) are not offered, nor query filters (compat row 47).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from herder.core import access, model
from herder.masterd import livefields, views
from herder.masterd.livecache import Snapshot

# name -> (Ganeti's title, Ganeti's kind, what it is)
FieldDef = tuple[str, str, str]

NODE_FIELDS: dict[str, FieldDef] = {
    "name": ("Node", "text", "Node name"),
    "uuid": ("UUID", "text", "Node UUID"),
    "offline": ("Offline", "bool", "Whether the node is marked offline"),
    "drained": ("Drained", "bool", "Whether the node is drained"),
    "master_candidate": ("MasterC", "bool", "Whether the node is a master candidate"),
    "master_capable": ("MasterCapable", "bool", "Whether the node may become a master candidate"),
    "vm_capable": ("VMCapable", "bool", "Whether the node can host instances"),
    "master": ("IsMaster", "bool", "Whether the node is the master"),
    "role": ("Role", "text", "Node role: M master, C candidate, R regular, D drained, "
                             "O offline"),
    "pip": ("PrimaryIP", "text", "Primary IP address"),
    "sip": ("SecondaryIP", "text", "Secondary (replication) IP address"),
    "group": ("Group", "text", "Node group name"),
    "group.uuid": ("GroupUUID", "text", "Node group UUID"),
    "ndparams": ("NodeParameters", "other", "Node parameters, filled"),
    "custom_ndparams": ("CustomNodeParameters", "other", "Node parameters set on the node"),
    "pinst_cnt": ("Pinst", "number", "How many instances have this node as primary"),
    "sinst_cnt": ("Sinst", "number", "How many instances have this node as secondary"),
    "pinst_list": ("PriInstances", "other", "Instances with this node as primary"),
    "sinst_list": ("SecInstances", "other", "Instances with this node as secondary"),
    "mtotal": ("MTotal", "unit", "Total memory of the node (MiB)"),
    "mnode": ("MNode", "unit", "Memory the node itself uses (MiB)"),
    "mfree": ("MFree", "unit", "Memory free for instances (MiB)"),
    "dtotal": ("DTotal", "unit", "Size of the node's default storage unit (MiB)"),
    "dfree": ("DFree", "unit", "Free space of the node's default storage unit (MiB)"),
    "sptotal": ("SpTotal", "number", "Spindles of the volume group (exclusive storage)"),
    "spfree": ("SpFree", "number", "Free spindles of the volume group (exclusive storage)"),
    "ctotal": ("CTotal", "number", "Logical CPUs"),
    "cnos": ("CNOs", "number", "Logical CPUs the node's own OS uses"),
    "cnodes": ("CNodes", "number", "NUMA domains"),
    "csockets": ("CSockets", "number", "CPU sockets"),
    "bootid": ("BootID", "text", "Renewed at every boot of the node"),
    "tags": ("Tags", "other", "Tags"),
    "serial_no": ("SerialNo", "number", "Serial number of the node's record"),
    "ctime": ("CTime", "timestamp", "Creation time"),
    "mtime": ("MTime", "timestamp", "Modification time"),
}

INSTANCE_FIELDS: dict[str, FieldDef] = {
    "name": ("Instance", "text", "Instance name"),
    "uuid": ("UUID", "text", "Instance UUID"),
    "os": ("OS", "text", "Operating system (name+variant)"),
    "hypervisor": ("Hypervisor", "text", "Hypervisor"),
    "pnode": ("Primary_node", "text", "Primary node"),
    "snodes": ("Secondary_Nodes", "other", "Secondary nodes"),
    "admin_state": ("InstanceState", "text", "Desired state: up, down or offline"),
    "admin_state_source": ("InstanceStateSource", "text",
                           "Who last set the desired state: admin or user"),
    "admin_up": ("Autostart", "bool", "Whether the desired state is up"),
    "disks_active": ("DisksActive", "bool", "Whether the disks should be active"),
    "disk_template": ("Disk_template", "text", "Disk template"),
    "disk_usage": ("DiskUsage", "unit", "Disk space the instance takes on each node (MiB)"),
    "disk.sizes": ("Disk_sizes", "other", "Disk sizes (MiB)"),
    "disk.spindles": ("Disk_spindles", "other", "Disk spindles"),
    "disk.names": ("Disk_names", "other", "Disk names"),
    "disk.uuids": ("Disk_UUIDs", "other", "Disk UUIDs"),
    "nic.ips": ("NIC_IPs", "other", "NIC IP addresses"),
    "nic.macs": ("NIC_MACs", "other", "NIC MAC addresses"),
    "nic.modes": ("NIC_modes", "other", "NIC modes"),
    "nic.links": ("NIC_links", "other", "NIC links"),
    "nic.bridges": ("NIC_bridges", "other", "NIC bridges (bridged NICs)"),
    "nic.networks": ("NIC_networks", "other", "NIC networks"),
    "nic.networks.names": ("NIC_networks_names", "other", "NIC network names"),
    "nic.names": ("NIC_Names", "other", "NIC names"),
    "nic.uuids": ("NIC_UUIDs", "other", "NIC UUIDs"),
    "network_port": ("Network_port", "other", "Console network port, when the instance has one"),
    "beparams": ("BackendParameters", "other", "Backend parameters, filled"),
    "hvparams": ("HypervisorParameters", "other", "Hypervisor parameters, filled"),
    "osparams": ("OpSysParameters", "other", "OS parameters, filled"),
    "custom_beparams": ("CustomBackendParameters", "other", "Backend parameters set on it"),
    "custom_hvparams": ("CustomHypervisorParameters", "other",
                        "Hypervisor parameters set on it"),
    "custom_osparams": ("CustomOpSysParameters", "other", "OS parameters set on it"),
    "custom_nicparams": ("CustomNicParameters", "other", "NIC parameters set on each NIC"),
    "oper_state": ("Running", "bool", "Whether the instance runs"),
    "oper_ram": ("Memory", "unit", "Memory the running instance has (MiB)"),
    "oper_vcpus": ("VCPUs", "number", "vCPUs the running instance has"),
    "status": ("Status", "text", "running, ADMIN_down, ADMIN_offline, ERROR_up, ERROR_down, "
                                 "ERROR_wrongnode, ERROR_nodedown, ERROR_nodeoffline or "
                                 "USER_down"),
    "tags": ("Tags", "other", "Tags"),
    "serial_no": ("SerialNo", "number", "Serial number of the instance's record"),
    "ctime": ("CTime", "timestamp", "Creation time"),
    "mtime": ("MTime", "timestamp", "Modification time"),
}


def definition(name: str, table: dict[str, FieldDef]) -> dict[str, str]:
    if name in table:
        title, kind, doc = table[name]
        return {"name": name, "title": title, "kind": kind, "doc": doc}
    return {"name": name, "title": name, "kind": "unknown", "doc": f"Unknown field '{name}'"}


def _node_row(config: model.ConfigData, node: model.Node, live: Snapshot
              ) -> dict[str, livefields.Result]:
    view = views.node_view(config, node, live)
    group = config.nodegroups.get(node.group)
    view.update(master=node.uuid == config.cluster.master_node,
                group=group.name if group else None, custom_ndparams=dict(node.ndparams))
    return {**_normal(view), **livefields.node_fields(config, node, live)}


def _instance_row(config: model.ConfigData, inst: model.Instance, live: Snapshot
                  ) -> dict[str, livefields.Result]:
    view = views.instance_view(config, inst, live)
    view["beparams"] = config.filled_beparams(inst)  # /2/query: without RAPI's `memory`
    return {**_normal(view), **livefields.instance_fields(config, inst, live)}


def _normal(view: dict[str, Any]) -> dict[str, livefields.Result]:
    """Config fields: normal, a missing single value unavailable (Ganeti's rsMaybeUnavail)."""
    return {k: (livefields.RS_UNAVAIL, None) if v is None else (livefields.RS_NORMAL, v)
            for k, v in view.items()}


RowFn = Callable[[model.ConfigData, Any, Snapshot], dict[str, livefields.Result]]
RESOURCES: dict[str, tuple[dict[str, FieldDef], RowFn, bool]] = {
    # resource -> (fields, row builder, whether rows are instances)
    "node": (NODE_FIELDS, _node_row, False),
    "instance": (INSTANCE_FIELDS, _instance_row, True),
}


def answer(config: model.ConfigData, resource: str, fields: Sequence[str],
           live: Snapshot) -> dict[str, Any]:
    table, row_of, instances = RESOURCES[resource]
    objects: list[Any] = sorted((config.instances if instances else config.nodes).values(),
                                key=lambda o: o.name)
    data = []
    for obj in objects:
        row = row_of(config, obj, live)
        data.append([list(row[f]) if f in table and f in row else
                     [livefields.RS_UNKNOWN if f not in table else livefields.RS_UNAVAIL, None]
                     for f in fields])
    return {"fields": [definition(f, table) for f in fields], "data": data}


def split_fields(text: str) -> list[str]:
    return [f.strip() for f in text.split(",") if f.strip()]


def add_routes(router: web.UrlDispatcher) -> None:
    from herder.masterd import rapi

    def resource_of(request: web.Request) -> str:
        name = request.match_info["resource"]
        if name not in RESOURCES:
            raise rapi.RapiHttpError(
                404, f"herder's query resource answers {' and '.join(sorted(RESOURCES))}, "
                     f"not {name!r}")
        return name

    # Ganeti lets readers query with GET and PUT; herder's rule for every method but GET is
    # rapi-write (docs/security.md), so readers query with GET
    @rapi.ROUTES.allow(access.RAPI_READ)
    async def query_get(request: web.Request) -> web.Response:
        resource = resource_of(request)
        if "fields" not in request.query:
            raise rapi.RapiHttpError(400, "Missing 'fields' query argument")
        config = rapi.config_of(request)
        return rapi.ok(answer(config, resource, split_fields(request.query["fields"]),
                              await rapi.live_of(request, config)))

    @rapi.ROUTES.allow(access.RAPI_WRITE)
    async def query_put(request: web.Request) -> web.Response:
        resource = resource_of(request)
        body = rapi.body_dict(await rapi.body_of(request, default={}))
        if body.get("qfilter") is not None or body.get("filter") is not None:
            raise rapi.RapiHttpError(400, "herder's query resource takes no filter; ask for "
                                          "the fields and filter the rows")
        fields = body.get("fields")
        if fields is None:
            if "fields" not in request.query:
                raise rapi.RapiHttpError(400, "Missing 'fields' query argument")
            fields = split_fields(request.query["fields"])
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise rapi.RapiHttpError(400, "'fields' must be a list of field names")
        config = rapi.config_of(request)
        return rapi.ok(answer(config, resource, fields, await rapi.live_of(request, config)))

    @rapi.ROUTES.allow(access.RAPI_READ)
    async def query_fields(request: web.Request) -> web.Response:
        resource = resource_of(request)
        table = RESOURCES[resource][0]
        names = split_fields(request.query["fields"]) if "fields" in request.query \
            else sorted(table)
        return rapi.ok({"fields": [definition(f, table) for f in names]})

    router.add_get("/2/query/{resource}", query_get)
    router.add_put("/2/query/{resource}", query_put)
    router.add_get("/2/query/{resource}/fields", query_fields)
