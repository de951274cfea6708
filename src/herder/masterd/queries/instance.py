"""The instance query resource (`/2/query/instance`, `herder instance list`): Ganeti 3.0's
instance fields with its titles and descriptions (tests/data/ganeti-query holds the
definitions Ganeti's server gives; `tests/unit/test_query_fields.py` compares): the per-index
disk and NIC fields (`disk.size/0`..`/15`, `nic.ip/0`..`/7`) and their old aliases (`ip`,
`sda_size`, ...), the per-parameter ones (`be/…`, `hv/…` of herder's hypervisors), and the
run state of `masterd.livefields`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from herder.core import model, params
from herder.masterd import livefields, views
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

MAX_DISKS, MAX_NICS = 16, 8  # Ganeti's constants.MAX_DISKS, MAX_NICS: the indexed fields
ORDINALS = {1: "st", 2: "nd", 3: "rd"}

# Ganeti's BES_PARAMETER_TITLES and HVS_PARAMETER_TITLES
BE_TITLES = {"auto_balance": "Auto_balance", "maxmem": "ConfigMaxMem",
             "minmem": "ConfigMinMem", "vcpus": "ConfigVCPUs"}
HV_TITLES = {"acpi": "ACPI", "boot_order": "Boot_order", "cdrom_image_path": "CDROM_image_path",
             "cpu_type": "cpu_type", "disk_type": "Disk_type", "initrd_path": "Initrd_path",
             "kernel_path": "Kernel_path", "nic_type": "NIC_type", "pae": "PAE",
             "pci_pass": "pci_pass", "vnc_bind_address": "VNC_bind_address"}

BE_FIELDS = parameter_fields("be", params.BE_FAMILY, BE_TITLES, "backend")
# every hypervisor's parameters (a parameter of another hypervisor: unavailable)
HV_FIELDS: dict[str, FieldDef] = {}
for _family in params.HV_FAMILIES.values():
    HV_FIELDS = {**parameter_fields("hv", _family, HV_TITLES, "hypervisor"), **HV_FIELDS}
HV_FIELDS = dict(sorted(HV_FIELDS.items()))


def _nth(index: int) -> str:
    number = index + 1
    suffix = "th" if 10 <= number % 100 <= 20 else ORDINALS.get(number % 10, "th")
    return f"{number}{suffix}"


# per index: (field, Ganeti's title, kind, what of the Nth device)
DISK_INDEXED = (("disk.size", "Disk", UNIT, "Disk size of {} disk"),
                ("disk.spindles", "DiskSpindles", NUMBER, "Spindles of {} disk"),
                ("disk.name", "DiskName", TEXT, "Name of {} disk"),
                ("disk.uuid", "DiskUUID", TEXT, "UUID of {} disk"))
NIC_INDEXED = (("nic.mac", "NicMAC", TEXT, "MAC address of {} network interface"),
               ("nic.ip", "NicIP", TEXT, "IP address of {} network interface"),
               ("nic.mode", "NicMode", TEXT, "Mode of {} network interface"),
               ("nic.link", "NicLink", TEXT, "Link of {} network interface"),
               ("nic.vlan", "NicVLAN", TEXT, "VLAN of {} network interface"),
               ("nic.network", "NicNetwork", TEXT, "Network of {} network interface"),
               ("nic.network.name", "NicNetworkName", TEXT,
                "Network name of {} network interface"),
               ("nic.name", "NicName", TEXT, "Name address of {} network interface"),
               ("nic.uuid", "NicUUID", TEXT, "UUID address of {} network interface"),
               ("nic.bridge", "NicBridge", TEXT, "Bridge of {} network interface"))
INDEXED: dict[str, FieldDef] = {
    f"{name}/{index}": FieldDef(f"{title}/{index}", kind, doc.format(_nth(index)))
    for table, count in ((DISK_INDEXED, MAX_DISKS), (NIC_INDEXED, MAX_NICS))
    for name, title, kind, doc in table for index in range(count)}
# Ganeti's old names of indexed and backend fields
ALIASES = {"vcpus": "be/vcpus", "be/memory": "be/maxmem", "sda_size": "disk.size/0",
           "sdb_size": "disk.size/1", "ip": "nic.ip/0", "mac": "nic.mac/0",
           "bridge": "nic.bridge/0", "nic_mode": "nic.mode/0", "nic_link": "nic.link/0",
           "nic_network": "nic.network/0"}

FIELDS: dict[str, FieldDef] = {
    "admin_state": FieldDef("InstanceState", TEXT, "Desired state of instance"),
    "admin_state_source": FieldDef("InstanceStateSource", TEXT, "Who last changed the desired "
                                   "state of the instance"),
    "admin_up": FieldDef("Autostart", BOOL, "Desired state of instance"),
    **BE_FIELDS,
    "beparams": FieldDef("BackendParameters", OTHER, "Backend parameters (merged)"),
    "console": FieldDef("Console", OTHER, "Instance console information"),
    "ctime": FieldDef("CTime", TIMESTAMP, "Creation timestamp"),
    "custom_beparams": FieldDef("CustomBackendParameters", OTHER, "Custom backend parameters"),
    "custom_hvparams": FieldDef("CustomHypervisorParameters", OTHER, "Custom hypervisor "
                                "parameters"),
    "custom_nicparams": FieldDef("CustomNicParameters", OTHER, "Custom network interface "
                                 "parameters"),
    "custom_osparams": FieldDef("CustomOpSysParameters", OTHER, "Custom operating system "
                                "parameters"),
    "disk.count": FieldDef("Disks", NUMBER, "Number of disks"),
    "disk.names": FieldDef("Disk_names", OTHER, "List of disk names"),
    "disk.sizes": FieldDef("Disk_sizes", OTHER, "List of disk sizes"),
    "disk.spindles": FieldDef("Disk_spindles", OTHER, "List of disk spindles"),
    "disk.uuids": FieldDef("Disk_UUIDs", OTHER, "List of disk UUIDs"),
    "disk_template": FieldDef("Disk_template", TEXT, "Instance disk template"),
    "disk_usage": FieldDef("DiskUsage", UNIT, "Total disk space used by instance on each of "
                           "its nodes; this is not the disk size visible to the instance, but "
                           "the usage on the node"),
    "disks_active": FieldDef("DisksActive", BOOL, "Desired state of instance disks"),
    "forthcoming": FieldDef("Forthcoming", BOOL, "whether the Instance is forthcoming"),
    **HV_FIELDS,
    "hvparams": FieldDef("HypervisorParameters", OTHER, "Hypervisor parameters (merged)"),
    "hypervisor": FieldDef("Hypervisor", TEXT, "Hypervisor name"),
    "mtime": FieldDef("MTime", TIMESTAMP, "Modification timestamp"),
    "name": FieldDef("Instance", TEXT, "Instance name", hostname=True),
    "network_port": FieldDef("Network_port", OTHER, "Instance network port if available (e.g. "
                             "for VNC console)"),
    "nic.bridges": FieldDef("NIC_bridges", OTHER, "List containing each network interface's "
                            "bridge"),
    "nic.count": FieldDef("NICs", NUMBER, "Number of network interfaces"),
    "nic.ips": FieldDef("NIC_IPs", OTHER, "List containing each network interface's IP "
                        "address"),
    "nic.links": FieldDef("NIC_links", OTHER, "List containing each network interface's "
                          "link"),
    "nic.macs": FieldDef("NIC_MACs", OTHER, "List containing each network interface's MAC "
                         "address"),
    "nic.modes": FieldDef("NIC_modes", OTHER, "List containing each network interface's "
                          "mode"),
    "nic.names": FieldDef("NIC_Names", OTHER, "List containing each network interface's "
                          "name"),
    "nic.networks": FieldDef("NIC_networks", OTHER, "List containing each interface's "
                             "network"),
    "nic.networks.names": FieldDef("NIC_networks_names", OTHER, "List containing the name of "
                                   "each interface's network"),
    "nic.uuids": FieldDef("NIC_UUIDs", OTHER, "List containing each network interface's "
                          "UUID"),
    "nic.vlans": FieldDef("NIC_VLANs", OTHER, "List containing each network interface's "
                          "VLAN"),
    "oper_ram": FieldDef("Memory", UNIT, "Actual memory usage as seen by hypervisor"),
    "oper_state": FieldDef("Running", BOOL, "Actual state of instance"),
    "oper_vcpus": FieldDef("VCPUs", NUMBER, "Actual number of VCPUs as seen by hypervisor"),
    "os": FieldDef("OS", TEXT, "Operating system"),
    "osparams": FieldDef("OpSysParameters", OTHER, "Operating system parameters (merged)"),
    "pnode": FieldDef("Primary_node", TEXT, "Primary node", hostname=True),
    "pnode.group": FieldDef("PrimaryNodeGroup", TEXT, "Primary node's group"),
    "pnode.group.uuid": FieldDef("PrimaryNodeGroupUUID", TEXT, "Primary node's group UUID"),
    "serial_no": FieldDef("SerialNo", NUMBER, "Instance object serial number, incremented on "
                          "each modification"),
    "snodes": FieldDef("Secondary_Nodes", OTHER, "Secondary nodes; usually this will just be "
                       "one node"),
    "snodes.group": FieldDef("SecondaryNodesGroups", OTHER, "Node groups of secondary nodes"),
    "snodes.group.uuid": FieldDef("SecondaryNodesGroupsUUID", OTHER, "Node group UUIDs of "
                                  "secondary nodes"),
    "status": FieldDef("Status", TEXT, 'Instance status; "running" if instance is set to be '
                       'running and actually is, "ADMIN_down" if instance is stopped and is '
                       'not running, "ERROR_wrongnode" if instance running, but not on its '
                       'designated primary node, "ERROR_up" if instance should be stopped, '
                       'but is actually running, "ERROR_down" if instance should run, but '
                       'doesn\'t, "ERROR_nodedown" if instance\'s primary node is down, '
                       '"ERROR_nodeoffline" if instance\'s primary node is marked offline, '
                       '"ADMIN_offline" if instance is offline and does not use dynamic '
                       'resources'),
    "tags": FieldDef("Tags", OTHER, "Tags"),
    "uuid": FieldDef("UUID", TEXT, "Instance UUID"),
    **INDEXED,
}
FIELDS.update({alias: FIELDS[target] for alias, target in ALIASES.items()})
FIELDS = dict(sorted(FIELDS.items()))


def _node_names(config: model.ConfigData, insts: Sequence[model.Instance],
                which: str) -> list[str] | list[list[str]]:
    names = {uuid: node.name for uuid, node in config.nodes.items()}
    facts = config.index().facts  # the instances' disks walked once, by the index
    if which == "primary":
        return [names.get(inst.primary_node, inst.primary_node) for inst in insts]
    return [[names.get(uuid, uuid) for uuid in
             (facts[inst.uuid].secondaries if inst.uuid in facts else inst.secondary_nodes)]
            for inst in insts]


SIMPLE: dict[str, ColumnFn] = {
    **{name: attr(name) for name in ("name", "uuid", "os", "hypervisor", "admin_state",
                                     "admin_state_source", "disks_active", "disk_template",
                                     "network_port", "serial_no", "ctime", "mtime")},
    "pnode": lambda c, insts: _node_names(c, insts, "primary"),
    "snodes": lambda c, insts: _node_names(c, insts, "secondary"),
    "admin_up": per_object(lambda _c, i: i.admin_state == "up"),
    "disk.count": per_object(lambda _c, i: len(i.disks)),
    "nic.count": per_object(lambda _c, i: len(i.nics)),
    "forthcoming": per_object(lambda _c, _i: False),  # herder has no forthcoming instances
    "tags": tags,
}


def _views(config: model.ConfigData, live: Snapshot) -> RowFn:
    backend = _backend(config, live)
    devices = _devices(config, live)
    hypervisor = _hypervisor(config, live)

    def row(inst: model.Instance) -> Results:
        view = views.instance_view(config, inst, live)
        view["beparams"] = config.filled_beparams(inst)  # /2/query: without RAPI's `memory`
        return {**normal(view), **backend(inst), **devices(inst), **hypervisor(inst),
                **livefields.instance_fields(config, inst, live),
                # Ganeti asks the primary's hypervisor; herder's console route does that
                "console": (livefields.RS_UNAVAIL, None)}

    return row


def _backend(config: model.ConfigData, _live: Snapshot) -> RowFn:
    # the cluster's layer once per answer (model.ConfigData.filled_beparams' layers)
    cluster = params.fill(params.BE_FAMILY.defaults(), config.cluster.beparams)
    rows: dict[tuple[tuple[str, Any], ...], Results] = {}  # instances share their overrides

    def row(inst: model.Instance) -> Results:
        key = tuple(sorted(inst.beparams.items()))
        found = rows.get(key)
        if found is None:
            filled = params.fill(cluster, inst.beparams)
            found = rows[key] = normal({**{f"be/{name}": value for name, value in
                                           filled.items()},
                                        "vcpus": filled["vcpus"], "be/memory": filled["maxmem"]})
        return found

    return row


def _hypervisor(config: model.ConfigData, _live: Snapshot) -> RowFn:
    def row(inst: model.Instance) -> Results:
        filled = {f"hv/{name}": value for name, value in config.filled_hvparams(inst).items()}
        return {name: (livefields.RS_NORMAL, filled[name]) if name in filled
                else (livefields.RS_UNAVAIL, None) for name in HV_FIELDS}

    return row


def _indexed(prefix: str, count: int, values: Sequence[Any]) -> dict[str, Any]:
    return {f"{prefix}/{index}": values[index] if index < len(values) else None
            for index in range(count)}


def _devices(config: model.ConfigData, _live: Snapshot) -> RowFn:
    def row(inst: model.Instance) -> Results:
        group = config.instance_group(inst)
        nic_params = [config.filled_nicparams(nic, group) for nic in inst.nics]
        networks = [config.networks.get(nic.network) if nic.network else None
                    for nic in inst.nics]
        secondary_groups = [config.nodes[n].group if n in config.nodes else None
                            for n in inst.secondary_nodes]
        found = {
            **_indexed("disk.size", MAX_DISKS, [d.size for d in inst.disks]),
            **_indexed("disk.spindles", MAX_DISKS, [d.spindles for d in inst.disks]),
            **_indexed("disk.name", MAX_DISKS, [d.name for d in inst.disks]),
            **_indexed("disk.uuid", MAX_DISKS, [d.uuid for d in inst.disks]),
            **_indexed("nic.mac", MAX_NICS, [n.mac for n in inst.nics]),
            **_indexed("nic.ip", MAX_NICS, [n.ip for n in inst.nics]),
            **_indexed("nic.mode", MAX_NICS, [p["mode"] for p in nic_params]),
            **_indexed("nic.link", MAX_NICS, [p["link"] for p in nic_params]),
            **_indexed("nic.vlan", MAX_NICS, [p.get("vlan") for p in nic_params]),
            **_indexed("nic.network", MAX_NICS, [n.network for n in inst.nics]),
            **_indexed("nic.network.name", MAX_NICS, [n.name if n else None for n in networks]),
            **_indexed("nic.name", MAX_NICS, [n.name for n in inst.nics]),
            **_indexed("nic.uuid", MAX_NICS, [n.uuid for n in inst.nics]),
            **_indexed("nic.bridge", MAX_NICS,
                       [p["link"] if p["mode"] == params.NIC_MODE_BRIDGED else None
                        for p in nic_params]),
            "nic.vlans": [p.get("vlan") for p in nic_params],
            "pnode.group": group.name if group else None,
            "pnode.group.uuid": group.uuid if group else None,
            "snodes.group": [config.nodegroups[g].name if g in config.nodegroups else None
                             for g in secondary_groups],
            "snodes.group.uuid": secondary_groups,
        }
        found.update({alias: found[target] for alias, target in ALIASES.items()
                      if target in found})
        return normal(found)

    return row


def _live(config: model.ConfigData, live: Snapshot) -> RowFn:
    return lambda inst: livefields.instance_fields(config, inst, live)


def _instances(source: Objects) -> list[model.Instance]:
    return list(source.config.instances.values())


DEVICE_FIELDS = frozenset({*INDEXED, "nic.vlans", "pnode.group", "pnode.group.uuid",
                           "snodes.group", "snodes.group.uuid",
                           *(a for a, t in ALIASES.items() if t in INDEXED)})
RESOURCE = Resource(
    "instance", FIELDS, _instances, SIMPLE,
    (FieldSet(frozenset(livefields.INSTANCE_LIVE_FIELDS), _live, True),
     FieldSet(frozenset({*BE_FIELDS, "vcpus", "be/memory"}), _backend, False),
     FieldSet(frozenset(HV_FIELDS), _hypervisor, False),
     FieldSet(DEVICE_FIELDS, _devices, False),
     # the whole view (every field but the simple ones): the last set
     FieldSet(frozenset(FIELDS), _views, True)),
    not_found="Instance name {} not found")
