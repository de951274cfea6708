"""The node query resource (`/2/query/node`, `herder node list`): Ganeti 3.0's node fields with
its titles and descriptions (tests/data/ganeti-query holds the definitions Ganeti's server
gives; `tests/unit/test_query_fields.py` compares), herder's `custom_sip`, and the live
figures of `masterd.livefields`."""

from __future__ import annotations

from collections.abc import Sequence

from herder.core import model, params, roles
from herder.masterd import livefields
from herder.masterd.livecache import Snapshot
from herder.masterd.queries.fields import (
    BOOL,
    NUMBER,
    OTHER,
    TEXT,
    TIMESTAMP,
    UNIT,
    ColumnFn,
    FieldDef,
    FieldSet,
    Objects,
    Resource,
    Results,
    RowFn,
    attr,
    normal,
    parameter_fields,
    per_object,
    tags,
)

# Ganeti's NDS_PARAMETER_TITLES
ND_TITLES = {"exclusive_storage": "ExclusiveStorage", "oob_program": "OutOfBandProgram",
             "ovs": "OpenvSwitch", "ovs_link": "OpenvSwitchLink", "ovs_name": "OpenvSwitchName",
             "spindle_count": "SpindleCount"}
ND_FIELDS = parameter_fields("ndp", params.ND_FAMILY, ND_TITLES, "node")

FIELDS: dict[str, FieldDef] = {
    "bootid": FieldDef("BootID", TEXT, "Random UUID renewed for each system reboot, can be "
                       "used for detecting reboots by tracking changes"),
    "cnodes": FieldDef("CNodes", NUMBER, "Number of NUMA domains on node (if exported by "
                       "hypervisor)"),
    "cnos": FieldDef("CNOs", NUMBER, "Number of logical processors used by the node OS (dom0 "
                     "for Xen)"),
    "csockets": FieldDef("CSockets", NUMBER, "Number of physical CPU sockets (if exported by "
                         "hypervisor)"),
    "ctime": FieldDef("CTime", TIMESTAMP, "Creation timestamp"),
    "ctotal": FieldDef("CTotal", NUMBER, "Number of logical processors"),
    "custom_ndparams": FieldDef("CustomNodeParameters", OTHER, "Custom node parameters"),
    # herder's: Ganeti's nodes always have a secondary IP, herder's may have none
    "custom_sip": FieldDef("CustomSecondaryIP", TEXT, "Secondary IP address as set on the "
                           "node (none: the primary IP serves)"),
    "dfree": FieldDef("DFree", UNIT, "Available storage space on storage unit"),
    "disk_state": FieldDef("DiskState", OTHER, "Disk state"),
    "drained": FieldDef("Drained", BOOL, "Whether node is drained"),
    "dtotal": FieldDef("DTotal", UNIT, "Total storage space on storage unit for instance disk "
                       "allocation"),
    "group": FieldDef("Group", TEXT, "Node group"),
    "group.uuid": FieldDef("GroupUUID", TEXT, "UUID of node group"),
    "herder_version": FieldDef("HerderVersion", TEXT, "The herder build the node's noded "
                               "runs"),
    "hv_state": FieldDef("HypervisorState", OTHER, "Hypervisor state"),
    # herder's: the node's KVM probe (compat K9)
    "kvm_accel": FieldDef("KvmAccel", TEXT, "How KVM instances run on the node: kvm "
                          "(hardware virtualization) or tcg (QEMU's emulation)"),
    "kvm_reason": FieldDef("KvmReason", TEXT, "Why the node's KVM probe decided so"),
    "master": FieldDef("IsMaster", BOOL, "Whether node is master"),
    "master_candidate": FieldDef("MasterC", BOOL, "Whether node is a master candidate"),
    "master_capable": FieldDef("MasterCapable", BOOL, "Whether node can become a master "
                               "candidate"),
    "mfree": FieldDef("MFree", UNIT, "Memory available for instance allocations"),
    "mnode": FieldDef("MNode", UNIT, "Amount of memory used by node (dom0 for Xen)"),
    "mtime": FieldDef("MTime", TIMESTAMP, "Modification timestamp"),
    "mtotal": FieldDef("MTotal", UNIT, "Total amount of memory of physical machine"),
    "name": FieldDef("Node", TEXT, "Node name", hostname=True),
    **ND_FIELDS,
    "ndparams": FieldDef("NodeParameters", OTHER, "Merged node parameters"),
    "offline": FieldDef("Offline", BOOL, "Whether node is marked offline"),
    "pinst_cnt": FieldDef("Pinst", NUMBER, "Number of instances with this node as primary"),
    "pinst_list": FieldDef("PriInstances", OTHER, "List of instances with this node as "
                           "primary"),
    "pip": FieldDef("PrimaryIP", TEXT, "Primary IP address"),
    "powered": FieldDef("Powered", BOOL, "Whether node is thought to be powered on"),
    "role": FieldDef("Role", TEXT, 'Node role; "M" for master, "C" for master candidate, "R" '
                     'for regular, "D" for drained, "O" for offline'),
    "serial_no": FieldDef("SerialNo", NUMBER, "Node object serial number, incremented on each "
                          "modification"),
    "sinst_cnt": FieldDef("Sinst", NUMBER, "Number of instances with this node as secondary"),
    "sinst_list": FieldDef("SecInstances", OTHER, "List of instances with this node as "
                           "secondary"),
    "sip": FieldDef("SecondaryIP", TEXT, "Secondary IP address"),
    "spfree": FieldDef("SpFree", NUMBER, "Available spindles in volume group (exclusive "
                       "storage only)"),
    "sptotal": FieldDef("SpTotal", NUMBER, "Total spindles in volume group (exclusive storage "
                        "only)"),
    "tags": FieldDef("Tags", OTHER, "Tags"),
    "uuid": FieldDef("UUID", TEXT, "Node UUID"),
    "vm_capable": FieldDef("VMCapable", BOOL, "Whether node can host instances"),
}
# Ganeti's fields herder keeps no data for: unavailable in every row
UNTRACKED = frozenset({"disk_state", "hv_state"})


def group_name(config: model.ConfigData, node: model.Node) -> str | None:
    group = config.nodegroups.get(node.group)
    return group.name if group else None


def _counts(which: str) -> ColumnFn:
    def column(config: model.ConfigData, nodes: Sequence[model.Node]) -> list[int]:
        table = getattr(config.index(), which)
        return [len(table.get(node.uuid, ())) for node in nodes]

    return column


def _instance_names(which: str) -> ColumnFn:
    def column(config: model.ConfigData, nodes: Sequence[model.Node]) -> list[list[str]]:
        index = config.index()
        uuids = index.primary_uuids if which == "primary" else index.secondary_uuids
        return [sorted(config.instances[u].name for u in uuids(node.uuid)
                       if u in config.instances) for node in nodes]

    return column


SIMPLE: dict[str, ColumnFn] = {
    **{name: attr(name) for name in ("name", "uuid", "offline", "drained", "master_candidate",
                                     "master_capable", "vm_capable", "powered", "serial_no",
                                     "ctime", "mtime")},
    "master": per_object(lambda c, n: n.uuid == c.cluster.master_node),
    "role": per_object(lambda c, n: roles.node_role(n, c.cluster.master_node)),
    "pip": attr("primary_ip"),
    "sip": per_object(lambda _c, n: n.secondary_ip or n.primary_ip),
    "custom_sip": attr("secondary_ip"),
    "group": per_object(group_name),
    "group.uuid": attr("group"),
    "pinst_cnt": _counts("primaries"),
    "sinst_cnt": _counts("secondaries"),
    "pinst_list": _instance_names("primary"),
    "sinst_list": _instance_names("secondary"),
    "custom_ndparams": per_object(lambda _c, n: dict(n.ndparams)),
    "tags": tags,
}


def _live(config: model.ConfigData, live: Snapshot) -> RowFn:
    return lambda node: livefields.node_fields(config, node, live)


def _parameters(config: model.ConfigData, _live: Snapshot) -> RowFn:
    def row(node: model.Node) -> Results:
        filled = config.filled_ndparams(node)
        return {"ndparams": (livefields.RS_NORMAL, filled),
                **normal({f"ndp/{name}": value for name, value in filled.items()}),
                **{name: (livefields.RS_UNAVAIL, None) for name in UNTRACKED}}

    return row


def _nodes(source: Objects) -> list[model.Node]:
    return list(source.config.nodes.values())


RESOURCE = Resource(
    "node", FIELDS, _nodes, SIMPLE,
    (FieldSet(frozenset(livefields.NODE_LIVE_FIELDS), _live, True),
     FieldSet(frozenset({"ndparams", *ND_FIELDS, *UNTRACKED}), _parameters, False)),
    not_found="Node name {} not found")
