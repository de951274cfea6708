"""`modify --disk add/remove/N:name=...` of OP_INSTANCE_SET_PARAMS, as Ganeti 3.0's
LUInstanceSetParams does it (cmdlib/instance_set_params.py: _UpgradeDiskNicMods,
_VerifyDiskModification, _CreateNewDisk, _PostAddDisk, _ModifyDisk, _RemoveDisk;
instance_utils.ApplyContainerMods).

- **add**: the new disk is generated as instance create makes one (`diskgen`), made on every
  node of the template in Ganeti's order (`disks.create_disks`: the file-storage directory,
  the primary first, children first), then put into the config; then (Ganeti's
  _PostAddDisk) its mirror's sync is awaited and, when the instance's disks are not active,
  the new disk is shut down again. With hotplug (`lu/hotplug.py`) the new disk is assembled
  on the primary and plugged into the running instance; without, a running instance sees it
  at its next start. A failure removes what was made; the config keeps the disks it had.
- **remove**: without hotplug refused while the instance is marked up or runs ("can't remove
  volume from a running instance without using hotplug"); with hotplug the disk is unplugged
  first (when the guest does not release it, nothing is removed); the disk is removed from
  every node it lives on, then from the config. When a node could not remove it, the config
  keeps the disk (run the removal again; herder's deviation, compat row B21: Ganeti drops
  it from the config anyway). Refused while the instance has snapshots (herder's: their
  volumes of the disk would be left without an owner; compat B63).
- **modify**: only `name` and `mode` (Ganeti: "Disk size change not possible, use grow-disk");
  ext disks may change their other parameters.

After an add or a remove every disk's iv_name is `disk/<index>` again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from herder.core import model, params
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.masterd.lu import diskgen, disks
from herder.masterd.lu import hotplug as hotplug_lu
from herder.masterd.lu.base import MasterEnv

ADD, REMOVE, MODIFY = "add", "remove", "modify"
MAX_DISKS = 16  # Ganeti's constants.MAX_DISKS
DISK_KEYS = frozenset({"size", "mode", "name", "vg", "metavg", "adopt", "provider", "spindles",
                       "access"})
MODIFIABLE = frozenset({"mode", "name"})


@dataclass
class DiskChange:
    """One checked disk modification: `index` is where the new disk goes (add) or which disk
    (remove, modify)."""

    action: str
    index: int
    params: dict[str, Any] = field(default_factory=dict)
    size: int = 0


def upgrade(mods: list[Any]) -> list[tuple[str, int | str, dict[str, Any]]]:
    """Ganeti's _UpgradeDiskNicMods: the two-item form [op, params] becomes [op, -1, params]
    for add/remove and [modify, index, params] otherwise; one add or remove per call."""
    if not mods or len(mods[0]) == 3:
        return [(str(m[0]), m[1], dict(m[2] or {})) for m in mods]
    result: list[tuple[str, int | str, dict[str, Any]]] = []
    for action, settings in mods:
        if action in (ADD, REMOVE):
            result.append((action, -1, dict(settings or {})))
            if sum(1 for r in result if r[0] in (ADD, REMOVE)) > 1:
                raise OpPrereqError("Only one disk add/attach/remove/detach operation is "
                                    "supported at a time", "wrong_input")
        else:
            result.append((MODIFY, action, dict(settings or {})))
    return result


def _lookup(inst: model.Instance, identifier: int | str) -> int:
    """Ganeti's _LookupDiskIndex: an index, or a disk's name or UUID."""
    try:
        return int(identifier)
    except (TypeError, ValueError):
        pass
    for index, disk in enumerate(inst.disks):
        if identifier in (disk.name, disk.uuid):
            return index
    raise OpPrereqError(f"Lookup of disk {identifier!r} failed", "wrong_input")


def plan(inst: model.Instance, mods: list[Any], *, wait_for_sync: bool, hotplug: bool,
         running: bool) -> list[DiskChange]:
    """The checked changes (Ganeti's _CheckMods/_VerifyDiskModification and the index rules
    of ApplyContainerMods), applied to a count of the disks; OpPrereqError otherwise.
    `running`: the instance's domain runs on its primary."""
    count = len(inst.disks)
    changes: list[DiskChange] = []
    template = inst.disk_template
    for action, identifier, settings in upgrade(mods):
        if action not in (ADD, REMOVE, MODIFY):
            raise OpPrereqError(f"unknown disk operation {action!r} (add, remove or an index)",
                                "wrong_input")
        index = _lookup(inst, identifier)
        if action == ADD:
            changes.append(_plan_add(inst, template, index, count, settings,
                                     wait_for_sync=wait_for_sync))
            count += 1
            continue
        if not -count <= index < count or (index < -1 and action != MODIFY):
            raise OpPrereqError(f"Not accepting disk index {identifier} (the instance has "
                                f"{count} disks)", "wrong_input")
        index = count - 1 if index == -1 else index % count
        if action == REMOVE:
            if settings:
                raise OpPrereqError("No settings should be passed when removing or detaching "
                                    "a disk", "wrong_input")
            if not hotplug and inst.admin_state == "up":
                raise OpPrereqError(f"Instance '{inst.name}' is marked to be up, can't remove "
                                    "volume from a running instance without using hotplug",
                                    "wrong_state")
            if not hotplug and running:
                raise OpPrereqError(f"Instance {inst.name} is running, can't remove volume "
                                    "from a running instance without using hotplug",
                                    "wrong_state")
            if inst.snapshots:  # their volumes of the disk would be left without an owner
                raise OpPrereqError(f"instance {inst.name} has snapshots "
                                    f"({', '.join(s.name for s in inst.snapshots)}): remove "
                                    "them before removing a disk", "wrong_state")
            changes.append(DiskChange(REMOVE, index))
            count -= 1
        else:
            if "size" in settings:
                raise OpPrereqError("Disk size change not possible, use grow-disk",
                                    "wrong_input")
            unknown = set(settings) - MODIFIABLE
            if unknown and template != "ext":
                raise OpPrereqError(f"disk {index}: only {', '.join(sorted(MODIFIABLE))} can "
                                    f"change (not {', '.join(sorted(unknown))})", "wrong_input")
            if {"access", "provider"} & set(settings):
                raise OpPrereqError("Disk 'provider' parameter change is not possible",
                                    "wrong_input")
            changes.append(DiskChange(MODIFY, index, settings))
    if count > MAX_DISKS:
        raise OpPrereqError(f"Instance has too many disks ({count}), cannot add more",
                            "wrong_state")
    return changes


def _plan_add(inst: model.Instance, template: str, index: int, count: int,
              settings: dict[str, Any], *, wait_for_sync: bool) -> DiskChange:
    if template == "diskless":
        raise OpPrereqError("Must specify disk type on diskless instance", "wrong_input")
    if index == -1:
        index = count
    if not 0 <= index <= count:
        raise OpPrereqError(f"Not accepting disk index {index} for an addition (the instance "
                            f"has {count} disks)", "wrong_input")
    unknown = set(settings) - DISK_KEYS
    if unknown and template != "ext":
        raise OpPrereqError(f"unknown disk parameter(s) {', '.join(sorted(unknown))}",
                            "wrong_input")
    mode = settings.setdefault("mode", "rw")
    if mode not in ("rw", "ro"):
        raise OpPrereqError(f"Invalid disk access mode '{mode}'", "wrong_input")
    if settings.get("size") is None:
        raise OpPrereqError("Required disk parameter 'size' missing", "wrong_input")
    try:
        size = params.parse_size(settings["size"])
    except ValueError as err:
        raise OpPrereqError(f"disk size: {err}", "wrong_input") from None
    if str(settings.get("name", "")).lower() == "none":
        settings["name"] = None
    if template == "ext" and not settings.get("provider"):
        raise OpPrereqError("Missing provider for template 'ext'", "wrong_input")
    if template == "blockdev" and not settings.get("adopt"):
        raise OpPrereqError("a blockdev disk adopts an existing device: give "
                            "adopt=/dev/disk/...", "wrong_input")
    if settings.get("adopt") and template != "blockdev":
        raise OpPrereqError("only blockdev disks can be adopted", "wrong_input")
    if not wait_for_sync and not inst.disks_active:
        raise OpPrereqError("Can't add a disk to an instance with deactivated disks and "
                            "--no-wait-for-sync given", "wrong_input")
    return DiskChange(ADD, index, settings, size)


def _store_disks(env: MasterEnv, inst_uuid: str,
                 change: Callable[[model.ConfigData, model.Instance], None]) -> model.Instance:
    with env.store.update() as fresh:
        inst = fresh.instances[inst_uuid]
        change(fresh, inst)
        diskgen.renumber(inst.disks)
        inst.touch()
    return inst


def add_disk(env: MasterEnv, inst_uuid: str, change: DiskChange, *, wait_for_sync: bool,
             feedback: disks.Feedback, hotplug: bool = False) -> list[list[str]]:
    """Ganeti's _CreateNewDisk and _PostAddDisk for one checked addition."""
    config = env.store.load()
    inst = config.instances[inst_uuid]
    disk = diskgen.new_disk(config, inst.disk_template, change.index, change.size,
                            change.params, inst.all_nodes, inst.name, diskgen.Reservations(),
                            others=inst.disks)
    # blockdev: the node checks the adopted device (its removal on a failure leaves it)
    made = disks.create_disks(env, config, inst, disks=[disk], feedback=feedback)
    try:
        def insert(fresh: model.ConfigData, stored: model.Instance) -> None:
            stored.disks.insert(change.index, disk)
            lid = disk.logical_id
            if isinstance(lid, model.DrbdId):
                fresh.cluster.highest_used_port = max(fresh.cluster.highest_used_port,
                                                      lid.port)
        inst = _store_disks(env, inst_uuid, insert)
    except HerderError:
        disks.undo_create_disks(env, inst, made, feedback=feedback)
        raise
    result = [[f"disk/{change.index}", f"add:size={disk.size},mode={disk.mode}"]]
    config = env.store.load()
    inst = config.instances[inst_uuid]
    added = inst.disks[change.index]
    if added.dev_type == "drbd" and wait_for_sync:
        disks.wait_for_sync(env, config, _only(inst, added))
    if hotplug:  # Ganeti's _PostAddDisk: assembled on the primary, then plugged in
        try:
            disks.assemble_disks(env, config, inst, disks=[added], feedback=feedback)
        except HerderError as err:
            feedback(f"WARNING: Can't assemble newly created disk {change.index}: {err}")
            return [*result, [f"disk/{change.index}", "assemble:failed"]]
        return [*result, [f"disk/{change.index}", hotplug_lu.device(
            env, config, inst, "add", "disk", change.index, added.uuid, feedback)]]
    if not inst.disks_active:
        disks.shutdown_disks(env, config, _only(inst, added), feedback=feedback)
    return result


def _only(inst: model.Instance, disk: model.Disk) -> model.Instance:
    """A view of the instance with one disk (never stored)."""
    return msgspec.structs.replace(inst, disks=[disk])


def remove_disk(env: MasterEnv, inst_uuid: str, change: DiskChange, feedback: disks.Feedback,
                hotplug: bool = False) -> list[list[str]]:
    """Ganeti's _RemoveDisk: with hotplug first unplugged from the running instance and shut
    down; the disk removed from every node, then from the config (kept there when a node
    could not remove it)."""
    config = env.store.load()
    inst = config.instances[inst_uuid]
    disk = inst.disks[change.index]
    unplugged: list[list[str]] = []
    if hotplug:
        outcome = hotplug_lu.device(env, config, inst, "remove", "disk", change.index,
                                    disk.uuid, feedback)
        if outcome != "hotplug:done":  # the guest still uses it: the data stays
            raise OpExecError(f"could not unplug {disk.iv_name} from the running {inst.name};"
                              " nothing was removed")
        unplugged = [[f"disk/{change.index}", outcome]]
        disks.shutdown_disks(env, config, _only(inst, disk), feedback=feedback)
    if not disks.remove_disks(env, config, inst, disks=[disk], feedback=feedback):
        raise OpExecError(f"could not remove {disk.iv_name} of {inst.name} from every node; "
                          "it stays in the config (remove it again once its nodes answer)")

    def drop(fresh: model.ConfigData, stored: model.Instance) -> None:
        stored.disks = [d for d in stored.disks if d.uuid != disk.uuid]

    _store_disks(env, inst_uuid, drop)
    return [*unplugged, [f"disk/{change.index}", "remove"]]


def modify_disk(env: MasterEnv, inst_uuid: str, change: DiskChange) -> list[list[str]]:
    """Ganeti's _ModifyDisk: name and mode (ext: any parameter; `default` resets it)."""
    result: list[list[str]] = []

    def apply(fresh: model.ConfigData, stored: model.Instance) -> None:
        disk = stored.disks[change.index]
        for key, value in change.params.items():
            if key == "mode":
                if value not in ("rw", "ro"):
                    raise OpExecError(f"Invalid disk access mode '{value}'")
                disk.mode = value
                result.append([f"disk.mode/{change.index}", str(value)])
            elif key == "name":
                disk.name = None if value is None or str(value).lower() == "none" \
                    else str(value)
                result.append([f"disk.name/{change.index}", str(disk.name)])
            else:
                if str(value).lower() == "default":
                    disk.params.pop(key, None)
                else:
                    disk.params[key] = str(value)
                result.append([f"disk.params:{key}/{change.index}", str(value)])
        disk.touch()

    _store_disks(env, inst_uuid, apply)
    return result


def apply(env: MasterEnv, inst_uuid: str, changes: list[DiskChange], *, wait_for_sync: bool,
          feedback: disks.Feedback, hotplug: bool = False) -> list[list[str]]:
    """Carry out the checked changes in order (Ganeti's ApplyContainerMods)."""
    result: list[list[str]] = []
    for change in changes:
        if change.action == ADD:
            result += add_disk(env, inst_uuid, change, wait_for_sync=wait_for_sync,
                               feedback=feedback, hotplug=hotplug)
        elif change.action == REMOVE:
            result += remove_disk(env, inst_uuid, change, feedback, hotplug)
        else:
            result += modify_disk(env, inst_uuid, change)
    return result
