"""OP_INSTANCE_MOVE: move an instance whose disks live on its node alone (plain, file) to another
node, copying the disks' bytes over the network, in Ganeti's order (cmdlib/instance.py
LUInstanceMove): shut it down on the source, create the disks on the target, copy each disk
(the target prepares an import, the source streams its device to the target's noded:
`noded.disk_transfer`), point the config at the target, remove the source's copy (domain and
disks), start it on the target when it was up. A failed copy removes what was made on the
target and leaves the instance on the source (started again when it was up)."""

from __future__ import annotations

from typing import Any

from herder.core import diskobjects, model, ports, vmclaim
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.core.noderpc import instance_payload
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks
from herder.masterd.lu.base import LockRequest, LogicalUnit, instance_and_node_locks, lookup

# Ganeti's DTS_COPYABLE: the templates whose disks a move copies
COPYABLE = frozenset({"plain", "file"})
COPY_TIMEOUT = 6 * 3600.0  # seconds for one disk's copy


def copy_disk(env: Any, config: model.ConfigData, inst: model.Instance, index: int,
              source: model.Node, target: model.Node) -> Any:
    """Copy one disk's bytes from `source` to the same disk on `target` (made already)."""
    disk = inst.disks[index]
    prepared = env.rpc.call(target, "blockdev_import_prepare", {
        "disk": diskobjects.disk_object(config, inst, disk, target.uuid),
        "instance": inst.name, "idx": index})
    return env.rpc.call(source, "blockdev_export", {
        "disk": diskobjects.disk_object(config, inst, disk, source.uuid),
        "instance": inst.name, "idx": index, "token": prepared["token"],
        "target": {"name": target.name, "address": target.primary_ip,
                   "port": getattr(env.rpc, "port", ports.NODED)}},
        timeout=COPY_TIMEOUT)


class InstanceMove(LogicalUnit[opcodes.OpInstanceMove]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return instance_and_node_locks(config, self.op.instance_name, self.op.target_node)

    def check(self, config: model.ConfigData) -> None:
        inst = lookup(config.find_instance, self.op.instance_name)
        target = lookup(config.find_node, self.op.target_node)
        source = config.nodes.get(inst.primary_node)
        if source is None:
            raise OpPrereqError(f"instance {inst.name}: its primary node is unknown")
        if target.uuid == source.uuid:
            raise OpPrereqError(f"instance {inst.name} is already on {target.name}",
                                "wrong_input")
        if inst.disk_template not in COPYABLE:
            raise OpPrereqError(
                f"instance {inst.name} has {inst.disk_template} disks; a move copies plain "
                "and file disks (the others move with failover or migrate)", "wrong_input")
        if target.offline or target.drained or not target.vm_capable:
            raise OpPrereqError(f"target node {target.name} is offline, drained or not vm "
                                "capable", "wrong_state")
        if source.offline:
            raise OpPrereqError(f"the primary node {source.name} of {inst.name} is offline: "
                                "its disks cannot be copied", "wrong_state")
        self.inst, self.source, self.target = inst, source, target

    def dry_run_result(self) -> Any:
        return [self.source.name, self.target.name]

    def execute(self) -> Any:
        op, env = self.op, self.env
        config = env.store.load()
        inst = config.instances[self.inst.uuid]
        source, target = config.nodes[self.source.uuid], config.nodes[self.target.uuid]
        running = inst.admin_state == "up"
        base = {"name": inst.name, "reason": op.reason, "version": inst.serial_no}
        self.feedback(f"shutting down {inst.name} on {source.name}")
        try:
            env.rpc.call(source, "instance_shutdown", {
                **base, "timeout": op.shutdown_timeout,
                vmclaim.CLAIM_KEY: vmclaim.claim_for(config, inst)})
        except HerderError as err:
            if not op.ignore_consistency:
                raise OpExecError(f"could not shut down {inst.name} on {source.name}: "
                                  f"{err}") from None
            self.feedback(f"could not shut down {inst.name} on {source.name}, proceeding "
                          f"anyway (make sure it is down): {err}")
        disks.create_disks(env, config, inst, target=target, feedback=self.feedback)
        try:
            for index, disk in enumerate(inst.disks):
                copied = copy_disk(env, config, inst, index, source, target)
                self.feedback(f"{disk.iv_name}: {copied.get('bytes')} bytes copied to "
                              f"{target.name}")
        except HerderError as err:
            self.feedback("some disks failed to copy, aborting")
            disks.remove_disks(env, config, inst, target=target, feedback=self.feedback)
            if running:
                env.rpc.call(source, "instance_start", {
                    **base, "instance": instance_payload(config, inst),
                    vmclaim.CLAIM_KEY: vmclaim.claim_for(config, inst)})
            raise OpExecError(f"errors during the disk copy of {inst.name} to {target.name}: "
                              f"{err}; it stays on {source.name}") from None
        with env.store.update() as fresh:
            moved = fresh.instances[inst.uuid]
            moved.primary_node = target.uuid
            moved.touch()
        config = env.store.load()
        moved = config.instances[inst.uuid]
        claim = vmclaim.claim_for(config, moved)
        try:  # the source's copy: its domain, then its disks
            env.rpc.call(source, "instance_stop_stray", {**base, "version": moved.serial_no,
                                                         vmclaim.CLAIM_KEY: claim})
        except HerderError as err:
            self.feedback(f"could not remove the domain on {source.name}: {err}")
        self.feedback(f"removing the disks on the original node {source.name}")
        disks.remove_disks(env, config, inst, target=source, feedback=self.feedback)
        args = {**base, "version": moved.serial_no, "instance": instance_payload(config, moved),
                vmclaim.CLAIM_KEY: claim}
        if running:
            self.feedback(f"starting {inst.name} on {target.name}")
            disks.assemble_disks(env, config, moved, ignore_secondaries=True,
                                 feedback=self.feedback)
            env.rpc.call(target, "instance_start", args)
        else:
            env.rpc.call(target, "instance_define", args)
        return target.name
