"""Node group LUs: add, modify, rename, remove."""

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

