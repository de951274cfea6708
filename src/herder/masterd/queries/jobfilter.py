"""The job filter query resource (`/2/query/filter`, Ganeti's `gnt-filter list`): Ganeti's
fields. The job queue's filter rules are not in herder's config yet (issue 32's job queue
work adds them), so the resource lists none."""

from __future__ import annotations

from operator import attrgetter

from herder.masterd.queries.fields import OTHER, FieldDef, Objects, Resource

FIELDS: dict[str, FieldDef] = {
    "action": FieldDef("Action", OTHER, "Filter action"),
    "predicates": FieldDef("Predicates", OTHER, "List of filter predicates"),
    "priority": FieldDef("Priority", OTHER, "Filter priority"),
    "reason_trail": FieldDef("ReasonTrail", OTHER, "Reason why this filter was added"),
    "uuid": FieldDef("UUID", OTHER, "Filter ID"),
    "watermark": FieldDef("Watermark", OTHER, "Highest job ID used at the time when the filter "
                          "was added"),
}


def _rules(_source: Objects) -> list[object]:
    return []


RESOURCE = Resource("filter", FIELDS, _rules, {}, name_field="uuid", order=attrgetter("uuid"))
