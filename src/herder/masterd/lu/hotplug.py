"""Hotplug from the master, as Ganeti 3.0's LUInstanceSetParams (_CheckHotplug,
_HotplugDevice): whether the primary can hotplug into the running instance (`supported`:
refused with --hotplug, a warning with --hotplug-if-possible), then one `hotplug_device` call
per disk or NIC change once the config holds it. A hotplug that fails is a warning and the
change stays in the config for the next start (Ganeti's "hotplug:failed"). A modified NIC is
unplugged and plugged again with its new parameters (Ganeti's HotModDevice for NICs).
`resize` tells a running instance's QEMU that a disk grew (herder's; Ganeti 3.0 leaves that
to the next start).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from herder.core import model
from herder.core.errors import HerderError, OpPrereqError
from herder.core.rpcdefs import hotplug_calls
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd.lu import nics
from herder.masterd.lu.base import MasterEnv

Feedback = Callable[[str], None]


def supported(env: MasterEnv, config: model.ConfigData, inst: model.Instance, *, required: bool,
              feedback: Feedback) -> bool:
    """Ganeti's _CheckHotplug: True when the primary can hotplug into the instance."""
    node = config.nodes[inst.primary_node]
    try:
        env.rpc.call(node, hotplug_calls.HotplugSupported(name=inst.name))
    except HerderError as err:
        if required:
            raise OpPrereqError(f"Hotplug is not possible: {err}", "wrong_state") from None
        feedback(f"WARNING: {err}")
        feedback("Modification will take place without hotplugging.")
        return False
    return True


def device(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
           action: Literal["add", "remove"], kind: Literal["disk", "nic"], index: int,
           uuid: str, feedback: Feedback) -> str:
    """One device plugged in or out of the running instance: Ganeti's `hotplug:done` or
    `hotplug:failed` (a warning; the config keeps the change)."""
    feedback("Trying to hotplug device...")
    try:
        env.rpc.call(config.nodes[inst.primary_node], hotplug_calls.HotplugDevice(
            instance=instance_payload(config, inst), action=action, dev_type=kind,
            index=index, uuid=uuid))
    except HerderError as err:
        feedback(f"WARNING: Could not hotplug device: {err}")
        feedback("Continuing execution..")
        return "hotplug:failed"
    feedback("Hotplug done.")
    return "hotplug:done"


def nic_changes(env: MasterEnv, config: model.ConfigData, inst_uuid: str,
                changes: Iterable[nics.NicChange], feedback: Feedback) -> list[list[str]]:
    """Hotplug the NIC changes just written (`config` holds them)."""
    inst = config.instances[inst_uuid]
    rows = []
    for change in changes:
        index = next((i for i, nic in enumerate(inst.nics) if nic.uuid == change.nic.uuid),
                     change.index)
        if change.action == nics.REMOVE:
            result = device(env, config, inst, "remove", "nic", index, change.nic.uuid,
                            feedback)
        elif change.action == nics.ADD:
            result = device(env, config, inst, "add", "nic", index, change.nic.uuid, feedback)
        else:
            result = device(env, config, inst, "remove", "nic", index, change.nic.uuid,
                            feedback)
            if result == "hotplug:done":
                result = device(env, config, inst, "add", "nic", index, change.nic.uuid,
                                feedback)
        rows.append([f"nic.{change.index}" if change.action != nics.MODIFY
                     else f"nic/{change.index}", result])
    return rows


def resize(env: MasterEnv, config: model.ConfigData, inst: model.Instance, disk: model.Disk,
           feedback: Feedback) -> bool:
    """Tell the running instance's QEMU the disk's new size; a failure is a warning (the
    guest sees the size at its next start)."""
    try:
        env.rpc.call(config.nodes[inst.primary_node], hotplug_calls.InstanceDiskResize(
            name=inst.name, uuid=disk.uuid, size=disk.size))
    except HerderError as err:
        feedback(f"WARNING: the running instance was not told of the new size: {err}")
        return False
    feedback(f"{inst.name} sees {disk.iv_name} at {disk.size} MiB now")
    return True
