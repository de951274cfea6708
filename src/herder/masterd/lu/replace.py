"""replace-disks' procedures on a DRBD instance, in Ganeti's order (cmdlib/instance_storage.py,
TLReplaceDisks): the local storage rebuilt on the primary or the secondary (`-p`/`-s`,
`replace_disks_only`), the mirror moved to a new secondary (`-n`, `change_secondary`), and their
common end (`finish_replacement`). The instance LUs (replace-disks) and the node LUs (evacuation
of secondaries) call them; the disks' node RPCs are `masterd.lu.disks`'s."""

from __future__ import annotations

import time

import msgspec

from herder.core import diskobjects, model
from herder.core.diskobjects import Disk
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.core.rpcdefs import disk_calls
from herder.masterd.lu import disks
from herder.masterd.lu.base import MasterEnv
from herder.masterd.lu.diskgen import free_minor
from herder.masterd.lu.disks import Feedback, quiet


def replace_disks_only(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                       node: model.Node, *, indices: list[int] | None = None,
                       early_release: bool = False, feedback: Feedback = quiet) -> None:
    """Rebuild the DRBD disks' local storage on `node` (the primary for -p, the secondary for
    -s) in Ganeti's order (TLReplaceDisks._ExecDrbd8DiskOnly): the devices found on the other
    node and on `node`, the volume group on both (`vg_list`), the other node checked
    consistent, new data and metadata LVs made, per disk the old LVs detached from the DRBD
    device, those found renamed to `<lv>_replaced-<time>`, the new LVs renamed to the old
    names and attached, the resync awaited (WaitForSync), the devices checked on the primary,
    the old LVs removed. `indices`: only these disks (default: all)."""
    if inst.disk_template not in disks.INT_MIRROR:
        raise OpPrereqError(f"instance {inst.name} is not DRBD-mirrored; replace-disks "
                            "needs a mirror", "wrong_input")
    chosen = [(index, disk) for index, disk in enumerate(inst.disks)
              if indices is None or index in indices]
    other = config.nodes[next(n for n in inst.all_nodes if n != node.uuid)]
    feedback("STEP 1/6 Check device existence")
    for index, disk in chosen:
        for here in (other, node):
            disks.find_or_fail(env, here, diskobjects.disk_object(config, inst, disk, here.uuid),
                               f"disk/{index}")
    disks.check_volume_group(env, config, [node, other], feedback)
    feedback("STEP 2/6 Check peer consistency")
    for _index, disk in chosen:
        if not disks.check_disk_consistency(env, config, inst, disk, other,
                                            other.uuid == inst.primary_node):
            raise OpExecError(f"Node {other.name} has degraded storage, unsafe to replace "
                              f"disks for instance {inst.name}")
    feedback("STEP 3/6 Allocate new storage")
    stamp = int(time.time())
    new_children: list[list[Disk]] = []
    created: disks.Created = []
    try:
        for _index, disk in chosen:
            obj = diskobjects.disk_object(config, inst, disk, node.uuid)
            fresh = []
            for child in obj.children:
                vg, lv = child.plain_id.vg, child.plain_id.lv
                new = msgspec.structs.replace(child, uuid=model.new_uuid(),
                                              logical_id=[vg, f"{lv}.new-{stamp}"])
                disks.create_tree(env, node, inst, new, True, False, created)
                fresh.append(new)
            new_children.append(fresh)
    except HerderError as err:
        disks.undo_create_disks(env, inst, created, feedback=feedback)
        raise OpExecError(f"allocating new storage on {node.name} failed: {err}") from None
    feedback("STEP 4/6 Changing drbd configuration")
    old_renamed: list[Disk] = []
    for (_index, disk), fresh in zip(chosen, new_children, strict=True):
        obj = diskobjects.disk_object(config, inst, disk, node.uuid)
        old = obj.children
        env.rpc.call(node, disk_calls.BlockdevRemovechildren(disk=obj, ndevs=old))
        renames: list[tuple[Disk, list[str | int]]] = []
        for child in old:
            try:
                present = env.rpc.call(node, disk_calls.BlockdevFind(disk=child))
            except HerderError:
                present = None
            replaced: list[str | int] = [child.plain_id.vg,
                                         f"{child.plain_id.lv}_replaced-{stamp}"]
            if present is not None:
                renames.append((child, replaced))
            old_renamed.append(child.with_logical_id(replaced))
        env.rpc.call(node, disk_calls.BlockdevRename(devlist=renames))
        env.rpc.call(node, disk_calls.BlockdevRename(devlist=[
            (new, list(child.logical_id)) for new, child in zip(fresh, old, strict=True)]))
        attached = [new.with_logical_id(child.logical_id)
                    for new, child in zip(fresh, old, strict=True)]
        env.rpc.call(node, disk_calls.BlockdevAddchildren(disk=obj, ndevs=attached))
    finish_replacement(env, config, inst, node, old_renamed, early_release=early_release,
                       replaced=[disk for _index, disk in chosen], feedback=feedback)


def finish_replacement(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                       node: model.Node, old_lvs: list[Disk], *, early_release: bool,
                       replaced: list[model.Disk] | None = None,
                       feedback: Feedback = quiet) -> None:
    """The end of Ganeti's replace-disks: the resync awaited (WaitForSync, all the
    instance's disks), the replaced devices (`replaced`, default all) checked on the primary,
    the old LVs on `node` removed — before the wait with `early_release`."""
    def remove_old() -> None:
        feedback("Removing old storage")
        for old in old_lvs:
            try:
                env.rpc.call(node, disk_calls.BlockdevRemove(disk=old))
            except HerderError as err:
                feedback(f"can't remove old LV {old.plain_id.lv} on {node.name}: {err};"
                         " remove it by hand")

    if early_release:
        remove_old()
    feedback("Sync devices")
    disks.wait_for_sync(env, config, inst, feedback=feedback)
    disks.check_devices(env, config, inst, replaced)
    if not early_release:
        remove_old()


def change_secondary(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                     new: model.Node, feedback: Feedback, *,
                     early_release: bool = False) -> None:
    """Replace a DRBD instance's secondary with `new` (Ganeti's replace-disks -n,
    TLReplaceDisks._ExecDrbd8Secondary): the disks found, the volume group (`vg_list`) and the
    disks' consistency checked on the primary, the new data and metadata LVs, then the DRBD
    devices, on `new`, the old secondary's DRBD shut down, the primary standalone, the config
    pointed at `new`, the primary and `new` connected (a full resync, awaited), the devices
    checked, the old LVs removed."""
    old_uuid = inst.secondary_nodes[0]
    old = config.nodes.get(old_uuid)
    moved = msgspec.structs.replace(inst, disks=[msgspec.structs.replace(d)
                                                 for d in inst.disks])
    taken: set[int] = set()
    for disk in moved.disks:
        lid = disk.logical_id
        if isinstance(lid, model.DrbdId) and old_uuid in lid.nodes:
            minor = free_minor(config, new.uuid, taken)
            taken.add(minor)
            index = lid.nodes.index(old_uuid)
            disk.logical_id = model.DrbdId(
                nodes=[new.uuid if n == old_uuid else n for n in lid.nodes], port=lid.port,
                minors=[minor if i == index else m for i, m in enumerate(lid.minors)],
                secret=lid.secret)
    primary = config.nodes[inst.primary_node]
    for index, disk in enumerate(inst.disks):  # STEP 1/6 Check device existence
        disks.find_or_fail(env, primary,
                           diskobjects.disk_object(config, inst, disk, primary.uuid),
                           f"disk/{index}")
    disks.check_volume_group(env, config, [primary], feedback)  # Ganeti's: the primary only
    for disk in inst.disks:  # STEP 2/6 Check peer consistency
        if not disks.check_disk_consistency(env, config, inst, disk, primary, True, True):
            raise OpExecError(f"Node {primary.name} has degraded storage, unsafe to replace "
                              f"disks for instance {inst.name}")
    created: disks.Created = []
    try:  # STEP 3/6 the new LVs, then (4/6) the new DRBD devices on `new`
        objs = [diskobjects.disk_object(config, moved, disk, new.uuid) for disk in moved.disks]
        for obj in objs:
            for child in obj.children:
                disks.create_tree(env, new, moved, child, True, False, created)
        for obj in objs:
            env.rpc.call(new, disk_calls.BlockdevCreate(
                disk=obj, size=obj.size, owner=inst.name, on_primary=False,
                info=disks.info_text(inst)))
            created.append((new, obj))
    except HerderError as err:
        disks.undo_create_disks(env, moved, created, feedback=feedback)
        raise OpExecError(f"allocating the new storage of {inst.name} on {new.name} failed: "
                          f"{err}") from None
    if old is not None and not old.offline:
        disks.shutdown_disks(env, config, inst, nodes=[old], feedback=feedback)
    env.rpc.call(primary, disk_calls.DrbdDisconnectNet(
        disks=diskobjects.disk_objects(config, inst, primary.uuid)))
    with env.store.update() as fresh:
        target = fresh.instances[inst.uuid]
        target.disks = moved.disks
        target.touch()
        config = fresh
    for node in (primary, new):
        env.rpc.call(node, disk_calls.DrbdAttachNet(
            disks=diskobjects.disk_objects(config, moved, node.uuid), instance=inst.name))
    old_lvs = [child for disk in inst.disks
               for child in diskobjects.disk_object(config, inst, disk, old_uuid).children]
    if old is None or old.offline:  # nothing to remove there
        disks.wait_for_sync(env, config, moved, feedback=feedback)
        disks.check_devices(env, config, moved)
    else:  # STEPS 5-6/6: the resync awaited, the old LVs removed (first: early_release)
        finish_replacement(env, config, moved, old, old_lvs, early_release=early_release,
                           feedback=feedback)
    feedback(f"{inst.name}: secondary moved to {new.name}")
