"""Tag LUs: OP_TAGS_SET and OP_TAGS_DEL on the cluster, node groups, nodes and instances."""

from __future__ import annotations

from typing import Any

from herder.core import locking as L
from herder.core import model as M
from herder.core.errors import ConfigError, NotFoundError, OpPrereqError
from herder.core.jobs import opcodes as O
from herder.masterd.lu.base import LockRequest, LogicalUnit, lookup

_LEVELS = {"instance": L.LEVEL_INSTANCE, "nodegroup": L.LEVEL_NODEGROUP, "node": L.LEVEL_NODE,
           "network": L.LEVEL_NETWORK}


def _target(config: M.ConfigData, kind: str, name: str | None) -> M.Named | M.Cluster:
    if kind == "cluster":
        return config.cluster
    if not name:
        raise OpPrereqError(f"tags on a {kind} need its name")
    finder = {"node": config.find_node, "instance": config.find_instance,
              "nodegroup": config.find_group, "network": config.find_network}[kind]
    return lookup(finder, name)


class _Tags(LogicalUnit):
    def declare_locks(self, config: M.ConfigData) -> list[LockRequest]:
        op: O.OpTagsSet = self.op  # type: ignore[assignment]
        if op.kind == "cluster":
            return []
        return [LockRequest(_LEVELS[op.kind], [_target(config, op.kind, op.name).uuid])]

    def check(self, config: M.ConfigData) -> None:
        op: O.OpTagsSet = self.op  # type: ignore[assignment]
        obj = _target(config, op.kind, op.name)
        try:
            self.change(obj, list(op.tags))
        except (ConfigError, NotFoundError) as err:
            raise OpPrereqError(str(err)) from None

    def change(self, obj: M.Named | M.Cluster, tags: list[str]) -> None:
        raise NotImplementedError

    def execute(self) -> Any:
        op: O.OpTagsSet = self.op  # type: ignore[assignment]
        with self.env.store.update() as config:
            obj = _target(config, op.kind, op.name)
            self.change(obj, list(op.tags))
            obj.touch()
        return None


class TagsSet(_Tags):
    OP = O.OpTagsSet

    def change(self, obj: M.Named | M.Cluster, tags: list[str]) -> None:
        M.tags_add(obj, tags)  # type: ignore[arg-type]


class TagsDel(_Tags):
    OP = O.OpTagsDel

    def change(self, obj: M.Named | M.Cluster, tags: list[str]) -> None:
        M.tags_remove(obj, tags)  # type: ignore[arg-type]

