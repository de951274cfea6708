"""OP_INSTANCE_GROW_DISK: grow one disk of an instance through every layer, in Ganeti's order
(cmdlib/instance_storage.py LUInstanceGrowDisk): the disks assembled, a dry run of the grow on
every node of the instance, the storage grown on every node (`backingstore`), the logical
layer on the primary (DRBD's device over its grown LVs), the new size recorded, then (with
`wait_for_sync`) the mirror's resync awaited and the disk shut down again when the instance's
disks were not active; only the grown disk is assembled and shut down, as Ganeti's are. On an
instance marked up the running QEMU is told the new size (block resize, `hotplug.resize`) so
the guest sees it without a reboot (herder's; Ganeti 3.0 leaves it to the next start)."""

from __future__ import annotations

from herder.core import diskobjects, model
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.core.rpcdefs import disk_calls
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks, hotplug
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup

# Ganeti's DTS_GROWABLE
GROWABLE = frozenset({"plain", "drbd", "file", "sharedfile", "rbd", "ext", "gluster"})


def record_grow(disk: model.Disk, delta: int) -> None:
    """Ganeti's Disk.RecordGrow: the disk and the data children that grew with it."""
    disk.size += delta
    if disk.dev_type == "drbd" and disk.children:
        record_grow(disk.children[0], delta)


class InstanceGrowDisk(LogicalUnit[opcodes.OpInstanceGrowDisk]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        inst = lookup(config.find_instance, self.op.instance_name)
        return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                LockRequest(locking.LEVEL_NODE, sorted(set(inst.all_nodes)))]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        inst = lookup(config.find_instance, op.instance_name)
        if inst.disk_template not in GROWABLE:
            raise OpPrereqError(f"instance {inst.name}: {inst.disk_template} disks cannot be "
                                "grown", "wrong_input")
        if not 0 <= op.disk < len(inst.disks):
            raise OpPrereqError(f"instance {inst.name} has no disk {op.disk}", "wrong_input")
        for node_uuid in inst.all_nodes:
            node = config.nodes.get(node_uuid)
            if node is None or node.offline:
                raise OpPrereqError(f"node {config.node_name(node_uuid)} of {inst.name} is "
                                    "offline: the disk cannot grow there", "wrong_state")
        disk = inst.disks[op.disk]
        target = op.amount if op.absolute else disk.size + op.amount
        if op.amount < 0 or target < disk.size:
            raise OpPrereqError(f"requested size ({target} MiB) is smaller than the current "
                                f"disk size ({disk.size} MiB)", "wrong_input")
        self.inst, self.delta, self.target = inst, target - disk.size, target

    def dry_run_result(self) -> JobResult:
        return self.target

    def _grow(self, config: model.ConfigData, node_uuid: str, *, dryrun: bool,
              backingstore: bool) -> None:
        disk = self.inst.disks[self.op.disk]
        self.env.rpc.call(config.nodes[node_uuid], disk_calls.BlockdevGrow(
            disk=diskobjects.disk_object(config, self.inst, disk, node_uuid),
            amount=self.delta, dryrun=dryrun, backingstore=backingstore))

    def execute(self) -> JobResult:
        op, inst = self.op, self.inst
        config = self.env.store.load()
        if self.delta == 0:
            self.feedback(f"disk/{op.disk} of {inst.name} is {self.target} MiB already")
            return self.target
        disks.assemble_disks(self.env, config, inst, disks=[inst.disks[op.disk]],
                             feedback=self.feedback)
        self.feedback(f"growing disk/{op.disk} of {inst.name} by {self.delta} MiB to "
                      f"{self.target} MiB")
        try:
            for node_uuid in inst.all_nodes:
                self._grow(config, node_uuid, dryrun=True, backingstore=True)
        except HerderError as err:
            raise OpExecError(f"dry-run grow request failed: {err}") from None
        for node_uuid in inst.all_nodes:
            self._grow(config, node_uuid, dryrun=False, backingstore=True)
        self._grow(config, inst.primary_node, dryrun=False, backingstore=False)
        with self.env.store.update() as fresh:
            grown = fresh.instances[inst.uuid]
            record_grow(grown.disks[op.disk], self.delta)
            grown.touch()
        if inst.admin_state == "up":  # the running guest sees the new size at once (herder's)
            fresh_config = self.env.store.load()
            grown = fresh_config.instances[inst.uuid]
            hotplug.resize(self.env, fresh_config, grown, grown.disks[op.disk], self.feedback)
        if op.wait_for_sync:
            fresh_config = self.env.store.load()
            grown = fresh_config.instances[inst.uuid]
            if not disks.wait_for_sync(self.env, fresh_config, grown,
                                       [grown.disks[op.disk]], feedback=self.feedback):
                self.feedback("Disk syncing has not returned a good status; check the "
                              "instance")
            if not grown.disks_active:
                disks.shutdown_disks(self.env, fresh_config, grown,
                                     disks=[grown.disks[op.disk]], feedback=self.feedback)
        return self.target
