"""New disks of an instance as the config holds them (Ganeti's GenerateDiskTemplate): one
function for instance create, `modify --disk add` and the plain->drbd conversion, so a disk
made by any of them is named and laid out the same way.

Names: `plain` LVs `<uuid>.disk<N>`, DRBD's `<uuid>.disk<N>_data`/`_meta` (Ganeti's
_GenerateUniqueNames), `file`/`sharedfile` `<dir>/<instance>/disk<N>` (compat row B12; a name
another disk of the instance still uses gets Ganeti's `<uuid>.file.disk<N>`), `ext`
`<uuid>.ext.disk<N>`, `rbd` `<uuid>.rbd.disk<N>`. Pure: the config in, a `model.Disk` out;
the DRBD minors and ports it takes are recorded in the `Reservations` passed along, so several
new disks never collide."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from herder.core import configdiff, model, paths
from herder.masterd import portpool

DRBD_META_MIB = 128  # Ganeti's DRBD_META_SIZE


@dataclass
class Reservations:
    """DRBD minors (per node UUID) and ports handed out by this operation so far."""

    minors: dict[str, set[int]] = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)


def free_minor(config: model.ConfigData, node_uuid: str, extra: set[int]) -> int:
    used = set(extra)
    for inst in configdiff.plain_values(config.instances):  # reads only: copies nothing
        for disk in inst.disks:
            lid = disk.logical_id
            if isinstance(lid, model.DrbdId):
                for n, minor in zip(lid.nodes, lid.minors, strict=True):
                    if n == node_uuid:
                        used.add(minor)
    minor = 0
    while minor in used:
        minor += 1
    return minor


def free_port(config: model.ConfigData, extra: set[int]) -> int:
    used = set(extra) | portpool.ports_in_use(config)
    port = max(config.cluster.highest_used_port, 11000) + 1
    while port in used:
        port += 1
    return port


def drbd_disk(config: model.ConfigData, nodes: tuple[str, str], lv_prefix: str, size: int,
              taken: Reservations, common: Mapping[str, Any],
              data: model.Disk | None = None) -> model.Disk:
    """A DRBD disk over a data LV (`data`, an existing plain disk being converted, or a new
    `<prefix>_data`) and a new metadata LV `<prefix>_meta` (Ganeti's _GenerateDRBD8Branch);
    takes a port and a minor on each node. Raises `config.cluster.highest_used_port`."""
    vg = config.cluster.volume_group_name or "xenvg"
    primary, secondary = nodes
    minors = []
    for node_uuid in nodes:
        minor = free_minor(config, node_uuid, taken.minors.setdefault(node_uuid, set()))
        taken.minors[node_uuid].add(minor)
        minors.append(minor)
    port = free_port(config, taken.ports)
    taken.ports.add(port)
    config.cluster.highest_used_port = max(config.cluster.highest_used_port, port)
    data_vg = data.logical_id.vg if data is not None and isinstance(
        data.logical_id, model.PlainId) else vg
    children = [
        model.Disk(uuid=model.new_uuid(), dev_type="plain", size=size,
                   logical_id=model.PlainId(vg=data_vg, lv=f"{lv_prefix}_data")),
        model.Disk(uuid=model.new_uuid(), dev_type="plain", size=DRBD_META_MIB,
                   logical_id=model.PlainId(vg=vg, lv=f"{lv_prefix}_meta")),
    ]
    return model.Disk(dev_type="drbd", children=children, logical_id=model.DrbdId(
        nodes=[primary, secondary], port=port, minors=minors,
        secret=secrets.token_hex(20)), **common)


def _file_path(config: model.ConfigData, template: str, instance_name: str, index: int,
               disk_uuid: str, others: list[model.Disk]) -> str:
    base = config.cluster.file_storage_dir if template == "file" \
        else config.cluster.shared_file_storage_dir
    path = str(paths.child(base, instance_name, f"disk{index}", what="instance name"))
    used = {d.logical_id.path for d in others if isinstance(d.logical_id, model.FileId)}
    if path in used:
        path = str(paths.child(base, instance_name, f"{disk_uuid}.file.disk{index}",
                               what="instance name"))
    return path


def new_disk(config: model.ConfigData, template: str, index: int, size: int,
             spec: Mapping[str, Any], nodes: list[str], instance_name: str,
             taken: Reservations, *, others: list[model.Disk] | None = None) -> model.Disk:
    """Disk `index` (iv_name `disk/<index>`) of `template` for an instance on `nodes` (the
    primary first; DRBD: and its secondary); `spec` holds Ganeti's disk keys (mode, name,
    adopt, provider, vg, metavg, ...); `others` are the instance's disks it must not collide
    with."""
    stamp = model.now()
    disk_uuid = model.new_uuid()
    vg = str(spec.get("vg") or config.cluster.volume_group_name or "xenvg")
    common = {"uuid": disk_uuid, "size": size, "mode": spec.get("mode", "rw"),
              "iv_name": f"disk/{index}", "name": spec.get("name"),
              "ctime": stamp, "mtime": stamp}
    if template == "drbd":
        return drbd_disk(config, (nodes[0], nodes[1]), f"{disk_uuid}.disk{index}", size,
                         taken, common)
    if template == "plain":
        return model.Disk(dev_type="plain", logical_id=model.PlainId(
            vg=vg, lv=f"{disk_uuid}.disk{index}"), **common)
    if template in ("file", "sharedfile"):
        return model.Disk(dev_type=template, logical_id=model.FileId(
            driver="loop", path=_file_path(config, template, instance_name, index, disk_uuid,
                                           others or [])), **common)
    if template == "blockdev":
        return model.Disk(dev_type="blockdev", logical_id=model.FileId(
            driver="manual", path=str(spec["adopt"])), **common)
    if template == "ext":
        return model.Disk(dev_type="ext", logical_id=model.ExtId(
            provider=str(spec["provider"]), name=f"{disk_uuid}.ext.disk{index}"), **common)
    if template == "rbd":  # Ganeti's (RBD_CMD, "<uuid>.rbd.disk<i>")
        return model.Disk(dev_type="rbd", logical_id=model.ExtId(
            provider="rbd", name=f"{disk_uuid}.rbd.disk{index}"), **common)
    return model.Disk(dev_type=template, **common)


def renumber(disks: list[model.Disk]) -> None:
    """Every disk's iv_name is `disk/<its index>` (Ganeti's config keeps them in order after
    an add or a remove)."""
    for index, disk in enumerate(disks):
        disk.iv_name = f"disk/{index}"
