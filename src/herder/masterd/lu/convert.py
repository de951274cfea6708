"""Disk template conversion plain <-> drbd (`modify -t drbd -n SECONDARY` / `modify -t plain`),
in Ganeti 3.0's step order (cmdlib/instance_set_params.py: _PreCheckDiskTemplate,
_ConvertPlainToDrbd, _ConvertDrbdToPlain, and Exec's ShutdownInstanceDisks before either).

plain -> drbd: the disks shut down; per disk the metadata LV made on the primary, the data and
metadata LVs on the secondary ("Creating additional volumes..."); the primary's LVs renamed to
the DRBD data names ("Renaming original volumes..."); per disk the DRBD device made on the
primary (opened) and on the secondary ("Initializing DRBD devices..."); the config switched;
the resync awaited. The data never leaves its LV: the primary's LV becomes DRBD's data device.

drbd -> plain: the disks shut down; the config switched to each disk's data LV; the secondary's
DRBD devices with their LVs removed ("Removing volumes on the secondary node..."), then the
primary's metadata LVs ("Removing unneeded volumes on the primary node...").

A failure before the config switch leaves the config and the devices as they were: the
original LVs renamed back (as Ganeti), and also (herder, compat row B23) the LVs and DRBD
devices this conversion made removed again — never a DRBD device on the primary with its
children, which would take the original data with it: that one is only shut down.
"""

from __future__ import annotations

import copy

import msgspec

from herder.core import diskobjects, model, params
from herder.core.diskobjects import Disk
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.core.rpcdefs import disk_calls
from herder.masterd.lu import diskgen, disks
from herder.masterd.lu.base import MasterEnv

CONVERSIONS = frozenset({("plain", "drbd"), ("drbd", "plain")})


def check(config: model.ConfigData, inst: model.Instance, template: str,
          remote_node: model.Node | None, *, running: bool) -> model.Node | None:
    """Ganeti's _PreCheckDiskTemplate for the conversions herder makes; the new secondary
    (plain -> drbd) or None. OpPrereqError otherwise."""
    current = inst.disk_template
    if current == template:
        raise OpPrereqError(f"Instance already has disk template {template}", "wrong_input")
    if template not in params.DISK_TEMPLATES:
        raise OpPrereqError(f"unknown disk template {template!r}", "wrong_input")
    if (current, template) not in CONVERSIONS:
        raise OpPrereqError(f"Conversion from the '{current}' disk template to '{template}' "
                            "is not supported (herder converts plain <-> drbd)", "wrong_input")
    c = config.cluster
    if template not in c.enabled_disk_templates:
        raise OpPrereqError(f"Disk template '{template}' is not enabled for this cluster "
                            f"(enabled templates: {', '.join(c.enabled_disk_templates)})",
                            "wrong_state")
    if inst.admin_state != "down":
        raise OpPrereqError(f"Instance '{inst.name}' is marked to be {inst.admin_state}, "
                            "cannot change disk template", "wrong_state")
    if running:
        raise OpPrereqError(f"Instance {inst.name} is running, cannot change disk template",
                            "wrong_state")
    group = config.instance_group(inst)
    if group is not None:
        allowed = config.filled_ipolicy(group).disk_templates
        if template not in allowed:
            raise OpPrereqError(f"Disk template '{template}' in not allowed (allowed "
                                f"templates: {', '.join(allowed)})", "wrong_state")
    if template != "drbd":
        return None
    if remote_node is None:
        raise OpPrereqError("Changed the disk template to drbd, but neither an iallocator "
                            "nor a secondary node was given (-n NODE)", "wrong_input")
    if remote_node.uuid == inst.primary_node:
        raise OpPrereqError(f"Given new secondary node {remote_node.name} is the same as the "
                            "primary node of the instance", "wrong_state")
    if remote_node.offline:
        raise OpPrereqError(f"Can't use offline node {remote_node.name}", "wrong_state")
    if remote_node.drained:
        raise OpPrereqError(f"Can't use drained node {remote_node.name}", "wrong_state")
    if not remote_node.vm_capable:
        raise OpPrereqError(f"Can't use non-vm_capable node {remote_node.name}",
                            "wrong_state")
    return remote_node


def _create(env: MasterEnv, node: model.Node, inst: model.Instance, obj: Disk,
            force_open: bool, made: disks.Created) -> None:
    """Ganeti's CreateSingleBlockDev: this one device, not its children."""
    env.rpc.call(node, disk_calls.BlockdevCreate(
        disk=obj, size=obj.size, owner=inst.name, on_primary=force_open,
        info=disks.info_text(inst)))
    made.append((node, obj))


def plain_to_drbd(env: MasterEnv, inst_uuid: str, secondary: model.Node, *, wait_for_sync: bool,
                  feedback: disks.Feedback) -> None:
    feedback("Converting disk template from 'plain' to 'drbd'")
    config = env.store.load()
    inst = config.instances[inst_uuid]
    primary = config.nodes[inst.primary_node]
    old_disks = list(inst.disks)
    reserved = diskgen.Reservations()
    new_disks = [
        diskgen.drbd_disk(config, (primary.uuid, secondary.uuid),
                          f"{model.new_uuid()}.disk{index}", old.size, reserved,
                          {"uuid": model.new_uuid(), "size": old.size, "mode": old.mode,
                           "iv_name": f"disk/{index}", "name": old.name,
                           "ctime": model.now(), "mtime": model.now()}, data=old)
        for index, old in enumerate(old_disks)]
    # a view with the new disks (their objects need the instance's group), never stored
    view = msgspec.structs.replace(inst, disks=new_disks)
    objects = {node.uuid: [diskobjects.disk_object(config, view, disk, node.uuid)
                           for disk in new_disks] for node in (primary, secondary)}
    made: disks.Created = []
    feedback("Creating additional volumes...")
    try:
        for p_obj, s_obj in zip(objects[primary.uuid], objects[secondary.uuid], strict=True):
            _create(env, primary, inst, p_obj.children[1], True, made)
            for child in s_obj.children:
                _create(env, secondary, inst, child, True, made)
    except HerderError as err:
        _undo(env, inst, made, feedback)
        raise OpExecError(f"creating the DRBD volumes of {inst.name} failed: {err}") from None
    feedback("Renaming original volumes...")
    renames = [(diskobjects.disk_object(config, inst, old, primary.uuid),
                list(p_obj.children[0].logical_id))
               for old, p_obj in zip(old_disks, objects[primary.uuid], strict=True)]
    try:
        env.rpc.call(primary, disk_calls.BlockdevRename(devlist=renames))
    except HerderError as err:
        _undo(env, inst, made, feedback)
        raise OpExecError(f"Failed to rename original LVs: {err}") from None
    feedback("Initializing DRBD devices...")
    drbd_made: disks.Created = []
    try:
        for index in range(len(new_disks)):
            for node in (primary, secondary):
                _create(env, node, inst, objects[node.uuid][index], node is primary,
                        drbd_made)
    except HerderError as err:
        feedback("Initializing of DRBD devices failed; renaming back original volumes...")
        for node, obj in reversed(drbd_made):
            _release_drbd(env, node, obj, remove=node is not primary, feedback=feedback)
        back = [(p_obj.children[0], diskobjects.logical_id(old.logical_id))
                for old, p_obj in zip(old_disks, objects[primary.uuid], strict=True)]
        try:
            env.rpc.call(primary, disk_calls.BlockdevRename(devlist=back))
        except HerderError as back_err:
            raise OpExecError(f"Failed to rename LVs back after error {err}: {back_err}") \
                from None
        _undo(env, inst, made, feedback)
        raise OpExecError(f"initializing the DRBD devices of {inst.name} failed: {err}") \
            from None
    with env.store.update() as fresh:
        stored = fresh.instances[inst_uuid]
        stored.disks = new_disks
        fresh.cluster.highest_used_port = max(
            [fresh.cluster.highest_used_port]
            + [d.logical_id.port for d in new_disks if isinstance(d.logical_id, model.DrbdId)])
        stored.touch()
    fresh_config = env.store.load()
    converted = fresh_config.instances[inst_uuid]
    if wait_for_sync:
        try:
            disks.wait_for_sync(env, fresh_config, converted)
        except HerderError as err:
            raise OpExecError("There are some degraded disks for this instance, please "
                              f"cleanup manually ({err})") from None


def _release_drbd(env: MasterEnv, node: model.Node, obj: Disk, *, remove: bool,
                  feedback: disks.Feedback) -> None:
    """Undo one DRBD device this conversion made: removed with its (new) LVs on the
    secondary, only shut down on the primary (its data LV is the original one)."""
    try:
        if remove:
            env.rpc.call(node, disk_calls.BlockdevRemove(disk=obj))
        else:
            env.rpc.call(node, disk_calls.BlockdevShutdown(
                disk=msgspec.structs.replace(obj, children=[])))
    except HerderError as err:
        feedback(f"could not release the new DRBD device on {node.name}: {err}")


def _undo(env: MasterEnv, inst: model.Instance, made: disks.Created,
          feedback: disks.Feedback) -> None:
    if made:
        feedback("removing the volumes this conversion made")
        disks.undo_create_disks(env, inst, list(reversed(made)), feedback=feedback)


def drbd_to_plain(env: MasterEnv, inst_uuid: str, feedback: disks.Feedback) -> None:
    config = env.store.load()
    inst = config.instances[inst_uuid]
    if len(inst.secondary_nodes) != 1:
        raise OpExecError(f"instance {inst.name} has no single DRBD secondary")
    secondary = config.nodes[inst.secondary_nodes[0]]
    feedback("Converting disk template from 'drbd' to 'plain'")
    old_disks = list(inst.disks)
    new_disks = []
    for old in old_disks:
        data = copy.deepcopy(old.children[0])
        data.size, data.mode, data.name, data.iv_name = old.size, old.mode, old.name, \
            old.iv_name
        new_disks.append(data)
    with env.store.update() as fresh:
        stored = fresh.instances[inst_uuid]
        stored.disks = new_disks
        stored.touch()
    feedback("Removing volumes on the secondary node...")
    disks.remove_disks(env, config, inst, disks=old_disks, target=secondary, feedback=feedback)
    feedback("Removing unneeded volumes on the primary node...")
    disks.remove_disks(env, config, inst, disks=[old.children[1] for old in old_disks],
                       feedback=feedback)
