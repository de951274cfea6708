"""The node group query resource (`/2/query/group`, `herder group list`): Ganeti 3.0's group
fields with its titles and descriptions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from herder.core import model, names, params
from herder.masterd.livecache import Snapshot
from herder.masterd.queries.fields import (
    NUMBER,
    OTHER,
    TEXT,
    TIMESTAMP,
    ColumnFn,
    FieldDef,
    FieldSet,
    Objects,
    Resource,
    Results,
    RowFn,
    attr,
    normal,
    tags,
)
from herder.masterd.queries.node import ND_FIELDS

FIELDS: dict[str, FieldDef] = {
    "alloc_policy": FieldDef("AllocPolicy", TEXT, "Allocation policy for group"),
    "ctime": FieldDef("CTime", TIMESTAMP, "Creation timestamp"),
    "custom_diskparams": FieldDef("CustomDiskParameters", OTHER, "Custom disk parameters"),
    "custom_ipolicy": FieldDef("CustomInstancePolicy", OTHER, "Custom instance policy "
                               "limitations"),
    "custom_ndparams": FieldDef("CustomNDParams", OTHER, "Custom node parameters"),
    "diskparams": FieldDef("DiskParameters", OTHER, "Disk parameters (merged)"),
    "ipolicy": FieldDef("InstancePolicy", OTHER, "Instance policy limitations (merged)"),
    "mtime": FieldDef("MTime", TIMESTAMP, "Modification timestamp"),
    "name": FieldDef("Group", TEXT, "Group name"),
    **ND_FIELDS,
    "ndparams": FieldDef("NDParams", OTHER, "Node parameters"),
    "node_cnt": FieldDef("Nodes", NUMBER, "Number of nodes"),
    "node_list": FieldDef("NodeList", OTHER, "List of nodes"),
    "pinst_cnt": FieldDef("Instances", NUMBER, "Number of primary instances"),
    "pinst_list": FieldDef("InstanceList", OTHER, "List of primary instances"),
    "serial_no": FieldDef("SerialNo", NUMBER, "Group object serial number, incremented on each "
                          "modification"),
    "tags": FieldDef("Tags", OTHER, "Tags"),
    "uuid": FieldDef("UUID", TEXT, "Group UUID"),
}


def _primary_uuids(config: model.ConfigData, group: model.NodeGroup) -> list[str]:
    index = config.index()
    return [uuid for node in index.group_nodes.get(group.uuid, ())
            for uuid in index.primary_uuids(node)]


def _count(which: str) -> ColumnFn:
    def column(config: model.ConfigData, groups: Sequence[Any]) -> list[Any]:
        index = config.index()
        return [len(index.group_nodes.get(g.uuid, ())) if which == "nodes" else
                len(_primary_uuids(config, g)) for g in groups]

    return column


SIMPLE: dict[str, ColumnFn] = {
    **{name: attr(name) for name in ("name", "uuid", "alloc_policy", "serial_no", "ctime",
                                     "mtime")},
    "node_cnt": _count("nodes"),
    "pinst_cnt": _count("instances"),
    "tags": tags,
}


def _views(config: model.ConfigData, _live: Snapshot) -> RowFn:
    def row(group: model.NodeGroup) -> Results:
        ndparams = params.fill(params.ND_FAMILY.defaults(), config.cluster.ndparams,
                               group.ndparams)
        primaries = [config.instances[uuid].name for uuid in _primary_uuids(config, group)
                     if uuid in config.instances]
        return normal({
            "ipolicy": model.to_builtins(config.filled_ipolicy(group)),
            "custom_ipolicy": model.to_builtins(group.ipolicy),
            "ndparams": ndparams, "custom_ndparams": dict(group.ndparams),
            **{f"ndp/{name}": value for name, value in ndparams.items()},
            "diskparams": {dt: config.filled_diskparams(dt, group)
                           for dt in sorted(params.DISK_TEMPLATES)},
            "custom_diskparams": dict(group.diskparams),
            "node_list": config.group_node_names(group.uuid),
            "pinst_list": sorted(primaries, key=names.nice_sort_key)})

    return row


def _groups(source: Objects) -> list[model.NodeGroup]:
    return list(source.config.nodegroups.values())


RESOURCE = Resource("group", FIELDS, _groups, SIMPLE,
                    (FieldSet(frozenset(FIELDS), _views, False),),
                    not_found="NodeGroup name {} not found")
