"""Ganeti 3.0's disk objects as its node RPCs send them, built from herder's config.

A node is told everything it needs about a disk (docs/real-nodes.md §2): `dev_type`,
`logical_id` as Ganeti's list (`plain` [vg, lv]; `drbd` [node_a, node_b, port, minor_a,
minor_b, secret]; `file`/`sharedfile`/`gluster`/`blockdev` [driver, path]; `ext`/`rbd`
[provider, name]), `children`, `size` (MiB), `params` (the logical-disk parameters Ganeti's
`Disk.ComputeLDParams` derives from the template's filled disk parameters: the DRBD device gets
the sync and network ones, its data and metadata LVs their stripes), `iv_name`, `name`, `uuid`,
`mode`, `spindles`, and for DRBD `dynamic_params` (Ganeti's `UpdateDynamicDiskParams`: the
receiving node's and its peer's secondary IP and minor). `herder.noded.bdev.disk` decodes them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from herder.core import model

# Ganeti's constants.DISK_LD_DEFAULTS: which logical-disk parameters each device type takes.
_LD_KEYS: dict[str, tuple[str, ...]] = {
    "plain": ("stripes",), "rbd": ("access", "pool"), "ext": ("access",),
    "gluster": ("access", "host", "port", "volume"),
}
# DRBD's logical-disk parameter -> the drbd template's disk parameter (ComputeLDParams).
_DRBD_LD = {"resync-rate": "resync-rate", "disabled-barriers": "disk-barriers",
            "disable-meta-flush": "meta-barriers", "default-metavg": "metavg",
            "disk-custom": "disk-custom", "net-custom": "net-custom", "protocol": "protocol",
            "dynamic-resync": "dynamic-resync", "c-plan-ahead": "c-plan-ahead",
            "c-fill-target": "c-fill-target", "c-delay-target": "c-delay-target",
            "c-max-rate": "c-max-rate", "c-min-rate": "c-min-rate"}


def ld_params(template: str, filled: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Ganeti's ComputeLDParams: one parameter dict per device of the template's disk tree,
    in order (drbd: the DRBD device, its data LV, its metadata LV)."""
    if template == "drbd":
        return [{ld: filled[dt] for ld, dt in _DRBD_LD.items()},
                {"stripes": filled["data-stripes"]}, {"stripes": filled["meta-stripes"]}]
    return [{key: filled[key] for key in _LD_KEYS.get(template, ()) if key in filled}]


def logical_id(lid: model.LogicalId | None) -> list[Any]:
    """A logical id as Ganeti's list."""
    if isinstance(lid, model.PlainId):
        return [lid.vg, lid.lv]
    if isinstance(lid, model.DrbdId):
        return [lid.nodes[0], lid.nodes[1], lid.port, lid.minors[0], lid.minors[1], lid.secret]
    if isinstance(lid, model.FileId):
        return [lid.driver, lid.path]
    if isinstance(lid, model.ExtId):
        return [lid.provider, lid.name]
    return []


def file_storage_dir(disk: model.Disk) -> str | None:
    """The instance's directory a file/sharedfile disk lives in (made by
    `file_storage_dir_create` before the disks, removed after them)."""
    if disk.dev_type in ("file", "sharedfile") and isinstance(disk.logical_id, model.FileId):
        return os.path.dirname(disk.logical_id.path)
    return None


def _secondary_ip(config: model.ConfigData, node_uuid: str) -> str:
    node = config.nodes.get(node_uuid)
    if node is None:
        return ""
    return node.secondary_ip or node.primary_ip


def _object(config: model.ConfigData, disk: model.Disk, params: dict[str, Any],
            node_uuid: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "dev_type": disk.dev_type, "logical_id": logical_id(disk.logical_id), "children": [],
        "size": disk.size, "params": params, "iv_name": disk.iv_name or None,
        "name": disk.name, "uuid": disk.uuid, "mode": disk.mode, "spindles": disk.spindles,
        "dynamic_params": {},
    }
    lid = disk.logical_id
    if isinstance(lid, model.DrbdId) and node_uuid in lid.nodes:
        here = lid.nodes.index(node_uuid)
        peer = 1 - here
        data["dynamic_params"] = {
            "local-ip": _secondary_ip(config, lid.nodes[here]),
            "remote-ip": _secondary_ip(config, lid.nodes[peer]),
            "local-minor": lid.minors[here], "remote-minor": lid.minors[peer]}
    return data


def disk_object(config: model.ConfigData, inst: model.Instance, disk: model.Disk,
                node_uuid: str | None = None) -> dict[str, Any]:
    """One disk of `inst` as the node `node_uuid` (default: the primary) is sent it."""
    node_uuid = node_uuid or inst.primary_node
    filled = config.filled_diskparams(disk.dev_type, config.instance_group(inst))
    levels = ld_params(disk.dev_type, filled)
    top = _object(config, disk, {**levels[0], **disk.params} if disk.dev_type != "drbd"
                  else levels[0], node_uuid)
    for index, child in enumerate(disk.children):
        child_params = levels[index + 1] if index + 1 < len(levels) else {}
        top["children"].append(_object(config, child, dict(child_params), node_uuid))
    return top


def disk_objects(config: model.ConfigData, inst: model.Instance,
                 node_uuid: str | None = None) -> list[dict[str, Any]]:
    """Every disk of `inst`, for the node `node_uuid` (default: the primary)."""
    return [disk_object(config, inst, disk, node_uuid) for disk in inst.disks]
