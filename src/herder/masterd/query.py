"""The answers of Ganeti's query resource: `/2/query/RESOURCE` (`masterd.rapi.query`: GET
with `fields`, PUT with `fields` and `qfilter`) and `/2/query/RESOURCE/fields`, for Ganeti's
resources (`masterd.queries.registry`: node, instance, group, job, export, network, filter,
lock), which herder's lists read too.

The answer is Ganeti's `{"fields": [{"name", "title", "kind", "doc"}], "data": [[[status,
value], ...], ...]}`: one row per object in Ganeti's order (names in its nice order: node2
before node10; jobs by id), or, for a filter that only names objects, one per name in the
order given; each value with Ganeti's result status (`livefields.RS_*`): a live figure of an
offline node is RS_OFFLINE, of a node that did not answer RS_NODATA, an unknown field
RS_UNKNOWN (its definition's kind `unknown`). A filter (`masterd.queries.qfilter`) is checked
before anything is computed and selects the rows; an answer computes only the fields it is
asked for and those its filter reads (the CLI's lists take their rows from here:
docs/scale.md).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from herder.core import gcpause, model
from herder.core.errors import AmbiguousError, NotFoundError
from herder.core.jsonvalue import JsonObject
from herder.masterd import livefields, views
from herder.masterd.livecache import EMPTY, Snapshot
from herder.masterd.queries import job as job_resource
from herder.masterd.queries import qfilter
from herder.masterd.queries.fields import (
    FieldSet,
    Objects,
    Resource,
    Results,
    by_name,
    definition,
)
from herder.masterd.queries.registry import RESOURCES

Source = Objects | model.ConfigData  # what an answer lists: the config alone, or with the queue


def _objects(source: Source) -> Objects:
    return source if isinstance(source, Objects) else Objects(source)


def needed_sets(spec: Resource, fields: Sequence[str]) -> list[FieldSet]:
    """The sets an answer with `fields` computes: for each field that is not simple, the
    first set holding it; only the last set when it is among them and holds every field of
    the others (a whole view)."""
    needed: list[FieldSet] = []
    for name in fields:
        found = next((fs for fs in spec.sets if name in fs.names), None)
        if name not in spec.simple and found is not None and found not in needed:
            needed.append(found)
    whole = spec.sets[-1] if spec.sets else None
    if whole is not None and whole in needed and all(fs.names <= whole.names for fs in needed):
        return [whole]
    return needed


def compile_filter(resource: str, given: object) -> qfilter.Compiled | None:
    """The checked filter of a query of `resource` (None: no filter); FilterError names what
    is wrong with it."""
    if given is None:
        return None
    spec = RESOURCES[resource]
    return qfilter.compile_filter(given, spec.fields, spec.name_field)


def needs_live(resource: str, fields: Sequence[str],
               compiled: qfilter.Compiled | None = None) -> bool:
    """Whether an answer with `fields` (and the fields its filter reads) shows live figures
    (else no node is asked)."""
    wanted = [*fields, *(compiled.fields if compiled is not None else ())]
    return any(fs.live for fs in needed_sets(RESOURCES[resource], wanted))


def _columns(config: model.ConfigData, spec: Resource, objects: Sequence[Any],
             fields: Sequence[str], live: Snapshot) -> list[list[livefields.Result]]:
    """The asked fields of `objects`, a column per field (a simple field's column in one pass
    over the objects)."""
    needed = needed_sets(spec, fields)
    computed: list[Results] = [{} for _ in objects] if needed else []
    for field_set in needed:
        row_of = field_set.make(config, live)
        for results, obj in zip(computed, objects, strict=True):
            results.update(row_of(obj))
    unavailable = (livefields.RS_UNAVAIL, None)
    columns: list[list[livefields.Result]] = []
    for name in fields:
        column = spec.simple.get(name)
        if column is not None:
            columns.append([unavailable if value is None else (livefields.RS_NORMAL, value)
                            for value in column(config, objects)])
        elif name in spec.fields:
            columns.append([results.get(name, unavailable) for results in computed])
        else:
            columns.append([(livefields.RS_UNKNOWN, None)] * len(objects))
    return columns


def _named(source: Objects, spec: Resource, wanted: Sequence[Any]) -> list[Any]:
    """The objects a filter names, in its order (Ganeti's requested names)."""
    if spec.name == "job":
        known = {job.id: job for job in spec.objects(source)}
        return [known.get(job_id) or job_resource.missing(job_id) for job_id in wanted]
    find = {"node": source.config.find_node, "instance": source.config.find_instance,
            "group": source.config.find_group, "network": source.config.find_network}[spec.name]
    found = []
    for name in wanted:
        try:
            found.append(find(str(name)))
        except NotFoundError:
            raise qfilter.FilterError(str(spec.not_found).format(name)) from None
        except AmbiguousError as err:
            raise qfilter.FilterError(str(err)) from None
    return found


# resource -> (UUID -> name, the UUIDs in Ganeti's order) of its last answer: the order is
# made again only when a name, or the set of objects, changed (50,000 names' sort keys and
# sort were a third of the instance list's CPU in masterd)
_ORDERS: dict[str, tuple[dict[str, str], list[str]]] = {}


def in_order(spec: Resource, objects: Iterable[Any]) -> list[Any]:
    """`objects` in the resource's order (`spec.order`)."""
    if spec.order is not by_name or spec.name not in _BY_UUID:
        return sorted(objects, key=spec.order)
    table = {obj.uuid: obj for obj in objects}
    names = {uuid: obj.name for uuid, obj in table.items()}
    kept = _ORDERS.get(spec.name)
    if kept is None or kept[0] != names:
        kept = (names, [obj.uuid for obj in sorted(table.values(), key=by_name)])
        _ORDERS[spec.name] = kept  # one assignment: readers of other threads see either
    return [table[uuid] for uuid in kept[1]]


_BY_UUID = frozenset({"node", "instance", "group", "network"})  # config objects, one per UUID


def select(source: Source, resource: str, compiled: qfilter.Compiled | None,
           live: Snapshot) -> list[Any]:
    """The objects an answer lists, in its order: those the filter selects, or names."""
    objects = _objects(source)
    spec = RESOURCES[resource]
    if compiled is not None and compiled.names is not None and (
            spec.not_found is not None or spec.name == "job"):
        return _named(objects, spec, compiled.names)
    every = in_order(spec, spec.objects(objects))
    if compiled is None:
        return every
    names = sorted(compiled.fields)
    columns = _columns(objects.config, spec, every, names, live)
    return [obj for obj, values in zip(every, zip(*columns, strict=True) if columns else
                                       [() for _ in every], strict=True)
            if compiled.test(dict(zip(names, values, strict=True)))]


def answer(source: Source, resource: str, fields: Sequence[str], live: Snapshot,
           compiled: qfilter.Compiled | None = None) -> JsonObject:
    """Ganeti's query answer: the asked fields of the objects the filter selects."""
    spec = RESOURCES[resource]
    objects = select(source, resource, compiled, live)
    columns = _columns(_objects(source).config, spec, objects, fields, live)
    return {"fields": [definition(f, spec.fields) for f in fields],
            "data": list(map(list, zip(*columns, strict=True))) if columns else
            [[] for _ in objects]}


def field_definitions(resource: str, fields: Sequence[str] | None) -> JsonObject:
    """`/2/query/RESOURCE/fields`: the asked fields' definitions, or all by name."""
    table = RESOURCES[resource].fields
    return {"fields": [definition(f, table) for f in
                       (sorted(table) if fields is None else fields)]}


# ---- the instance list's rows, kept encoded -----------------------------------------------
# `herder instance list` (and any client asking instance fields that are neither the whole
# view's nor many) asks the same fields again and again: each instance's config fields are
# encoded once per object and kept, only the live fields are made per answer (from the few
# distinct `livefields.run_keys`). At 10,000 instances that is the run states and a join.

_ENCODE = msgspec.json.Encoder().encode
# A row kept encoded: its config fields with the separators and brackets around them, in the
# pieces that go between its runs of live fields: `,[` + config fields + `,` | live fields |
# `,` + config fields + `]` (a row is written after a comma; the first one without it).
Pieces = tuple[bytes, ...]


def _runs(fields: Sequence[str]) -> list[tuple[bool, list[str]]]:
    """`fields` in runs of consecutive live (True) or config (False) fields."""
    runs: list[tuple[bool, list[str]]] = []
    for name in fields:
        is_live = name in livefields.INSTANCE_LIVE_FIELDS
        if runs and runs[-1][0] == is_live:
            runs[-1][1].append(name)
        else:
            runs.append((is_live, [name]))
    return runs


def _encoded_run(pairs: Sequence[livefields.Result]) -> bytes:
    """Results as JSON without the brackets around them: `[0,"a"],[3,null]`."""
    return _ENCODE(pairs)[1:-1]


def _pieces(runs: Sequence[tuple[bool, Sequence[livefields.Result]]]) -> Pieces:
    """A row's pieces (`Pieces`) from its runs of config results (live runs: their place)."""
    pieces: list[bytes] = []
    piece = bytearray(b",[")
    for number, (is_live, results) in enumerate(runs):
        if not is_live:
            piece += _encoded_run(results)
            continue
        if number > 0:
            piece += b","
        pieces.append(bytes(piece))
        piece = bytearray(b"," if number < len(runs) - 1 else b"")
    piece += b"]"
    pieces.append(bytes(piece))
    return tuple(pieces)


def live_runs(live: Snapshot) -> dict[str, tuple[tuple[str, int, int], ...]]:
    """What the instances' live fields are made of (`livefields.run_keys`), by node: each
    guest a node that answered reports, with its memory and vCPUs (not its uptime, which
    every new answer moves); a node missing did not answer. Two snapshots with equal ones
    give the same live fields."""
    return {uuid: tuple((name, run.memory, run.vcpus)
                        for name, run in (answer.info.instances or {}).items())
            for uuid, answer in live.answers.items() if answer.info is not None}


# At most this many instances replaced since the kept answer are written into it (a tag
# added to one instance at 50,000: ~0.3 s of CPU to make the answer again, a few ms to
# write the row again); more make it again.
PATCH_MAX = 200


@dataclass(frozen=True)
class WholeAnswer:
    """A whole instance answer and what it was made from: the config's instances (in the
    config's table order), what fills and names their fields (`views.instance_context`),
    its serial, and the live figures (`live_runs`)."""

    instances: list[model.Instance]
    context: tuple[object, ...]
    serial: int
    runs: dict[str, tuple[tuple[str, int, int], ...]]
    body: bytes = b""
    # where each row is in `body`: an instance's UUID -> its row's number, and each row's
    # end (a row starts where the one before it ends, the first at `start`)
    rows: dict[str, int] = dataclasses.field(default_factory=dict)
    ends: list[int] = dataclasses.field(default_factory=list)
    start: int = 0

    @classmethod
    def of(cls, config: model.ConfigData, live: Snapshot) -> WholeAnswer:
        return cls(list(config.instances.values()), views.instance_context(config),
                   config.serial_no, live_runs(live))

    def with_body(self, body: bytes, rows: dict[str, int], ends: list[int],
                  start: int) -> WholeAnswer:
        return dataclasses.replace(self, body=body, rows=rows, ends=ends, start=start)

    def replaced(self, other: WholeAnswer) -> list[model.Instance] | None:
        """The instances of `other` (a later config) that a change of instances alone
        replaced since this answer, none renamed, added or removed (the rows' order is the
        same) and the rest as it was (context, guests); None when the change was more."""
        if (not views.same_context(self.context, other.context) or self.runs != other.runs
                or len(self.instances) != len(other.instances)):
            return None
        replaced = [(old, new) for old, new in zip(self.instances, other.instances, strict=True)
                    if old is not new]
        if len(replaced) > PATCH_MAX or any(
                old.uuid != new.uuid or old.name != new.name or new.uuid not in self.rows
                for old, new in replaced):
            return None
        return [new for _, new in replaced]

    def same(self, other: WholeAnswer) -> bool:
        """Made from the same config and live figures: the same instance objects (a change
        replaces the objects it touches, `core.configdiff`; the list's == is C's identity
        test first), the same context objects, serial and guests."""
        return (self.serial == other.serial and views.same_context(self.context, other.context)
                and self.instances == other.instances and self.runs == other.runs)


class InstanceRows:
    """masterd's encoded rows of the instance query for the last few field lists asked. An
    instance's config fields are kept until the object changes (a change replaces the
    objects it touched), or until the cluster, a group, a network or a node does (names of
    nodes, filled parameters): then all are dropped, as `views.InstanceViews` does."""

    KEEP = 2  # field lists kept (each ~4 MB at 10,000 instances for the CLI's list)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context: tuple[Any, ...] = ()
        self._kept: dict[tuple[str, ...], dict[str, tuple[model.Instance, Pieces]]] = {}
        # field list -> the last whole answer (every instance, no filter) and what it was
        # made from: a list asked again of the same config and live figures is these bytes
        # (at 50,000 instances making it again was ~0.5 s of masterd's CPU for each
        # `herder instance list`, 5.9 MB; the kept rows spare only the config fields)
        self._answers: dict[tuple[str, ...], WholeAnswer] = {}

    @staticmethod
    def takes(fields: Sequence[str]) -> bool:
        """Whether the rows of `fields` are kept: not when one needs the whole view (every
        field's; its rows are big)."""
        spec = RESOURCES["instance"]
        return spec.sets[-1] not in needed_sets(spec, fields)

    def _rows(self, config: model.ConfigData, objects: Sequence[model.Instance],
              fields: Sequence[str], runs: list[tuple[bool, list[str]]]) -> list[Pieces]:
        """The kept rows of `objects`, made for those that changed."""
        spec = RESOURCES["instance"]
        context = views.instance_context(config)
        with self._lock:
            if not views.same_context(context, self._context):
                self._context, self._kept = context, {}
            kept = self._kept.pop(tuple(fields), None) or {}
            self._kept[tuple(fields)] = kept  # the most recent last
            while len(self._kept) > self.KEEP:
                del self._kept[next(iter(self._kept))]
            missing = [inst for inst in objects
                       if (found := kept.get(inst.uuid)) is None or found[0] is not inst]
            if missing:
                static = [name for is_live, names in runs if not is_live for name in names]
                columns = iter(_columns(config, spec, missing, static, EMPTY))
                # the config fields' columns in their runs; a live run stays empty
                run_columns = [(is_live, [] if is_live else
                                [next(columns) for _ in names]) for is_live, names in runs]
                for row, inst in enumerate(missing):
                    kept[inst.uuid] = (inst, _pieces(
                        [(is_live, [column[row] for column in run_column])
                         for is_live, run_column in run_columns]))
            if len(kept) > len(objects) + 100:  # removed instances
                for uuid in [u for u in kept if u not in config.instances]:
                    del kept[uuid]
            return [kept[inst.uuid][1] for inst in objects]

    def encode(self, config: model.ConfigData, fields: Sequence[str], live: Snapshot,
               objects: Sequence[model.Instance] | None = None) -> bytes | bytearray:
        """The answer listing `objects` (None: every instance, in Ganeti's order: the answer
        is kept, and given again while its config and live figures are the same)."""
        if objects is not None:
            return self._encode(config, fields, live, objects)
        made_from = WholeAnswer.of(config, live)
        with self._lock:
            kept = self._answers.get(tuple(fields))
        if kept is not None and kept.same(made_from):
            return kept.body
        replaced = kept.replaced(made_from) if kept is not None else None
        # (a cyclic collection would walk masterd's whole heap, the config's millions of
        # objects, again and again while 50,000 rows' tuples are made: none is cyclic)
        with gcpause.paused():
            if kept is not None and replaced is not None:
                whole = self._patch(kept, made_from, replaced, config, fields, live)
            else:
                objects = select(config, "instance", None, live)
                ends: list[int] = []
                body = bytes(self._encode(config, fields, live, objects, ends))
                whole = made_from.with_body(
                    body, {inst.uuid: number for number, inst in enumerate(objects)}, ends,
                    len(_head(fields)))
        with self._lock:
            self._answers.pop(tuple(fields), None)
            self._answers[tuple(fields)] = whole  # the most recent last
            while len(self._answers) > self.KEEP:
                del self._answers[next(iter(self._answers))]
        return whole.body

    def _patch(self, kept: WholeAnswer, now: WholeAnswer, replaced: list[model.Instance],
               config: model.ConfigData, fields: Sequence[str], live: Snapshot) -> WholeAnswer:
        """The kept answer with the rows of `replaced` (`WholeAnswer.replaced`) made again
        in their places; the other rows' bytes are copied."""
        runs = _runs(fields)
        live_names = [names for is_live, names in runs if is_live]
        rows = self._rows(config, replaced, fields, runs)
        keys = livefields.run_keys(config, replaced, live) if live_names else \
            [None] * len(replaced)
        made = sorted((kept.rows[inst.uuid], _row(pieces, None if key is None else
                                                  _live_pieces(key, live_names)))
                      for inst, pieces, key in zip(replaced, rows, keys, strict=True))
        body, ends = kept.body, kept.ends
        out = bytearray()
        new_ends: list[int] = []
        done, shift = 0, 0
        for number, row in made:
            begin = ends[number - 1] if number > 0 else kept.start
            if number == 0:
                row = row[1:]  # the first row's comma
            out += body[done:begin]
            out += row
            done = ends[number]
            new_ends.extend(end + shift for end in ends[len(new_ends):number])
            shift += len(row) - (ends[number] - begin)
            new_ends.append(ends[number] + shift)
        out += body[done:]
        new_ends.extend(end + shift for end in ends[len(new_ends):])
        return now.with_body(bytes(out), kept.rows, new_ends, kept.start)

    def _encode(self, config: model.ConfigData, fields: Sequence[str], live: Snapshot,
                objects: Sequence[model.Instance], ends: list[int] | None = None) -> bytearray:
        """The answer listing `objects`; each row's end in it appended to `ends`."""
        runs = _runs(fields)
        rows = self._rows(config, objects, fields, runs)
        out = bytearray(_head(fields))
        start = len(out)
        live_runs = [names for is_live, names in runs if is_live]
        mark = ends.append if ends is not None else None
        if not live_runs:
            for (row,) in rows:
                out += row
                if mark is not None:
                    mark(len(out))
        else:
            encoded: dict[livefields.RunKey, list[bytes]] = {}  # a few dozen keys
            for pieces, run_key in zip(rows, livefields.run_keys(config, objects, live),
                                       strict=True):
                live_pieces = encoded.get(run_key)
                if live_pieces is None:
                    live_pieces = encoded[run_key] = _live_pieces(run_key, live_runs)
                for piece, live_piece in zip(pieces, live_pieces, strict=False):  # one piece more
                    out += piece
                    out += live_piece
                out += pieces[-1]
                if mark is not None:
                    mark(len(out))
        if len(out) > start:
            del out[start]  # the first row's comma
            if ends:
                ends[:] = [end - 1 for end in ends]
        out += b"]}"
        return out


def _head(fields: Sequence[str]) -> bytes:
    """An instance answer's bytes before its first row."""
    spec = RESOURCES["instance"]
    return b'{"fields":' + _ENCODE([definition(f, spec.fields) for f in fields]) + b',"data":['


def _live_pieces(key: livefields.RunKey, live_runs: Sequence[Sequence[str]]) -> list[bytes]:
    """The encoded runs of live fields of a `RunKey`."""
    results = livefields.fields_of(key)
    return [_encoded_run([results[name] for name in names]) for names in live_runs]


def _row(pieces: Pieces, live_pieces: Sequence[bytes] | None) -> bytes:
    """A row (after its comma) from its kept pieces and its live runs' encodings, as
    `InstanceRows._encode` writes it."""
    if live_pieces is None:
        return pieces[0]
    out = bytearray()
    for piece, live_piece in zip(pieces, live_pieces, strict=False):  # one piece more
        out += piece
        out += live_piece
    out += pieces[-1]
    return bytes(out)


INSTANCE_ROWS = InstanceRows()


def encode_answer(source: Source, resource: str, fields: Sequence[str], live: Snapshot,
                  compiled: qfilter.Compiled | None = None) -> bytes | bytearray:
    """`answer` as JSON, as masterd serves it: the instance rows from `INSTANCE_ROWS`."""
    if resource == "instance" and InstanceRows.takes(fields):
        config = _objects(source).config
        return INSTANCE_ROWS.encode(config, fields, live, None if compiled is None else
                                    select(config, resource, compiled, live))
    return _ENCODE(answer(source, resource, fields, live, compiled))


def split_fields(text: str) -> list[str]:
    return [f.strip() for f in text.split(",") if f.strip()]
