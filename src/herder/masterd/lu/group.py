"""Node group LUs: add, modify, rename, remove."""

from __future__ import annotations

from typing import Any

from herder.core import locking as L
from herder.core import model as M
from herder.core import params as P
from herder.core.errors import ConfigError, OpPrereqError
from herder.core.jobs import opcodes as O
from herder.masterd.lu.base import LockRequest, LogicalUnit, lookup
from herder.masterd.lu.cluster import apply_ipolicy, resets


def _group_changes(group: M.NodeGroup, op: O.OpGroupAdd | O.OpGroupSetParams) -> None:
    if op.alloc_policy is not None:
        group.alloc_policy = op.alloc_policy
    if op.ndparams:
        group.ndparams = P.apply_overrides(P.ND_FAMILY, group.ndparams, resets(op.ndparams))
    for dt, changes in (op.diskparams or {}).items():
        group.diskparams[dt] = P.apply_overrides(P.disk_family(dt), group.diskparams.get(dt, {}),
                                                 resets(changes))
    if op.ipolicy:
        apply_ipolicy(group.ipolicy, op.ipolicy)


class GroupAdd(LogicalUnit):
    OP = O.OpGroupAdd
    REQ_BGL = True  # the group has no lock yet

    def check(self, config: M.ConfigData) -> None:
        op: O.OpGroupAdd = self.op  # type: ignore[assignment]
        if any(g.name == op.group_name for g in config.nodegroups.values()):
            raise OpPrereqError(f"node group {op.group_name!r} already exists", "already_exists")
        try:
            _group_changes(M.NodeGroup(uuid="check", name=op.group_name), op)
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None

    def execute(self) -> Any:
        op: O.OpGroupAdd = self.op  # type: ignore[assignment]
        stamp = M.now()
        group = M.NodeGroup(uuid=M.new_uuid(), name=op.group_name, ctime=stamp, mtime=stamp)
        _group_changes(group, op)
        with self.env.store.update() as config:
            config.nodegroups[group.uuid] = group
        self.env.locks.add(L.LEVEL_NODEGROUP, group.uuid)
        return group.uuid


class GroupSetParams(LogicalUnit):
    OP = O.OpGroupSetParams

    def declare_locks(self, config: M.ConfigData) -> list[LockRequest]:
        group = lookup(config.find_group, self.op.group_name)  # type: ignore[attr-defined]
        return [LockRequest(L.LEVEL_NODEGROUP, [group.uuid])]

    def check(self, config: M.ConfigData) -> None:
        group = lookup(config.find_group, self.op.group_name)  # type: ignore[attr-defined]
        copy = M.decode(M.encode(config)).nodegroups[group.uuid]
        try:
            _group_changes(copy, self.op)  # type: ignore[arg-type]
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None

    def execute(self) -> Any:
        result: list[list[Any]] = []
        with self.env.store.update() as config:
            group = config.find_group(self.op.group_name)  # type: ignore[attr-defined]
            _group_changes(group, self.op)  # type: ignore[arg-type]
            group.touch()
            for key in ("alloc_policy", "ndparams", "diskparams", "ipolicy"):
                value = getattr(self.op, key)
                if value is not None:
                    result.append([key, str(value)])
        return result


class GroupRename(LogicalUnit):
    OP = O.OpGroupRename

    def declare_locks(self, config: M.ConfigData) -> list[LockRequest]:
        group = lookup(config.find_group, self.op.group_name)  # type: ignore[attr-defined]
        return [LockRequest(L.LEVEL_NODEGROUP, [group.uuid])]

    def check(self, config: M.ConfigData) -> None:
        op: O.OpGroupRename = self.op  # type: ignore[assignment]
        lookup(config.find_group, op.group_name)
        if any(g.name == op.new_name for g in config.nodegroups.values()):
            raise OpPrereqError(f"node group {op.new_name!r} already exists", "already_exists")

    def execute(self) -> Any:
        op: O.OpGroupRename = self.op  # type: ignore[assignment]
        with self.env.store.update() as config:
            group = config.find_group(op.group_name)
            group.name = op.new_name
            group.touch()
        return op.new_name


class GroupRemove(LogicalUnit):
    OP = O.OpGroupRemove

    def declare_locks(self, config: M.ConfigData) -> list[LockRequest]:
        group = lookup(config.find_group, self.op.group_name)  # type: ignore[attr-defined]
        return [LockRequest(L.LEVEL_NODEGROUP, [group.uuid]),
                LockRequest(L.LEVEL_NODE, None, shared=True)]

    def check(self, config: M.ConfigData) -> None:
        group = lookup(config.find_group, self.op.group_name)  # type: ignore[attr-defined]
        members = sorted(n.name for n in config.nodes.values() if n.group == group.uuid)
        if members:
            raise OpPrereqError(f"node group {group.name} still has nodes: "
                                f"{', '.join(members)}", "wrong_state")
        if len(config.nodegroups) == 1:
            raise OpPrereqError("the last node group cannot be removed", "wrong_state")

    def execute(self) -> Any:
        with self.env.store.update() as config:
            group = config.find_group(self.op.group_name)  # type: ignore[attr-defined]
            del config.nodegroups[group.uuid]
        self.env.locks.remove(L.LEVEL_NODEGROUP, [group.uuid])
        return None

