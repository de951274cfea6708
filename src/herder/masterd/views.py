"""How config objects look on Ganeti's RAPI v2 (field names as Ganeti 3.0 serves them)."""

from __future__ import annotations

import platform
import threading
from collections.abc import Iterable

import msgspec

from herder import __version__
from herder.core import model, params, roles
from herder.core.jsonvalue import JsonObject, JsonValue
from herder.masterd import livefields
from herder.masterd.livecache import EMPTY, Snapshot

_ENCODE = msgspec.json.Encoder().encode
RAPI_VERSION = 2
# the Ganeti release whose RAPI, config and confd herder speaks (CONFIG_VERSION's 3.0); what
# Ganeti's clients read in software_version (compat U1)
GANETI_SOFTWARE_VERSION = "3.0.0"
CONFIG_VERSION = 3000000  # the Ganeti config version whose RAPI shapes herder speaks
PROTOCOL_VERSION = 3000000
OS_API_VERSION = 20
EXPORT_VERSION = 0


def node_view(config: model.ConfigData, node: model.Node,
              live: Snapshot = EMPTY) -> JsonObject:
    """Ganeti's N_FIELDS; the live figures from `live` (null where Ganeti's would be: node
    offline, not answering, or a figure it does not report)."""
    primaries = [i.name for i in config.primary_instances(node.uuid)]
    secondaries = [i.name for i in config.secondary_instances(node.uuid)]
    return {
        "name": node.name, "uuid": node.uuid, "pip": node.primary_ip,
        "sip": node.secondary_ip or node.primary_ip,
        "secondary_ip": node.secondary_ip or node.primary_ip,
        "master_candidate": node.master_candidate, "master_capable": node.master_capable,
        "vm_capable": node.vm_capable, "offline": node.offline, "drained": node.drained,
        "role": roles.node_role(node, config.cluster.master_node), "group.uuid": node.group,
        "pinst_cnt": len(primaries), "pinst_list": primaries,
        "sinst_cnt": len(secondaries), "sinst_list": secondaries,
        "ndparams": config.filled_ndparams(node), "tags": list(node.tags),
        "serial_no": node.serial_no, "ctime": node.ctime, "mtime": node.mtime,
        **_node_figures(config, node, live),
    }


def _node_figures(config: model.ConfigData, node: model.Node, live: Snapshot) -> JsonObject:
    figures = livefields.values(livefields.node_fields(config, node, live))
    figures.pop("bootid")  # a query field, not one of the bulk answers' N_FIELDS
    return figures


def group_view(config: model.ConfigData, group: model.NodeGroup) -> JsonObject:
    members = config.group_node_names(group.uuid)
    return {
        "name": group.name, "uuid": group.uuid, "alloc_policy": group.alloc_policy,
        "node_cnt": len(members), "node_list": members,
        "ipolicy": model.to_builtins(config.filled_ipolicy(group)),
        "custom_ipolicy": model.to_builtins(group.ipolicy),
        "ndparams": params.fill(params.ND_FAMILY.defaults(), config.cluster.ndparams,
                                group.ndparams),
        "custom_ndparams": dict(group.ndparams),
        "diskparams": {dt: config.filled_diskparams(dt, group)
                       for dt in sorted(params.DISK_TEMPLATES)},
        "custom_diskparams": dict(group.diskparams),
        "tags": list(group.tags), "serial_no": group.serial_no,
        "ctime": group.ctime, "mtime": group.mtime,
    }


def network_view(config: model.ConfigData, net: model.Network) -> JsonObject:
    """A network as Ganeti's RAPI answers it (its NET_FIELDS, its query's other fields): the
    pool's counts and map, the groups it is connected to ([name, mode, link, vlan]) and the
    instances with a NIC on it."""
    pool = net.pool()
    groups: list[JsonValue] = [[g.name, link.mode, link.link, link.vlan]
                               for g in sorted(config.nodegroups.values(), key=lambda g: g.name)
                               if (link := g.networks.get(net.uuid)) is not None]
    insts: list[JsonValue] = [*sorted(i.name for i in config.instances.values()
                                      if any(nic.network == net.uuid for nic in i.nics))]
    return {
        "name": net.name, "uuid": net.uuid, "network": net.network, "gateway": net.gateway,
        "network6": net.network6, "gateway6": net.gateway6, "mac_prefix": net.mac_prefix,
        "free_count": pool.free_count(), "reserved_count": pool.reserved_count(),
        "map": pool.map(), "group_list": groups, "group_cnt": len(groups),
        "inst_list": insts, "inst_cnt": len(insts),
        "external_reservations": ", ".join(pool.external_reservations()),
        "tags": list(net.tags), "serial_no": net.serial_no, "ctime": net.ctime,
        "mtime": net.mtime,
    }


def instance_view(config: model.ConfigData, inst: model.Instance,
                  live: Snapshot = EMPTY) -> JsonObject:
    """Ganeti's I_FIELDS (and a few more); the run state from `live`."""
    return {**livefields.values(livefields.instance_fields(config, inst, live)),
            **_instance_config_view(config, inst)}


def instance_context(config: model.ConfigData) -> tuple[object, ...]:
    """What an instance's encoded config fields depend on beyond the instance itself: the
    cluster, groups and networks (filled parameters) and the nodes (their names). A change
    replaces the objects it touched, so the same objects mean the same fields."""
    return (config.cluster, *config.nodegroups.values(), *config.networks.values(),
            *config.nodes.values())


def same_context(one: tuple[object, ...], other: tuple[object, ...]) -> bool:
    return len(one) == len(other) and all(a is b for a, b in zip(one, other, strict=True))


# The bytes of encoded views InstanceViews keeps at most: ~34,000 instances' config fields
# (1.4 KB each at 50,000 instances, where all of them were 70 MB kept for as long as masterd
# ran, issue 36 goal 6); the instances past it are encoded per answer.
VIEWS_MAX_BYTES = 48 << 20


class InstanceViews:
    """The bulk instance list as JSON: each instance's config fields encoded once per object
    (a change replaces the objects it touched; a change of what fills parameters or names
    nodes, i.e. the cluster, a group, a network or a node, drops them all), its live fields
    encoded per answer. 10,000 views cost their live fields and a join, not 10,000 fills.
    At most `max_bytes` of encodings are kept (the first instances of a list, in its order;
    the others are encoded for each answer), so masterd's memory is bounded whatever the
    cluster's size."""

    def __init__(self, max_bytes: int = VIEWS_MAX_BYTES) -> None:
        self._lock = threading.Lock()
        self._context: tuple[object, ...] = ()
        self._encoded: dict[str, tuple[model.Instance, bytes]] = {}
        self.max_bytes = max_bytes
        self.kept_bytes = 0  # the sum of the kept encodings' lengths

    def encode(self, config: model.ConfigData, instances: Iterable[model.Instance],
               live: Snapshot = EMPTY) -> bytearray:
        context = instance_context(config)
        with self._lock:
            if not same_context(context, self._context):
                self._context, self._encoded, self.kept_bytes = context, {}, 0
            encoded = self._encoded
            # one buffer, written in place: no per-instance joined rows nor a list of them
            # (at 10,000 instances these were two more copies of the 14 MB answer)
            answer = bytearray(b"[")
            ordered = list(instances)
            # the live fields encoded once per distinct run key (a few dozen)
            runs: dict[livefields.RunKey, bytes] = {}
            for inst, run_key in zip(ordered, livefields.run_keys(config, ordered, live),
                                     strict=True):
                kept = encoded.get(inst.uuid)
                if kept is None or kept[0] is not inst:
                    before = len(kept[1]) if kept is not None else 0
                    kept = (inst, _ENCODE(_instance_config_view(config, inst)))
                    if self.kept_bytes - before + len(kept[1]) <= self.max_bytes:
                        encoded[inst.uuid] = kept
                        self.kept_bytes += len(kept[1]) - before
                    elif before:  # (its old encoding is of an object replaced since)
                        del encoded[inst.uuid]
                        self.kept_bytes -= before
                running = runs.get(run_key)
                if running is None:
                    running = runs[run_key] = _ENCODE(livefields.values(
                        livefields.fields_of(run_key)))
                if len(answer) > 1:
                    answer += b","
                answer += memoryview(running)[:-1]
                answer += b","
                answer += memoryview(kept[1])[1:]
            if len(encoded) > 2 * len(config.instances) + 100:  # removed instances
                for uuid in [u for u in encoded if u not in config.instances]:
                    self.kept_bytes -= len(encoded.pop(uuid)[1])
        answer += b"]"
        return answer


def _instance_config_view(config: model.ConfigData, inst: model.Instance) -> JsonObject:
    group = config.instance_group(inst)
    nics = [config.filled_nicparams(nic, group) for nic in inst.nics]
    be = config.filled_beparams(inst)
    return {
        "name": inst.name, "uuid": inst.uuid, "admin_state": inst.admin_state,
        "admin_state_source": inst.admin_state_source, "admin_up": inst.admin_state == "up",
        "pnode": config.node_name(inst.primary_node),
        "snodes": [config.node_name(n) for n in inst.secondary_nodes],
        "disk_template": inst.disk_template, "os": inst.os, "hypervisor": inst.hypervisor,
        "hvparams": config.filled_hvparams(inst), "custom_hvparams": dict(inst.hvparams),
        # RAPI's beparams also carry `memory` (= maxmem), as Ganeti's rlib2 adds it
        "beparams": {**be, "memory": be["maxmem"]}, "custom_beparams": dict(inst.beparams),
        "custom_nicparams": [dict(n.nicparams) for n in inst.nics],
        "osparams": config.filled_osparams(inst), "custom_osparams": dict(inst.osparams),
        "disk.sizes": [d.size for d in inst.disks],
        "disk.spindles": [d.spindles for d in inst.disks],
        "disk.names": [d.name for d in inst.disks], "disk.uuids": [d.uuid for d in inst.disks],
        "disk_usage": sum(d.size for d in inst.disks),
        "nic.ips": [n.ip for n in inst.nics], "nic.macs": [n.mac for n in inst.nics],
        "nic.modes": [p["mode"] for p in nics], "nic.links": [p["link"] for p in nics],
        "nic.bridges": [p["link"] if p["mode"] == params.NIC_MODE_BRIDGED else None for p in nics],
        "nic.networks": [n.network for n in inst.nics],
        "nic.networks.names": [config.networks[n.network].name
                               if n.network in config.networks else None for n in inst.nics],
        "nic.names": [n.name for n in inst.nics], "nic.uuids": [n.uuid for n in inst.nics],
        "network_port": inst.network_port, "disks_active": inst.disks_active,
        "tags": list(inst.tags), "serial_no": inst.serial_no,
        "ctime": inst.ctime, "mtime": inst.mtime,
    }


def cluster_view(config: model.ConfigData) -> JsonObject:
    c = config.cluster
    default_hv = c.enabled_hypervisors[0] if c.enabled_hypervisors else None
    allocate = c.default_iallocators.get("allocate", [])
    return {
        "name": c.name, "uuid": c.uuid, "master": config.node_name(c.master_node),
        "architecture": [platform.architecture()[0], platform.machine()],
        # Ganeti's: the Ganeti release whose wire herder speaks (clients compare it as
        # Ganeti's), the build in vcs_version's free text; herder's build in herder_version
        # (compat U1)
        "software_version": GANETI_SOFTWARE_VERSION, "vcs_version": f"herder {__version__}",
        "protocol_version": PROTOCOL_VERSION, "config_version": CONFIG_VERSION,
        "os_api_version": OS_API_VERSION, "export_version": EXPORT_VERSION,
        "default_hypervisor": default_hv, "enabled_hypervisors": list(c.enabled_hypervisors),
        "hvparams": {hv: params.fill(params.hv_family(hv).defaults(), c.hvparams.get(hv))
                     for hv in sorted(params.HYPERVISORS)},
        "os_hvp": c.os_hvp, "osparams": c.osparams,
        "beparams": {"default": params.fill(params.BE_FAMILY.defaults(), c.beparams)},
        "nicparams": {"default": params.fill(params.NIC_FAMILY.defaults(), c.nicparams)},
        "ndparams": params.fill(params.ND_FAMILY.defaults(), c.ndparams),
        "diskparams": {dt: config.filled_diskparams(dt) for dt in sorted(params.DISK_TEMPLATES)},
        "ipolicy": model.to_builtins(c.ipolicy), "candidate_pool_size": c.candidate_pool_size,
        "master_netdev": c.master_netdev, "master_netmask": c.master_netmask,
        "uid_pool": [list(r) for r in c.uid_pool],
        "default_iallocator": allocate[0] if allocate else "",
        "default_iallocator_params": dict(c.default_iallocator_params),
        "reserved_lvs": list(c.reserved_lvs), "blacklisted_os": list(c.blacklisted_os),
        "hidden_os": list(c.hidden_os), "mac_prefix": c.mac_prefix,
        "volume_group_name": c.volume_group_name, "vg_name": c.volume_group_name,
        "file_storage_dir": c.file_storage_dir,
        "shared_file_storage_dir": c.shared_file_storage_dir,
        "drbd_usermode_helper": c.drbd_usermode_helper, "drbd_helper": c.drbd_usermode_helper,
        "enabled_disk_templates": list(c.enabled_disk_templates),
        "primary_ip_version": c.primary_ip_family,
        "enabled_data_collectors": {n: s.active for n, s in c.data_collectors.items()},
        "data_collector_interval": {n: int(s.interval * 1e6)
                                    for n, s in c.data_collectors.items()},
        "maintain_node_health": False, "prealloc_wipe_disks": False,
        "tags": list(c.tags), "ctime": c.ctime, "mtime": config.mtime,
        # herder's own fields
        "default_iallocators": {k: c.default_iallocators.get(k, [])
                                for k in model.IALLOCATOR_REQUEST_TYPES},
        "serial_no": config.serial_no,
        # the build masterd runs (each node's own: `node info`'s herder_version)
        "herder_version": __version__,
    }


def maintenance_view(config: model.ConfigData) -> JsonObject:
    return model.to_builtins(config.maintenance)


def snapshot_view(inst: model.Instance, snapshot: model.InstanceSnapshot) -> JsonObject:
    """An instance snapshot (herder's own, `/2/herder/instances/I/snapshots`): its name, when
    it was taken, and per disk the snapshot's volume (`[provider, name]` for ext)."""
    disks = {disk.uuid: disk for disk in inst.disks}
    return {"name": snapshot.name, "ctime": snapshot.ctime,
            "disks": [{"uuid": volume.disk,
                       "iv_name": disks[volume.disk].iv_name if volume.disk in disks else None,
                       "volume": [getattr(volume.logical_id, field)
                                  for field in volume.logical_id.__struct_fields__]}
                      for volume in snapshot.volumes]}
