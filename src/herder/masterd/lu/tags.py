"""Tag LUs: OP_TAGS_SET and OP_TAGS_DEL on the cluster, node groups, nodes and instances;
OP_TAGS_SEARCH over all of them."""

from __future__ import annotations

import copy
import re
from typing import TypeVar

from herder.core import model
from herder.core.errors import ConfigError, NotFoundError, OpPrereqError
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup

_LEVELS = {"instance": locking.LEVEL_INSTANCE, "nodegroup": locking.LEVEL_NODEGROUP,
           "node": locking.LEVEL_NODE, "network": locking.LEVEL_NETWORK}


def _target(config: model.ConfigData, kind: str, name: str | None) -> model.Named | model.Cluster:
    if kind == "cluster":
        return config.cluster
    if not name:
        raise OpPrereqError(f"tags on a {kind} need its name")
    finder = {"node": config.find_node, "instance": config.find_instance,
              "nodegroup": config.find_group, "network": config.find_network}[kind]
    return lookup(finder, name)


TagsOpT = TypeVar("TagsOpT", bound=opcodes.TagsOpCode)


class _Tags(LogicalUnit[TagsOpT]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        op = self.op
        if op.kind == "cluster":
            return []
        return [LockRequest(_LEVELS[op.kind], [_target(config, op.kind, op.name).uuid])]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        obj = _target(config, op.kind, op.name)
        # a trial on a copy: `config` is the processor's shared snapshot, never changed
        trial = copy.copy(obj)
        trial.tags = list(obj.tags)
        try:
            self.change(trial, list(op.tags))
        except (ConfigError, NotFoundError) as err:
            raise OpPrereqError(str(err)) from None

    def change(self, obj: model.Named | model.Cluster, tags: list[str]) -> None:
        raise NotImplementedError

    def execute(self) -> JobResult:
        op = self.op
        with self.env.store.update() as config:
            obj = _target(config, op.kind, op.name)
            self.change(obj, list(op.tags))
            obj.touch()
        return None


class TagsSet(_Tags[opcodes.OpTagsSet]):
    def change(self, obj: model.Named | model.Cluster, tags: list[str]) -> None:
        model.tags_add(obj, tags)


class TagsDel(_Tags[opcodes.OpTagsDel]):
    def change(self, obj: model.Named | model.Cluster, tags: list[str]) -> None:
        model.tags_remove(obj, tags)


class TagsSearch(LogicalUnit[opcodes.OpTagsSearch]):
    """Ganeti's LUTagsSearch: every (path, tag) whose tag matches the pattern, the cluster
    first, then instances, nodes, node groups and networks, each by name."""

    def check(self, config: model.ConfigData) -> None:
        self.pattern = re.compile(self.op.pattern)
        self.config = config

    def execute(self) -> JobResult:
        config = self.config
        owners: list[tuple[str, list[str]]] = [("/cluster", list(config.cluster.tags))]
        for prefix, objects in (("/instances", config.instances), ("/nodes", config.nodes),
                                ("/nodegroup", config.nodegroups),
                                ("/networks", config.networks)):
            owners += [(f"{prefix}/{obj.name}", list(obj.tags))
                       for obj in sorted(objects.values(), key=lambda o: o.name)]
        return [[path, tag] for path, tags in owners for tag in tags
                if self.pattern.search(tag)]
