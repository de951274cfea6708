"""The lock query resource (`/2/query/lock`): Ganeti's fields, one row per lock that is held
or waited for (as Ganeti 3.0 lists them), from masterd's lock manager."""

from __future__ import annotations

from herder.masterd.queries.fields import (
    OTHER,
    ColumnFn,
    FieldDef,
    LockState,
    Objects,
    Resource,
    attr,
)

FIELDS: dict[str, FieldDef] = {
    "mode": FieldDef("Mode", OTHER, "Mode in which the lock is currently acquired (exclusive or "
                     "shared)"),
    "name": FieldDef("Name", OTHER, "Lock name"),
    "owner": FieldDef("Owner", OTHER, "Current lock owner(s)"),
    "pending": FieldDef("Pending", OTHER, "Jobs waiting for the lock"),
}


def _locks(source: Objects) -> list[LockState]:
    return [] if source.locks is None else list(source.locks.query_locks())


SIMPLE: dict[str, ColumnFn] = {name: attr(name) for name in LockState._fields}
RESOURCE = Resource("lock", FIELDS, _locks, SIMPLE)
