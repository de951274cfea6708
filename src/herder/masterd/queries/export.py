"""The export query resource (`/2/query/export`, Ganeti's `gnt-backup list`): Ganeti's fields.
herder keeps no instance exports yet (instance export and import are their own issue), so the
resource lists none."""

from __future__ import annotations

from typing import Any

from herder.masterd.queries.fields import TEXT, FieldDef, Objects, Resource

FIELDS: dict[str, FieldDef] = {
    "export": FieldDef("Export", TEXT, "Export name"),
    "node": FieldDef("Node", TEXT, "Node name", hostname=True),
}


def _exports(_source: Objects) -> list[Any]:
    return []


RESOURCE = Resource("export", FIELDS, _exports, {}, name_field="node")
