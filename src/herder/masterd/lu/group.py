"""Node group LUs: add, modify, rename, remove, assign nodes (evacuation: lu.groupmoves)."""

from __future__ import annotations

from typing import Any

from herder.core import model, params
from herder.core.errors import ConfigError, OpPrereqError
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup
from herder.masterd.lu.common import apply_ipolicy, resets


def _group_changes(group: model.NodeGroup,
                   op: opcodes.OpGroupAdd | opcodes.OpGroupSetParams) -> None:
    if op.alloc_policy is not None:
        group.alloc_policy = op.alloc_policy
    if op.ndparams:
        group.ndparams = params.apply_overrides(params.ND_FAMILY, group.ndparams,
                                                resets(op.ndparams))
    for dt, changes in (op.diskparams or {}).items():
        group.diskparams[dt] = params.apply_overrides(params.disk_family(dt),
                                                      group.diskparams.get(dt, {}),
                                                      resets(changes))
    if op.ipolicy:
        apply_ipolicy(group.ipolicy, op.ipolicy)


class GroupAdd(LogicalUnit[opcodes.OpGroupAdd]):
    REQ_BGL = True  # the group has no lock yet

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        if any(g.name == op.group_name for g in config.nodegroups.values()):
            raise OpPrereqError(f"node group {op.group_name!r} already exists", "already_exists")
        try:
            _group_changes(model.NodeGroup(uuid="check", name=op.group_name), op)
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None

    def execute(self) -> JobResult:
        op = self.op
        stamp = model.now()
        group = model.NodeGroup(uuid=model.new_uuid(), name=op.group_name, ctime=stamp, mtime=stamp)
        _group_changes(group, op)
        with self.env.store.update() as config:
            config.nodegroups[group.uuid] = group
        self.env.locks.add(locking.LEVEL_NODEGROUP, group.uuid)
        return group.uuid


class GroupSetParams(LogicalUnit[opcodes.OpGroupSetParams]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        group = lookup(config.find_group, self.op.group_name)
        return [LockRequest(locking.LEVEL_NODEGROUP, [group.uuid])]

    def check(self, config: model.ConfigData) -> None:
        group = lookup(config.find_group, self.op.group_name)
        copy = model.decode(model.encode(config)).nodegroups[group.uuid]
        try:
            _group_changes(copy, self.op)
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None

    def execute(self) -> JobResult:
        result: list[list[Any]] = []
        with self.env.store.update() as config:
            group = config.find_group(self.op.group_name)
            _group_changes(group, self.op)
            group.touch()
            for key in ("alloc_policy", "ndparams", "diskparams", "ipolicy"):
                value = getattr(self.op, key)
                if value is not None:
                    result.append([key, str(value)])
        return result


class GroupRename(LogicalUnit[opcodes.OpGroupRename]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        group = lookup(config.find_group, self.op.group_name)
        return [LockRequest(locking.LEVEL_NODEGROUP, [group.uuid])]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        lookup(config.find_group, op.group_name)
        if any(g.name == op.new_name for g in config.nodegroups.values()):
            raise OpPrereqError(f"node group {op.new_name!r} already exists", "already_exists")

    def execute(self) -> JobResult:
        op = self.op
        with self.env.store.update() as config:
            group = config.find_group(op.group_name)
            group.name = op.new_name
            group.touch()
        return op.new_name


class GroupRemove(LogicalUnit[opcodes.OpGroupRemove]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        group = lookup(config.find_group, self.op.group_name)
        return [LockRequest(locking.LEVEL_NODEGROUP, [group.uuid]),
                LockRequest(locking.LEVEL_NODE, None, shared=True)]

    def check(self, config: model.ConfigData) -> None:
        group = lookup(config.find_group, self.op.group_name)
        members = sorted(n.name for n in config.nodes.values() if n.group == group.uuid)
        if members:
            raise OpPrereqError(f"node group {group.name} still has nodes: "
                                f"{', '.join(members)}", "wrong_state")
        if len(config.nodegroups) == 1:
            raise OpPrereqError("the last node group cannot be removed", "wrong_state")

    def execute(self) -> JobResult:
        with self.env.store.update() as config:
            group = config.find_group(self.op.group_name)
            del config.nodegroups[group.uuid]
        self.env.locks.remove(locking.LEVEL_NODEGROUP, [group.uuid])
        return None



class GroupAssignNodes(LogicalUnit[opcodes.OpGroupAssignNodes]):
    """Ganeti's LUGroupAssignNodes: the nodes join the group; refused when that would leave a
    DRBD instance with its two nodes in different groups (unless `force`: Ganeti's warning)."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        group = lookup(config.find_group, self.op.group_name)
        nodes = [lookup(config.find_node, name).uuid for name in self.op.nodes]
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODEGROUP, sorted({group.uuid, *(
                    config.nodes[n].group for n in nodes)})),
                LockRequest(locking.LEVEL_NODE, sorted({*nodes, *_drbd_peers(config, nodes)}))]

    def check(self, config: model.ConfigData) -> None:
        self.group = lookup(config.find_group, self.op.group_name)
        self.nodes = [lookup(config.find_node, name) for name in self.op.nodes]
        if not self.nodes:
            raise OpPrereqError("give the nodes to assign", "wrong_input")
        moving = {n.uuid for n in self.nodes}

        def group_of(uuid: str) -> str:
            return self.group.uuid if uuid in moving else config.nodes[uuid].group

        split = sorted(i.name for i in config.instances.values() if i.disk_template == "drbd"
                       and len({group_of(n) for n in (i.primary_node, *i.secondary_nodes)}) > 1
                       and len({config.nodes[n].group
                                for n in (i.primary_node, *i.secondary_nodes)}) == 1)
        if split:
            message = f"instances would be split across node groups: {', '.join(split)}"
            if not self.op.force:
                raise OpPrereqError(f"{message}; use force to assign the nodes anyway",
                                    "wrong_state")
            self.feedback(f"warning: {message}")

    def execute(self) -> JobResult:
        with self.env.store.update() as config:
            for node in self.nodes:
                target = config.nodes[node.uuid]
                if target.group != self.group.uuid:
                    target.group = self.group.uuid
                    target.touch()
        return None


def _drbd_peers(config: model.ConfigData, nodes: list[str]) -> set[str]:
    """The nodes sharing a DRBD instance with one of `nodes` (their groups are looked at)."""
    wanted = set(nodes)
    return {n for i in config.instances.values()
            if wanted & {i.primary_node, *i.secondary_nodes}
            for n in (i.primary_node, *i.secondary_nodes)}
