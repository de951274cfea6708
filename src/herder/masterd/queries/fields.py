"""What every query resource shares (`masterd.queries`): a field's definition as Ganeti's
`/2/query/RESOURCE/fields` shows it (name, title, kind, doc), with the flags Ganeti's filters
read (a host name compared by its short name, a `[seconds, microseconds]` timestamp compared
as a number), and the ways a resource finds a field's values: one column over all objects
(`ColumnFn`), or a set of fields computed together for each object (`FieldSet`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple, Protocol

from herder.core import model, names, params
from herder.core.jsonvalue import JsonObject
from herder.masterd import livefields
from herder.masterd.livecache import Snapshot

# Ganeti's field kinds (constants.QFT_*)
TEXT, BOOL, NUMBER, FLOAT, UNIT, TIMESTAMP, OTHER, UNKNOWN = (
    "text", "bool", "number", "float", "unit", "timestamp", "other", "unknown")


class FieldDef(NamedTuple):
    title: str
    kind: str
    doc: str
    # Ganeti's QFF_HOSTNAME: `==`/`!=` match a name by its leading components ("node1"
    # matches node1.example.com)
    hostname: bool = False
    # Ganeti's QFF_SPLIT_TIMESTAMP: a `[seconds, microseconds]` pair compared as seconds
    split_timestamp: bool = False


Results = dict[str, livefields.Result]
ColumnFn = Callable[[model.ConfigData, Sequence[Any]], list[Any]]  # a field of each object
RowFn = Callable[[Any], Results]
# a set's rows for one answer: what all rows share (the cluster's parameters, ...) is found
# once, then each object's fields
SetFn = Callable[[model.ConfigData, Snapshot], RowFn]


def definition(name: str, table: Mapping[str, FieldDef]) -> JsonObject:
    """A field's definition as Ganeti's answers carry it (an unknown field: kind `unknown`)."""
    found = table.get(name)
    if found is not None:
        return {"name": name, "title": found.title, "kind": found.kind, "doc": found.doc}
    return {"name": name, "title": name, "kind": UNKNOWN, "doc": f"Unknown field '{name}'"}


@dataclass(frozen=True)
class FieldSet:
    names: frozenset[str]
    make: SetFn
    live: bool  # whether its values come from the nodes' live figures


class JobSource(Protocol):
    """The job queue as the job resource reads it (masterd.jobs.queue.JobQueue)."""

    def job_ids(self) -> list[int]: ...

    def info(self, job_id: int, fields: Sequence[str]) -> dict[str, Any]: ...


class LockSource(Protocol):
    """The locks as the lock resource reads them (masterd.locking.LockManager)."""

    def query_locks(self) -> list[LockState]: ...


class LockState(NamedTuple):
    """A lock held or waited for, as Ganeti's lock query shows it."""

    name: str
    mode: str | None  # "exclusive", "shared"; None: not held
    owner: list[str]  # who holds it
    pending: list[list[Any]]  # [[mode, [waiters]], ...]


@dataclass(frozen=True)
class Objects:
    """Where a resource's objects come from besides the config (the job queue, the locks, the
    exports the nodes were asked for)."""

    config: model.ConfigData
    jobs: JobSource | None = None
    locks: LockSource | None = None
    # node name -> its exports (None: it could not be asked); the export resource's rows
    exports: Mapping[str, Sequence[str] | None] | None = None


class HasName(Protocol):
    """An object the name order sorts (nodes, instances, groups, networks)."""

    @property
    def name(self) -> str: ...


class HasTags(Protocol):
    """An object with Ganeti's tags (the cluster's objects)."""

    @property
    def tags(self) -> Sequence[str]: ...


def by_name(obj: HasName) -> tuple[tuple[int, int | str], ...]:
    return names.nice_sort_key(obj.name)


@dataclass(frozen=True)
class Resource:
    """One of Ganeti's query resources: its fields, its objects in Ganeti's order, and how
    their values are found."""

    name: str
    fields: Mapping[str, FieldDef]
    objects: Callable[[Objects], Iterable[Any]]
    simple: Mapping[str, ColumnFn]
    # fields computed together, tried in order; the last set holds every field not simple
    sets: tuple[FieldSet, ...] = ()
    # the field naming an object (Ganeti's namefield; `id` for jobs), and the words of its
    # "not found" error (None: names are not looked up, the filter selects)
    name_field: str = "name"
    not_found: str | None = None
    # the order of the answer's rows (Ganeti's: names in its nice order, jobs by id)
    order: Callable[[Any], Any] = by_name


def normal(view: Mapping[str, object]) -> Results:
    """Config fields: normal, a missing single value unavailable (Ganeti's rsMaybeUnavail)."""
    return {k: (livefields.RS_UNAVAIL, None) if v is None else (livefields.RS_NORMAL, v)
            for k, v in view.items()}


def attr(name: str) -> ColumnFn:
    """A column of one attribute of each object."""
    get = attrgetter(name)
    return lambda _config, objects: list(map(get, objects))


def per_object(value: Callable[[model.ConfigData, Any], Any]) -> ColumnFn:
    return lambda config, objects: [value(config, obj) for obj in objects]


def tags(_config: model.ConfigData, objects: Sequence[HasTags]) -> list[list[str]]:
    return [list(obj.tags) for obj in objects]


# a parameter's kind (core.params) as Ganeti's field kind (query._VTToQFT: texts are `other`,
# they may be empty)
PARAM_KINDS = {"bool": BOOL, "int": NUMBER, "float": FLOAT, "size": UNIT, "string": OTHER,
               "maybe-string": OTHER}


def parameter_fields(prefix: str, family: params.ParamFamily, titles: Mapping[str, str],
                     what: str) -> dict[str, FieldDef]:
    """Ganeti's per-parameter fields (`be/vcpus`, `ndp/spindle_count`, `hv/kernel_path`):
    the title from Ganeti's `*_PARAMETER_TITLES` (else the field's name), the kind from the
    parameter's."""
    return {f"{prefix}/{name}": FieldDef(titles.get(name, f"{prefix}/{name}"),
                                         PARAM_KINDS[spec.kind],
                                         f'The "{name}" {what} parameter')
            for name, spec in sorted(family.specs.items())}
