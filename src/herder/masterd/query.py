"""The answers of Ganeti's query resource for nodes, instances, node groups and networks (its
routes, `GET /2/query/{node,instance,group,network}?fields=a,b`, `PUT` with `{"fields":
[...]}`, and `GET /2/query/{resource}/fields[?fields=...]`, are `masterd.rapi.query`'s).

The answer is Ganeti's `{"fields": [{"name", "title", "kind", "doc"}], "data": [[[status,
value], ...], ...]}`, one row per object in name order; each value comes with Ganeti's result
status (`livefields.RS_*`): a live figure of an offline node is RS_OFFLINE, of a node that did
not answer RS_NODATA, an unknown field RS_UNKNOWN (its definition's kind `unknown`). The fields
are those of the bulk answers (Ganeti's `N_FIELDS`, `I_FIELDS`, `G_FIELDS`), Ganeti's
per-parameter backend fields (`be/vcpus`, `be/maxmem`, ...) and a few more (`bootid`, `master`,
`group`, `pinst_cnt` of a group, herder's `custom_sip`); Ganeti's other per-parameter fields
(`hv/…`, `ndp/…`) and per-index ones (`disk.size/0`, `nic.ip/0`) are not offered, nor query
filters (compat row 47). An answer computes only the fields it is asked for (the CLI's lists
take their rows from here: docs/scale.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgspec

from herder.core import model, params, roles
from herder.core.jsonvalue import JsonObject
from herder.masterd import livefields, views
from herder.masterd.livecache import EMPTY, Snapshot

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
    # herder's: Ganeti's nodes always have a secondary IP, herder's may have none
    "custom_sip": ("CustomSecondaryIP", "text",
                   "Secondary IP address as set on the node (none: the primary IP serves)"),
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


# Ganeti's network query fields (query._BuildNetworkFields, its NETWORK_SIMPLE and _STATS ones)
NETWORK_FIELDS: dict[str, FieldDef] = {
    "name": ("Network", "text", "Name"),
    "uuid": ("UUID", "text", "Network UUID"),
    "network": ("Subnet", "text", "IPv4 subnet"),
    "gateway": ("Gateway", "text", "IPv4 gateway"),
    "network6": ("IPv6Subnet", "text", "IPv6 subnet"),
    "gateway6": ("IPv6Gateway", "text", "IPv6 gateway"),
    "mac_prefix": ("MacPrefix", "text", "MAC address prefix"),
    "free_count": ("FreeCount", "number", "Number of available addresses"),
    "reserved_count": ("ReservedCount", "number", "Number of reserved addresses"),
    "map": ("Map", "text", "Actual mapping"),
    "external_reservations": ("ExternalReservations", "text", "External reservations"),
    "group_cnt": ("NodeGroups", "number", "Number of nodegroups"),
    "group_list": ("GroupList", "other",
                   "List of nodegroups (group name, NIC mode, NIC link, NIC VLAN)"),
    "inst_cnt": ("Instances", "number", "Number of instances"),
    "inst_list": ("InstanceList", "other", "List of instances"),
    "tags": ("Tags", "other", "Tags"),
    "serial_no": ("SerialNo", "number", "Network object serial number"),
    "ctime": ("CTime", "timestamp", "Creation timestamp"),
    "mtime": ("MTime", "timestamp", "Modification timestamp"),
}


# Ganeti's per-parameter backend fields (`be/NAME`): titles from its BES_PARAMETER_TITLES,
# kinds from the parameters' types, `be/NAME` where Ganeti has no title
BE_KINDS = {"always_failover": "bool", "auto_balance": "bool", "maxmem": "unit",
            "minmem": "unit", "spindle_use": "number", "vcpus": "number"}
BE_TITLES = {"auto_balance": "Auto_balance", "maxmem": "ConfigMaxMem", "minmem": "ConfigMinMem",
             "vcpus": "ConfigVCPUs"}
INSTANCE_FIELDS.update({
    f"be/{name}": (BE_TITLES.get(name, f"be/{name}"), kind, f'The "{name}" backend parameter')
    for name, kind in BE_KINDS.items()})

GROUP_FIELDS: dict[str, FieldDef] = {
    "name": ("Group", "text", "Group name"),
    "uuid": ("UUID", "text", "Group UUID"),
    "alloc_policy": ("AllocPolicy", "text", "Allocation policy for group"),
    "node_cnt": ("Nodes", "number", "Number of nodes"),
    "node_list": ("NodeList", "other", "List of nodes"),
    "pinst_cnt": ("Instances", "number", "Number of primary instances"),
    "pinst_list": ("InstanceList", "other", "List of primary instances"),
    "ipolicy": ("InstancePolicy", "other", "Instance policy limitations (merged)"),
    "custom_ipolicy": ("CustomInstancePolicy", "other", "Custom instance policy limitations"),
    "ndparams": ("NDParams", "other", "Node parameters"),
    "custom_ndparams": ("CustomNDParams", "other", "Custom node parameters"),
    "diskparams": ("DiskParameters", "other", "Disk parameters (merged)"),
    "custom_diskparams": ("CustomDiskParameters", "other", "Custom disk parameters"),
    "tags": ("Tags", "other", "Tags"),
    "serial_no": ("SerialNo", "number", "Serial number of the group's record"),
    "ctime": ("CTime", "timestamp", "Creation time"),
    "mtime": ("MTime", "timestamp", "Modification time"),
}


def definition(name: str, table: dict[str, FieldDef]) -> dict[str, str]:
    if name in table:
        title, kind, doc = table[name]
        return {"name": name, "title": title, "kind": kind, "doc": doc}
    return {"name": name, "title": name, "kind": "unknown", "doc": f"Unknown field '{name}'"}


# ---- how a row's values are found ------------------------------------------------------------
# A field is either simple (one cheap look at the object and the config's indexes) or one of
# a set computed together (the live figures, the filled backend parameters, and the whole
# view, which holds every field): an answer computes a set only when it asks for one of its
# fields, so `node list`'s or `instance list`'s rows at 10,000 instances cost their fields.

Results = dict[str, livefields.Result]
QueryObject = model.Node | model.Instance | model.NodeGroup | model.Network  # what a query lists
ColumnFn = Callable[[model.ConfigData, Sequence[Any]], list[Any]]  # a field of each object
RowFn = Callable[[Any], Results]
# a set's rows for one answer: what all rows share (the cluster's parameters, ...) is found
# once, then each object's fields
SetFn = Callable[[model.ConfigData, Snapshot], RowFn]


def _normal(view: Mapping[str, object]) -> Results:
    """Config fields: normal, a missing single value unavailable (Ganeti's rsMaybeUnavail)."""
    return {k: (livefields.RS_UNAVAIL, None) if v is None else (livefields.RS_NORMAL, v)
            for k, v in view.items()}


def _node_views(config: model.ConfigData, live: Snapshot) -> RowFn:
    def row(node: model.Node) -> Results:
        view = views.node_view(config, node, live)
        view.update(master=node.uuid == config.cluster.master_node,
                    group=_group_name(config, node), custom_ndparams=dict(node.ndparams),
                    custom_sip=node.secondary_ip)
        return {**_normal(view), **livefields.node_fields(config, node, live)}

    return row


def _instance_views(config: model.ConfigData, live: Snapshot) -> RowFn:
    backend = _backend_params(config, live)

    def row(inst: model.Instance) -> Results:
        view = views.instance_view(config, inst, live)
        view["beparams"] = config.filled_beparams(inst)  # /2/query: without RAPI's `memory`
        return {**_normal(view), **backend(inst), **livefields.instance_fields(config, inst,
                                                                              live)}

    return row


def _backend_params(config: model.ConfigData, _live: Snapshot) -> RowFn:
    # the cluster's layer once per answer (model.ConfigData.filled_beparams' layers)
    cluster = params.fill(params.BE_FAMILY.defaults(), config.cluster.beparams)

    rows: dict[tuple[tuple[str, Any], ...], Results] = {}  # instances share their overrides

    def row(inst: model.Instance) -> Results:
        key = tuple(sorted(inst.beparams.items()))
        found = rows.get(key)
        if found is None:
            found = rows[key] = _normal({f"be/{name}": value for name, value in
                                         params.fill(cluster, inst.beparams).items()})
        return found

    return row


def _group_pinst_uuids(config: model.ConfigData, group: model.NodeGroup) -> list[str]:
    index = config.index()
    return [uuid for node in index.group_nodes.get(group.uuid, ())
            for uuid in index.primary_uuids(node)]


def _group_views(config: model.ConfigData, _live: Snapshot) -> RowFn:
    def row(group: model.NodeGroup) -> Results:
        view = views.group_view(config, group)
        primaries = sorted(config.instances[uuid].name for uuid in
                           _group_pinst_uuids(config, group) if uuid in config.instances)
        view.update(pinst_cnt=len(primaries), pinst_list=primaries)
        return _normal(view)

    return row


def _network_views(config: model.ConfigData, _live: Snapshot) -> RowFn:
    return lambda net: _normal(views.network_view(config, net))


def _node_live(config: model.ConfigData, live: Snapshot) -> RowFn:
    return lambda node: livefields.node_fields(config, node, live)


def _instance_live(config: model.ConfigData, live: Snapshot) -> RowFn:
    return lambda inst: livefields.instance_fields(config, inst, live)


def _attr(name: str) -> ColumnFn:
    """A column of one attribute of each object."""
    get = attrgetter(name)
    return lambda _config, objects: list(map(get, objects))


def _per_object(value: Callable[[model.ConfigData, Any], Any]) -> ColumnFn:
    return lambda config, objects: [value(config, obj) for obj in objects]


def _tags(_config: model.ConfigData, objects: Sequence[QueryObject]) -> list[list[str]]:
    return [list(obj.tags) for obj in objects]


def _group_name(config: model.ConfigData, node: model.Node) -> str | None:
    group = config.nodegroups.get(node.group)
    return group.name if group else None


def _node_counts(which: str) -> ColumnFn:
    def column(config: model.ConfigData, nodes: Sequence[model.Node]) -> list[int]:
        table = getattr(config.index(), which)
        return [len(table.get(node.uuid, ())) for node in nodes]

    return column


NODE_SIMPLE: dict[str, ColumnFn] = {
    **{name: _attr(name) for name in ("name", "uuid", "offline", "drained", "master_candidate",
                                      "master_capable", "vm_capable", "serial_no", "ctime",
                                      "mtime")},
    "master": _per_object(lambda c, n: n.uuid == c.cluster.master_node),
    "role": _per_object(lambda c, n: roles.node_role(n, c.cluster.master_node)),
    "pip": _attr("primary_ip"),
    "sip": _per_object(lambda _c, n: n.secondary_ip or n.primary_ip),
    "custom_sip": _attr("secondary_ip"),
    "group": _per_object(_group_name),
    "group.uuid": _attr("group"),
    "pinst_cnt": _node_counts("primaries"),
    "sinst_cnt": _node_counts("secondaries"),
    "tags": _tags,
}


def _node_names(config: model.ConfigData, insts: Sequence[model.Instance],
                which: str) -> list[str] | list[list[str]]:
    names = {uuid: node.name for uuid, node in config.nodes.items()}
    facts = config.index().facts  # the instances' disks walked once, by the index
    if which == "primary":
        return [names.get(inst.primary_node, inst.primary_node) for inst in insts]
    return [[names.get(uuid, uuid) for uuid in
             (facts[inst.uuid].secondaries if inst.uuid in facts else inst.secondary_nodes)]
            for inst in insts]


INSTANCE_SIMPLE: dict[str, ColumnFn] = {
    **{name: _attr(name) for name in ("name", "uuid", "os", "hypervisor", "admin_state",
                                      "admin_state_source", "disks_active", "disk_template",
                                      "network_port", "serial_no", "ctime", "mtime")},
    "pnode": lambda c, insts: _node_names(c, insts, "primary"),
    "snodes": lambda c, insts: _node_names(c, insts, "secondary"),
    "admin_up": _per_object(lambda _c, i: i.admin_state == "up"),
    "tags": _tags,
}


def _group_counts(config: model.ConfigData, groups: Sequence[model.NodeGroup],
                  which: str) -> list[int]:
    index = config.index()
    return [len(index.group_nodes.get(g.uuid, ())) if which == "nodes" else
            len(_group_pinst_uuids(config, g)) for g in groups]


GROUP_SIMPLE: dict[str, ColumnFn] = {
    **{name: _attr(name) for name in ("name", "uuid", "alloc_policy", "serial_no", "ctime",
                                      "mtime")},
    "node_cnt": lambda c, groups: _group_counts(c, groups, "nodes"),
    "pinst_cnt": lambda c, groups: _group_counts(c, groups, "instances"),
    "tags": _tags,
}


NETWORK_SIMPLE: dict[str, ColumnFn] = {
    **{name: _attr(name) for name in ("name", "uuid", "network", "gateway", "network6",
                                      "gateway6", "mac_prefix", "serial_no", "ctime", "mtime")},
    "tags": _tags,
}


@dataclass(frozen=True)
class FieldSet:
    names: frozenset[str]
    make: SetFn
    live: bool  # whether its values come from the nodes' live figures


@dataclass(frozen=True)
class Resource:
    fields: dict[str, FieldDef]
    objects: Callable[[model.ConfigData], Iterable[Any]]
    simple: dict[str, ColumnFn]
    # fields computed together, tried in order; the last set is the whole view (every field)
    sets: tuple[FieldSet, ...]


RESOURCES: dict[str, Resource] = {
    "node": Resource(NODE_FIELDS, lambda c: c.nodes.values(), NODE_SIMPLE, (
        FieldSet(frozenset(livefields.NODE_LIVE_FIELDS), _node_live, True),
        FieldSet(frozenset(NODE_FIELDS), _node_views, True))),
    "instance": Resource(INSTANCE_FIELDS, lambda c: c.instances.values(), INSTANCE_SIMPLE, (
        FieldSet(frozenset(livefields.INSTANCE_LIVE_FIELDS), _instance_live, True),
        FieldSet(frozenset(f"be/{name}" for name in BE_KINDS), _backend_params, False),
        FieldSet(frozenset(INSTANCE_FIELDS), _instance_views, True))),
    "group": Resource(GROUP_FIELDS, lambda c: c.nodegroups.values(), GROUP_SIMPLE, (
        FieldSet(frozenset(GROUP_FIELDS), _group_views, False),)),
    "network": Resource(NETWORK_FIELDS, lambda c: c.networks.values(), NETWORK_SIMPLE, (
        FieldSet(frozenset(NETWORK_FIELDS), _network_views, False),)),
}


def needed_sets(spec: Resource, fields: Sequence[str]) -> list[FieldSet]:
    """The sets an answer with `fields` computes: for each field that is not simple, the
    first set holding it; only the whole view when it is among them (it holds every field)."""
    needed: list[FieldSet] = []
    for name in fields:
        found = next((fs for fs in spec.sets if name in fs.names), None)
        if name not in spec.simple and found is not None and found not in needed:
            needed.append(found)
    whole = spec.sets[-1]
    return [whole] if whole in needed else needed


def needs_live(resource: str, fields: Sequence[str]) -> bool:
    """Whether an answer with `fields` shows live figures (else no node is asked)."""
    return any(fs.live for fs in needed_sets(RESOURCES[resource], fields))


def _columns(config: model.ConfigData, spec: Resource, objects: Sequence[QueryObject],
             fields: Sequence[str], live: Snapshot) -> list[list[livefields.Result]]:
    """The asked fields of `objects`, a column per field (a simple field's column in one pass
    over the objects)."""
    needed = needed_sets(spec, fields)
    computed: list[Results] = [{} for _ in objects] if needed else []
    for field_set in needed:
        row_of = field_set.make(config, live)
        for results, obj in zip(computed, objects, strict=True):
            results.update(row_of(obj))
    unavailable = (livefields.RS_UNAVAIL, None)
    columns: list[list[livefields.Result]] = []
    for name in fields:
        column = spec.simple.get(name)
        if column is not None:
            columns.append([unavailable if value is None else (livefields.RS_NORMAL, value)
                            for value in column(config, objects)])
        elif name in spec.fields:
            columns.append([results.get(name, unavailable) for results in computed])
        else:
            columns.append([(livefields.RS_UNKNOWN, None)] * len(objects))
    return columns


def _sorted_objects(config: model.ConfigData, spec: Resource) -> list[QueryObject]:
    return sorted(spec.objects(config), key=attrgetter("name"))


def answer(config: model.ConfigData, resource: str, fields: Sequence[str],
           live: Snapshot) -> JsonObject:
    """Ganeti's query answer: the asked fields of every object, by name."""
    spec = RESOURCES[resource]
    objects = _sorted_objects(config, spec)
    columns = _columns(config, spec, objects, fields, live)
    return {"fields": [definition(f, spec.fields) for f in fields],
            "data": list(map(list, zip(*columns, strict=True))) if columns else
            [[] for _ in objects]}


# ---- the instance list's rows, kept encoded -----------------------------------------------
# `herder instance list` (and any client asking instance fields that are neither the whole
# view's nor many) asks the same fields again and again: each instance's config fields are
# encoded once per object and kept, only the live fields are made per answer (from the few
# distinct `livefields.run_keys`). At 10,000 instances that is the run states and a join.

_ENCODE = msgspec.json.Encoder().encode
# A row kept encoded: its config fields with the separators and brackets around them, in the
# pieces that go between its runs of live fields: `,[` + config fields + `,` | live fields |
# `,` + config fields + `]` (a row is written after a comma; the first one without it).
Pieces = tuple[bytes, ...]


def _runs(fields: Sequence[str]) -> list[tuple[bool, list[str]]]:
    """`fields` in runs of consecutive live (True) or config (False) fields."""
    runs: list[tuple[bool, list[str]]] = []
    for name in fields:
        is_live = name in livefields.INSTANCE_LIVE_FIELDS
        if runs and runs[-1][0] == is_live:
            runs[-1][1].append(name)
        else:
            runs.append((is_live, [name]))
    return runs


def _encoded_run(pairs: Sequence[livefields.Result]) -> bytes:
    """Results as JSON without the brackets around them: `[0,"a"],[3,null]`."""
    return _ENCODE(pairs)[1:-1]


def _pieces(runs: Sequence[tuple[bool, Sequence[livefields.Result]]]) -> Pieces:
    """A row's pieces (`Pieces`) from its runs of config results (live runs: their place)."""
    pieces: list[bytes] = []
    piece = bytearray(b",[")
    for number, (is_live, results) in enumerate(runs):
        if not is_live:
            piece += _encoded_run(results)
            continue
        if number > 0:
            piece += b","
        pieces.append(bytes(piece))
        piece = bytearray(b"," if number < len(runs) - 1 else b"")
    piece += b"]"
    pieces.append(bytes(piece))
    return tuple(pieces)


class InstanceRows:
    """masterd's encoded rows of the instance query for the last few field lists asked. An
    instance's config fields are kept until the object changes (a change replaces the
    objects it touched), or until the cluster, a group, a network or a node does (names of
    nodes, filled parameters): then all are dropped, as `views.InstanceViews` does."""

    KEEP = 2  # field lists kept (each ~4 MB at 10,000 instances for the CLI's list)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: tuple[Any, ...] = ()
        self._kept: dict[tuple[str, ...], dict[str, tuple[model.Instance, Pieces]]] = {}

    @staticmethod
    def takes(fields: Sequence[str]) -> bool:
        """Whether the rows of `fields` are kept: not when one needs the whole view (every
        field's; its rows are big)."""
        return RESOURCES["instance"].sets[-1] not in needed_sets(RESOURCES["instance"], fields)

    def _rows(self, config: model.ConfigData, objects: Sequence[model.Instance],
              fields: Sequence[str], runs: list[tuple[bool, list[str]]]) -> list[Pieces]:
        """The kept rows of `objects`, made for those that changed."""
        spec = RESOURCES["instance"]
        context = views.instance_context(config)
        with self._lock:
            if not views.same_context(context, self._context):
                self._context, self._kept = context, {}
            kept = self._kept.pop(tuple(fields), None) or {}
            self._kept[tuple(fields)] = kept  # the most recent last
            while len(self._kept) > self.KEEP:
                del self._kept[next(iter(self._kept))]
            missing = [inst for inst in objects
                       if (found := kept.get(inst.uuid)) is None or found[0] is not inst]
            if missing:
                static = [name for is_live, names in runs if not is_live for name in names]
                columns = iter(_columns(config, spec, missing, static, EMPTY))
                # the config fields' columns in their runs; a live run stays empty
                run_columns = [(is_live, [] if is_live else
                                [next(columns) for _ in names]) for is_live, names in runs]
                for row, inst in enumerate(missing):
                    kept[inst.uuid] = (inst, _pieces(
                        [(is_live, [column[row] for column in run_column])
                         for is_live, run_column in run_columns]))
            if len(kept) > len(objects) + 100:  # removed instances
                for uuid in [u for u in kept if u not in config.instances]:
                    del kept[uuid]
            return [kept[inst.uuid][1] for inst in objects]

    def encode(self, config: model.ConfigData, fields: Sequence[str],
               live: Snapshot) -> bytearray:
        spec = RESOURCES["instance"]
        runs = _runs(fields)
        objects = sorted(config.instances.values(), key=attrgetter("name"))
        rows = self._rows(config, objects, fields, runs)
        out = bytearray(b'{"fields":')
        out += _ENCODE([definition(f, spec.fields) for f in fields])
        out += b',"data":['
        start = len(out)
        live_runs = [names for is_live, names in runs if is_live]
        if not live_runs:
            for (row,) in rows:
                out += row
        else:
            encoded: dict[livefields.RunKey, list[bytes]] = {}  # a few dozen keys
            for pieces, run_key in zip(rows, livefields.run_keys(config, objects, live),
                                       strict=True):
                live_pieces = encoded.get(run_key)
                if live_pieces is None:
                    results = livefields.fields_of(run_key)
                    live_pieces = encoded[run_key] = [
                        _encoded_run([results[name] for name in names]) for names in live_runs]
                for piece, live_piece in zip(pieces, live_pieces, strict=False):  # one piece more
                    out += piece
                    out += live_piece
                out += pieces[-1]
        if len(out) > start:
            del out[start]  # the first row's comma
        out += b"]}"
        return out


INSTANCE_ROWS = InstanceRows()


def encode_answer(config: model.ConfigData, resource: str, fields: Sequence[str],
                  live: Snapshot) -> bytes | bytearray:
    """`answer` as JSON, as masterd serves it: the instance rows from `INSTANCE_ROWS`."""
    if resource == "instance" and InstanceRows.takes(fields):
        return INSTANCE_ROWS.encode(config, fields, live)
    return _ENCODE(answer(config, resource, fields, live))


# Ganeti's export resource (query._BuildExportFields): a row per (node, export); a node that
# could not be asked has one row without an export (RS_NODATA)
EXPORT_FIELDS: dict[str, FieldDef] = {
    "node": ("Node", "text", "Node name"),
    "export": ("Export", "text", "Export name"),
}
RS_NORMAL, RS_UNKNOWN, RS_NODATA = 0, 1, 2


def export_answer(listed: Mapping[str, list[str] | None], fields: Sequence[str]
                  ) -> dict[str, object]:
    """The query answer of the export resource from each node's exports (None: the node
    could not be asked)."""
    rows: list[list[tuple[int, object]]] = []
    for node, exports in sorted(listed.items()):
        for export in (exports if exports is not None else [None]):
            values = {"node": (RS_NORMAL, node),
                      "export": (RS_NODATA, None) if export is None else (RS_NORMAL, export)}
            rows.append([values.get(f, (RS_UNKNOWN, None)) for f in fields])
    return {"fields": [definition(f, EXPORT_FIELDS) for f in fields], "data": rows}


def split_fields(text: str) -> list[str]:
    return [f.strip() for f in text.split(",") if f.strip()]
