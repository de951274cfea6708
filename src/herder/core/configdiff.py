"""A config change as the objects it touched: found, checked and applied in proportion to them.

A store write used to re-encode, re-check and rewrite the whole document. Here a change is a
`ChangeSet`: the objects (node groups, nodes, instances, networks, by UUID; the cluster and the
maintenance sections) whose encoding differs from the last one written, the objects deleted,
and the document's own fields. A writer works on `writable(config)`: tables that copy each
object on its first read and note what was read, set or deleted (`TrackedTable`), so the
change is found by encoding the touched objects only, and the readers' shared objects are
never changed (which is why `Encoded` can encode them when asked instead of keeping their
bytes). The checks, the index and what is written (a journal record, etcd keys) follow the
change only.

`check` runs exactly the checks a whole-document round trip runs (each changed object's own,
decoded from its new encoding, and the document's: keys are UUIDs, routed NICs have an IP),
on the changed objects.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from herder.core import model
from herder.core.errors import ConfigError

# The document's tables of objects, each keyed by UUID, and their object types.
TABLES: dict[str, type[model.Named]] = {
    "nodegroups": model.NodeGroup, "nodes": model.Node, "instances": model.Instance,
    "networks": model.Network,
}
# The sections: each encoded, checked and written whole (the filter rules are a handful)
SECTIONS: dict[str, Any] = {"cluster": model.Cluster, "maintenance": model.Maintenance,
                            "filters": dict[str, model.FilterRule]}
TOP_FIELDS = ("version", "serial_no", "ctime", "mtime")

_ENCODER = msgspec.json.Encoder(order="sorted")
_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    name: msgspec.json.Decoder(kind) for name, kind in {**TABLES, **SECTIONS}.items()}


def encode_object(obj: Any) -> bytes:
    return _ENCODER.encode(obj)


def decode_object(table: str, raw: bytes) -> Any:
    """One object of `table` (or a section) from its encoding, with its own checks."""
    try:
        return _DECODERS[table].decode(raw)
    except msgspec.ValidationError as err:
        raise ConfigError(f"invalid config: {err}") from None
    except msgspec.DecodeError as err:
        raise ConfigError(f"config object is not valid JSON: {err}") from None


@dataclass
class Encoded:
    """Each object's encoding as last written (or read): encoded when asked, from the objects
    of the config it describes. Those objects are never changed (a writer changes copies,
    `writable`), so their encoding now is the one written; no second copy of the document
    is kept in memory."""

    tables: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)
    sections: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def of(cls, config: model.ConfigData) -> Encoded:
        return cls(
            tables={name: _Encodings(getattr(config, name)) for name in TABLES},
            sections={name: encode_object(getattr(config, name)) for name in SECTIONS})

    def copy(self) -> Encoded:
        return Encoded(dict(self.tables), dict(self.sections))


class _Encodings(Mapping[str, bytes]):
    """UUID -> encoding of one table's objects, encoded on each lookup."""

    __slots__ = ("objects",)

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects

    def __getitem__(self, uuid: str) -> bytes:
        return encode_object(dict.__getitem__(self.objects, uuid))

    def __contains__(self, uuid: object) -> bool:
        return uuid in self.objects

    def __iter__(self) -> Iterator[str]:
        return iter(list(dict.keys(self.objects)))

    def __len__(self) -> int:
        return len(self.objects)


@dataclass
class ChangeSet:
    """What one change did: new encodings of changed or added objects, deleted UUIDs, changed
    sections, and the document's fields after it."""

    puts: dict[str, dict[str, bytes]] = field(default_factory=dict)
    deletes: dict[str, list[str]] = field(default_factory=dict)
    sections: dict[str, bytes] = field(default_factory=dict)
    top: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.puts or self.deletes or self.sections)

    def touched(self) -> int:
        return (sum(len(t) for t in self.puts.values())
                + sum(len(d) for d in self.deletes.values()) + len(self.sections))


def top_fields(config: model.ConfigData) -> dict[str, Any]:
    return {name: getattr(config, name) for name in TOP_FIELDS}


class TrackedTable(dict[str, Any]):
    """A writer's table (`writable`): every object read from it is first replaced by a private
    copy decoded from its last written encoding, and every key read, set or deleted is noted.
    So a change never alters the objects the process's readers share, and it is found among
    the objects the writer touched (not by encoding the whole cluster). Scans that only read
    go through `plain_values`."""

    __slots__ = ("encoded", "table", "touched")

    def __init__(self, table: str, objects: dict[str, Any],
                 encoded: Mapping[str, bytes]) -> None:
        super().__init__(objects)
        self.table = table
        self.encoded = encoded
        self.touched: set[str] = set()

    def _own(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if key not in self.touched:
            self.touched.add(key)
            raw = self.encoded.get(key)
            value = decode_object(self.table, raw if raw is not None else encode_object(value))
            dict.__setitem__(self, key, value)
        return value

    def __getitem__(self, key: str) -> Any:
        return self._own(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self._own(key) if key in self else default

    def __iter__(self) -> Iterator[str]:  # also makes dict(table) copy through __getitem__
        return iter(list(dict.keys(self)))

    def values(self) -> list[Any]:  # type: ignore[override]  # copies, not a live view
        return [self._own(key) for key in list(dict.keys(self))]

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]  # as values()
        return [(key, self._own(key)) for key in list(dict.keys(self))]

    def __setitem__(self, key: str, value: Any) -> None:
        self.touched.add(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: str) -> None:
        self.touched.add(key)
        dict.__delitem__(self, key)

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        value = self._own(key)
        dict.__delitem__(self, key)
        return value

    def popitem(self) -> tuple[str, Any]:
        key = next(reversed(list(dict.keys(self))))
        return key, self.pop(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self._own(key)
        self[key] = default
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        self.touched.update(dict.keys(self))
        dict.clear(self)

    def copy(self) -> dict[str, Any]:
        return dict(self.items())

    def __reduce__(self) -> Any:
        return (dict, (dict(self.items()),))


def plain_values(table: dict[str, Any]) -> Iterable[Any]:
    """A table's objects for a scan that only reads them (a writer's table copies nothing)."""
    return dict.values(table)


def writable(config: model.ConfigData, encoded: Encoded) -> model.ConfigData:
    """A copy of `config` for a writer: tracked tables over the same objects (copied on first
    read) and private copies of the sections; `config` and its objects stay as they are."""
    values: dict[str, Any] = {
        name: TrackedTable(name, getattr(config, name), encoded.tables.get(name, {}))
        for name in TABLES}
    for name in SECTIONS:
        raw = encoded.sections.get(name)
        values[name] = decode_object(name, raw if raw is not None
                                     else encode_object(getattr(config, name)))
    return with_tables(config, values)


def settle(config: model.ConfigData, original: model.ConfigData, change: ChangeSet) -> None:
    """A writer's config made plain again (ordinary dicts) to be shared: the objects and
    sections it read but did not change are the original's again (one copy in memory, and
    what readers keep per object, e.g. encoded views, stays valid)."""
    for name in TABLES:
        table = getattr(config, name)
        if isinstance(table, TrackedTable):
            before: dict[str, Any] = getattr(original, name)
            changed = change.puts.get(name, {})
            if all(dict.__contains__(table, uuid) and uuid in before for uuid in table.touched):
                # no object added or removed: the original's table (a plain dict copies in
                # one C pass; the tracked one item by item, 15 ms at 50,000 instances) with
                # the changed objects in their places
                plain = dict(before)
                for uuid in changed:
                    plain[uuid] = dict.__getitem__(table, uuid)
            else:
                plain = dict(dict.items(table))
                for uuid in table.touched:
                    if uuid in plain and uuid not in changed and uuid in before:
                        plain[uuid] = before[uuid]
            setattr(config, name, plain)
    for name in SECTIONS:
        if name not in change.sections:
            setattr(config, name, getattr(original, name))


def diff(before: Encoded, config: model.ConfigData) -> ChangeSet:
    """The change from `before` to `config`: for a tracked table (`writable`) the objects the
    writer touched, for any other table one encoding per object."""
    change = ChangeSet(top=top_fields(config))
    for name in TABLES:
        old = before.tables.get(name, {})
        table: dict[str, Any] = getattr(config, name)
        puts = {}
        if isinstance(table, TrackedTable) and table.encoded is old:
            gone = []
            for uuid in sorted(table.touched):
                if uuid in table:
                    raw = encode_object(dict.__getitem__(table, uuid))
                    if old.get(uuid) != raw:
                        puts[uuid] = raw
                elif uuid in old:
                    gone.append(uuid)
        else:
            for uuid, obj in dict.items(table):
                raw = encode_object(obj)
                if old.get(uuid) != raw:
                    puts[uuid] = raw
            gone = [uuid for uuid in old if uuid not in table]
        if puts:
            change.puts[name] = puts
        if gone:
            change.deletes[name] = gone
    for name in SECTIONS:
        raw = encode_object(getattr(config, name))
        if before.sections.get(name) != raw:
            change.sections[name] = raw
    return change


def begin_change(current: model.ConfigData, encoded: Encoded) -> tuple[model.ConfigData, Any]:
    """A store's writer block opens: tables that copy each object the block reads (`current`,
    the readers' snapshot, stays), lookups by the starting index; (writable config, index)."""
    config = writable(current, encoded)
    kept = current.__dict__.get("_index")
    started = kept[1] if kept is not None else None
    config.changing(lookup=started)
    return config, started


def end_change(config: model.ConfigData, current: model.ConfigData, encoded: Encoded,
               started: Any) -> ChangeSet:
    """The writer block closed: its change, checked (ConfigError: nothing is to be written)."""
    config.changing(False)
    config.touch(model.now())
    change = diff(encoded, config)
    settle(config, current, change)
    try:
        check(config, change, started)
    except ConfigError as err:
        raise ConfigError(f"change refused, nothing written: {err}") from None
    return change


def check(config: model.ConfigData, change: ChangeSet, index: Any = None) -> None:
    """Run on `config` the checks a round trip of the whole document runs, for the objects
    `change` touched; each changed object is replaced by its checked (normalized) copy.
    `index`: the index of the config the change started from (narrows the NIC check of
    changed nodes to their instances). ConfigError names the first problem."""
    for name, raw in change.sections.items():
        checked = decode_object(name, raw)
        if name == "filters":
            try:
                model.check_filters(checked)
            except ValueError as err:
                raise ConfigError(f"invalid config: {err}") from None
        setattr(config, name, checked)
        change.sections[name] = encode_object(checked)  # normalized, as it will be read back
    kinds = {"nodegroups": "node group", "nodes": "node", "instances": "instance",
             "networks": "network"}
    for name, puts in change.puts.items():
        table: dict[str, Any] = getattr(config, name)
        for uuid, raw in puts.items():
            checked = decode_object(name, raw)
            if checked.uuid != uuid:
                raise ConfigError(f"invalid config: {kinds[name]} {checked.name!r} is filed "
                                  f"under {uuid!r}, not its UUID")
            dict.__setitem__(table, uuid, checked)
            puts[uuid] = encode_object(checked)
    if config.version != model.FORMAT_VERSION:
        raise ConfigError(f"invalid config: config format version {config.version} is not "
                          f"supported (this herder reads version {model.FORMAT_VERSION})")
    try:
        model.check_instance_nics(config, _nic_checked(config, change, index))
    except ValueError as err:
        raise ConfigError(f"invalid config: {err}") from None


def _nic_checked(config: model.ConfigData, change: ChangeSet, index: Any) -> Iterable[Any]:
    """The instances whose NICs a change may have broken (routed NICs need an IP): those it
    touched, those on the nodes it touched (a node's group fills NIC parameters), or all of
    them when what fills every instance's NIC parameters changed (the cluster, groups,
    networks) or objects were deleted."""
    from herder.core.configindex import ConfigIndex

    instances: dict[str, Any] = config.instances
    node_puts = change.puts.get("nodes", {})
    wide = bool(change.sections.get("cluster") or set(change.puts) - {"instances", "nodes"}
                or change.deletes or (node_puts and not isinstance(index, ConfigIndex)))
    if wide:
        return plain_values(instances)
    uuids = set(change.puts.get("instances", {}))
    if isinstance(index, ConfigIndex):
        for node in node_puts:
            uuids.update(index.primary_uuids(node))
    return [dict.__getitem__(instances, u) for u in sorted(uuids) if u in instances]


def apply(config: model.ConfigData, change: ChangeSet) -> model.ConfigData:
    """A new config: `config` with `change` applied (objects decoded and checked; `config`
    itself and its objects are left as they are, so readers holding it are not disturbed)."""
    values: dict[str, Any] = {name: dict(getattr(config, name)) for name in TABLES}
    for name, puts in change.puts.items():
        for uuid, raw in puts.items():
            values[name][uuid] = decode_object(name, raw)
    for name, gone in change.deletes.items():
        for uuid in gone:
            values[name].pop(uuid, None)
    for name in SECTIONS:
        section = change.sections.get(name)
        values[name] = (decode_object(name, section) if section is not None
                        else getattr(config, name))
    new = with_tables(config, {**values, **change.top})
    index = config.__dict__.get("_index")
    if index is not None:  # follow the change instead of building the index again
        new.keep_index(follow(index[1], new, change))
    return new


def with_tables(config: model.ConfigData, values: dict[str, Any]) -> model.ConfigData:
    """A shallow copy of `config` with `values` set, without the document's own whole-config
    checks (`check` ran what the change needs; the rest holds already)."""
    new = copy.copy(config)
    new.__dict__.clear()  # the kept index and marks are the original's
    for name, value in values.items():
        setattr(new, name, value)
    return new


def follow(index: Any, config: model.ConfigData, change: ChangeSet) -> Any:
    """`index` (of the config before `change`) made to describe `config` (after it)."""
    from herder.core.configindex import ConfigIndex

    if not isinstance(index, ConfigIndex):
        return ConfigIndex.build(config)
    putters: dict[str, tuple[Callable[[Any], None], Callable[[str], None]]] = {
        "nodegroups": (index.put_group, index.drop_group),
        "nodes": (index.put_node, index.drop_node),
        "instances": (index.put_instance, index.drop_instance),
        "networks": (index.put_network, index.drop_network)}
    for name, puts in change.puts.items():
        table: dict[str, Any] = getattr(config, name)
        for uuid in puts:
            putters[name][0](table[uuid])
    for name, gone in change.deletes.items():
        for uuid in gone:
            putters[name][1](uuid)
    return index


# --- a change set as JSON (the file store's journal records) -----------------------------------


def encode_change(change: ChangeSet, base: int) -> bytes:
    """One journal record: the change from serial `base`."""
    record = {
        "base": base, "top": change.top,
        "puts": {name: {uuid: msgspec.Raw(raw) for uuid, raw in puts.items()}
                 for name, puts in change.puts.items()},
        "deletes": change.deletes,
        "sections": {name: msgspec.Raw(raw) for name, raw in change.sections.items()},
    }
    return _ENCODER.encode(record)


class _Record(msgspec.Struct, forbid_unknown_fields=True):
    base: int
    top: dict[str, Any]
    puts: dict[str, dict[str, msgspec.Raw]]
    deletes: dict[str, list[str]]
    sections: dict[str, msgspec.Raw]


_RECORD = msgspec.json.Decoder(_Record)


def decode_change(raw: bytes) -> tuple[int, ChangeSet]:
    """(base serial, change) of one journal record; ConfigError if it is not one."""
    try:
        record = _RECORD.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as err:
        raise ConfigError(f"bad journal record: {err}") from None
    unknown = (set(record.puts) | set(record.deletes)) - set(TABLES) or \
        set(record.sections) - set(SECTIONS) or set(record.top) - set(TOP_FIELDS)
    if unknown:
        raise ConfigError(f"bad journal record: unknown parts {sorted(unknown)}")
    return record.base, ChangeSet(
        puts={name: {uuid: bytes(raw) for uuid, raw in puts.items()}
              for name, puts in record.puts.items()},
        deletes=record.deletes,
        sections={name: bytes(raw) for name, raw in record.sections.items()},
        top=record.top)
