"""OP_INSTANCE_RECREATE_DISKS: make an instance's lost disks again (empty), in Ganeti's order
(cmdlib/instance_storage.py LUInstanceRecreateDisks): the instance must be down; the disks
named (all by default; `[index, {size, mode, spindles}]` changes them first) are created on
the instance's nodes, or with `nodes` on new ones (the config points there first; whatever is
left on the old nodes is the operator's to remove, as Ganeti warns)."""

from __future__ import annotations

from typing import Any

from herder.core import model
from herder.core.errors import OpPrereqError
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup

CHANGEABLE = ("size", "mode", "spindles")


def wanted_disks(inst: model.Instance, spec: list[Any]) -> dict[int, dict[str, Any]]:
    """Index -> changes of the disks to recreate (Ganeti's TRecreateDisksInfo)."""
    if not spec:
        return {index: {} for index in range(len(inst.disks))}
    wanted: dict[int, dict[str, Any]] = {}
    for item in spec:
        index, changes = (item, {}) if isinstance(item, int) else (item[0], dict(item[1]))
        if not isinstance(index, int) or not 0 <= index < len(inst.disks):
            raise OpPrereqError(f"instance {inst.name} has no disk {index}", "wrong_input")
        unknown = sorted(set(changes) - set(CHANGEABLE))
        if unknown:
            raise OpPrereqError(f"disk {index}: cannot change {', '.join(unknown)} when "
                                "recreating", "wrong_input")
        wanted[index] = changes
    return wanted


class InstanceRecreateDisks(LogicalUnit[opcodes.OpInstanceRecreateDisks]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        inst = lookup(config.find_instance, self.op.instance_name)
        nodes = set(inst.all_nodes) | {lookup(config.find_node, n).uuid for n in self.op.nodes}
        return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                LockRequest(locking.LEVEL_NODE, sorted(nodes))]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        inst = lookup(config.find_instance, op.instance_name)
        if op.iallocator:
            raise OpPrereqError("recreate-disks with an iallocator is not supported; name the "
                                "nodes", "wrong_input")
        if inst.admin_state == "up":
            raise OpPrereqError(f"instance {inst.name} is running; shut it down before "
                                "recreating its disks", "wrong_state")
        self.nodes = [lookup(config.find_node, n) for n in op.nodes]
        if self.nodes and len(self.nodes) != len(set(inst.all_nodes)):
            raise OpPrereqError(f"instance {inst.name} needs {len(set(inst.all_nodes))} "
                                f"node(s), {len(self.nodes)} given", "wrong_input")
        if self.nodes and inst.disk_template == "drbd":
            raise OpPrereqError("moving DRBD disks to new nodes by recreate-disks is not "
                                "supported; use replace-disks -n", "wrong_input")
        for node in self.nodes or [config.nodes[u] for u in inst.all_nodes]:
            if node.offline:
                raise OpPrereqError(f"node {node.name} is offline", "wrong_state")
        self.wanted = wanted_disks(inst, op.disks)
        self.inst = inst

    def execute(self) -> JobResult:
        with self.env.store.update() as fresh:
            inst = fresh.instances[self.inst.uuid]
            for index, changes in self.wanted.items():
                disk = inst.disks[index]
                for key in CHANGEABLE:
                    if changes.get(key) is not None:
                        setattr(disk, key, changes[key])
            if self.nodes:
                self.feedback("changing the instance's nodes: remove any disks left on the "
                              "old nodes by hand")
                inst.primary_node = self.nodes[0].uuid
            inst.touch()
        config = self.env.store.load()
        inst = config.instances[self.inst.uuid]
        disks.create_disks(self.env, config, inst,
                           disks=[inst.disks[i] for i in sorted(self.wanted)],
                           feedback=self.feedback)
        return [inst.disks[i].iv_name for i in sorted(self.wanted)]
