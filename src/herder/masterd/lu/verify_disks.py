"""OP_GROUP_VERIFY_DISKS and OP_CLUSTER_VERIFY_DISKS (`herder cluster verify-disks`), as
Ganeti 3.0's LUGroupVerifyDisks / LUClusterVerifyDisks (cmdlib/group.py,
cmdlib/cluster/verify.py): for the instances whose disks should be active, every VM-capable
node of the group lists its LVs (`lv_list`): an LV that is missing is reported with its node,
one that is not open means the instance needs activate-disks; the nodes of active DRBD
instances say which of their devices are standalone, diskless or not there
(`drbd_needs_activation`). A node that cannot answer is reported by name."""

from __future__ import annotations

from herder.core import diskobjects, model, verify
from herder.core.errors import HerderError
from herder.core.rpcdefs import disk_calls
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, MasterEnv, lookup


def instance_lvs_by_node(inst: model.Instance) -> dict[tuple[str, str], model.Instance]:
    """(node UUID, `vg/lv`) -> the instance, for every LV of its disks (Ganeti's
    MapInstanceLvsToNodes)."""
    found: dict[tuple[str, str], model.Instance] = {}
    for disk in inst.disks:
        for node_uuid in disks.disk_nodes(inst, disk):
            for volume in verify.instance_lvs(disk):
                found[(node_uuid, volume)] = inst
    return found


def verify_group_disks(env: MasterEnv, config: model.ConfigData,
                       group: model.NodeGroup) -> list[JobResult]:
    """[node name -> error, instance names needing activate-disks, instance name -> [[node
    name, volume], ...], node name -> [volume, ...] no instance has there] for one group
    (Ganeti's LUGroupVerifyDisks.Exec; the fourth, the orphan volumes, is herder's: compat
    B24)."""
    node_errors: dict[str, str] = {}
    needs_activation: set[str] = set()
    missing: dict[str, list[list[str]]] = {}
    instances = [i for i in config.instances.values()
                 if (g := config.instance_group(i)) is not None and g.uuid == group.uuid]
    active = [i for i in instances if i.disks_active]
    expected: dict[tuple[str, str], model.Instance] = {}
    for inst in active:
        expected.update(instance_lvs_by_node(inst))
    nodes = sorted((n for n in config.nodes.values()
                    if n.group == group.uuid and n.vm_capable), key=lambda n: n.name)
    listings: dict[str, dict[str, tuple[str, bool, bool]]] = {}
    if expected or config.cluster.volume_group_name:
        for node in nodes:
            if node.offline:
                continue
            try:
                listed = env.rpc.call(node, disk_calls.LvList())
            except HerderError as err:
                node_errors[node.name] = str(err)
                continue
            listings[node.uuid] = listed
            for volume, facts in listed.items():
                owner = expected.pop((node.uuid, volume), None)
                if owner is not None and not facts[2]:  # not open: not in use
                    needs_activation.add(owner.name)
        for (node_uuid, volume), inst in sorted(expected.items(),
                                                key=lambda kv: (kv[1].name, kv[0])):
            missing.setdefault(inst.name, []).append([config.node_name(node_uuid), volume])
    by_node: dict[str, list[model.Instance]] = {}
    for inst in active:
        if any(d.dev_type == "drbd" for d in inst.disks):
            for node_uuid in [inst.primary_node, *inst.secondary_nodes]:
                by_node.setdefault(node_uuid, []).append(inst)
    for node_uuid, owners in sorted(by_node.items()):
        drbd_node = config.nodes.get(node_uuid)
        if drbd_node is None or drbd_node.offline:
            continue
        objects = [diskobjects.disk_object(config, inst, disk, node_uuid)
                   for inst in owners for disk in inst.disks]
        try:
            needing = env.rpc.call(drbd_node, disk_calls.DrbdNeedsActivation(disks=objects),
                                   timeout=60)
            faulty = set(needing)
        except HerderError as err:
            node_errors[drbd_node.name] = str(err)
            continue
        for inst in owners:
            if faulty & {d.uuid for d in inst.disks}:
                needs_activation.add(inst.name)
    orphans = {config.node_name(uuid): volumes for uuid, volumes in
               verify.orphan_volumes(config, listings).items()}
    return [node_errors, sorted(needs_activation), missing, orphans]


class GroupVerifyDisks(LogicalUnit[opcodes.OpGroupVerifyDisks]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        lookup(config.find_group, self.op.group_name)
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODE, None, shared=True)]

    def check(self, config: model.ConfigData) -> None:
        self.group = lookup(config.find_group, self.op.group_name)

    def execute(self) -> JobResult:
        return verify_group_disks(self.env, self.env.store.load(), self.group)


class ClusterVerifyDisks(LogicalUnit[opcodes.OpClusterVerifyDisks]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODE, None, shared=True)]

    def check(self, config: model.ConfigData) -> None:
        self.groups = [lookup(config.find_group, self.op.group_name)] if self.op.group_name \
            else sorted(config.nodegroups.values(), key=lambda g: g.name)

    def execute(self) -> JobResult:
        config = self.env.store.load()
        if config.instances and all(i.disk_template == "ext"
                                    for i in config.instances.values()):
            self.feedback("All instances have ext storage, skipping verify disks.")
            return []
        return [verify_group_disks(self.env, config, group) for group in self.groups]
