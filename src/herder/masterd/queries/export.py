"""The export query resource (`/2/query/export`, Ganeti's `gnt-backup list`, query.
_BuildExportFields): a row per export of each node asked (`Objects.exports`: the online nodes'
`export_list`, which the RAPI route gathers first); a node that could not be asked has one row
without an export (RS_NODATA, as Ganeti's)."""

from __future__ import annotations

from typing import NamedTuple

from herder.core import model
from herder.masterd import livefields
from herder.masterd.livecache import Snapshot
from herder.masterd.queries.fields import (
    TEXT,
    FieldDef,
    FieldSet,
    Objects,
    Resource,
    Results,
    RowFn,
)

FIELDS: dict[str, FieldDef] = {
    "export": FieldDef("Export", TEXT, "Export name"),
    "node": FieldDef("Node", TEXT, "Node name", hostname=True),
}


class ExportRow(NamedTuple):
    node: str
    export: str | None  # None: the node could not be asked


def _exports(source: Objects) -> list[ExportRow]:
    return [ExportRow(node, export) for node, found in (source.exports or {}).items()
            for export in (found if found is not None else [None])]


def _row(_config: model.ConfigData, _live: Snapshot) -> RowFn:
    def row(obj: ExportRow) -> Results:
        return {"node": (livefields.RS_NORMAL, obj.node),
                "export": (livefields.RS_NODATA, None) if obj.export is None
                else (livefields.RS_NORMAL, obj.export)}
    return row


def _order(row: ExportRow) -> tuple[str, str]:
    return row.node, row.export or ""


RESOURCE = Resource("export", FIELDS, _exports, {},
                    (FieldSet(frozenset(FIELDS), _row, False),), name_field="node",
                    order=_order)
