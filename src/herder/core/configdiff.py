"""A config change as the objects it touched: found, checked and applied in proportion to them.

A store write used to re-encode, re-check and rewrite the whole document. Here a change is a
`ChangeSet`: the objects (node groups, nodes, instances, networks, by UUID; the cluster and the
maintenance sections) whose encoding differs from the last one written, the objects deleted,
and the document's own fields. `Encoded` keeps each object's last written encoding, so finding
the change costs one encoding per object (C speed, milliseconds at 10,000 instances) and the
checks, the index and what is written (a journal record, etcd keys) follow the change only.

`check` runs exactly the checks a whole-document round trip runs (each changed object's own,
decoded from its new encoding, and the document's: keys are UUIDs, routed NICs have an IP),
on the changed objects.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
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
SECTIONS: dict[str, type[model.Base]] = {"cluster": model.Cluster,
                                         "maintenance": model.Maintenance}
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
    """Each object's encoding as last written (or read)."""

    tables: dict[str, dict[str, bytes]] = field(default_factory=dict)
    sections: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def of(cls, config: model.ConfigData) -> Encoded:
        return cls(
            tables={name: {uuid: encode_object(obj) for uuid, obj in getattr(config, name).items()}
                    for name in TABLES},
            sections={name: encode_object(getattr(config, name)) for name in SECTIONS})

    def copy(self) -> Encoded:
        return Encoded({name: dict(table) for name, table in self.tables.items()},
                       dict(self.sections))


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


def diff(before: Encoded, config: model.ConfigData) -> ChangeSet:
    """The change from `before` to `config` (one encoding per object of `config`)."""
    change = ChangeSet(top=top_fields(config))
    for name in TABLES:
        old = before.tables.get(name, {})
        table: dict[str, Any] = getattr(config, name)
        puts = {}
        for uuid, obj in table.items():
            raw = encode_object(obj)
            if old.get(uuid) != raw:
                puts[uuid] = raw
        if puts:
            change.puts[name] = puts
        gone = [uuid for uuid in old if uuid not in table]
        if gone:
            change.deletes[name] = gone
    for name in SECTIONS:
        raw = encode_object(getattr(config, name))
        if before.sections.get(name) != raw:
            change.sections[name] = raw
    return change


def check(config: model.ConfigData, change: ChangeSet) -> None:
    """Run on `config` the checks a round trip of the whole document runs, for the objects
    `change` touched; each changed object is replaced by its checked (normalized) copy.
    ConfigError names the first problem."""
    for name, raw in change.sections.items():
        checked = decode_object(name, raw)
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
            table[uuid] = checked
            puts[uuid] = encode_object(checked)
    if config.version != model.FORMAT_VERSION:
        raise ConfigError(f"invalid config: config format version {config.version} is not "
                          f"supported (this herder reads version {model.FORMAT_VERSION})")
    # routed NICs need an IP: their instances, or all of them when what fills NIC parameters
    # (the cluster, groups, networks, nodes' groups) changed
    wide = bool(change.sections.get("cluster") or set(change.puts) - {"instances"}
                or change.deletes)
    instances = (config.instances.values() if wide else
                 [config.instances[u] for u in change.puts.get("instances", {})])
    try:
        model.check_instance_nics(config, instances)
    except ValueError as err:
        raise ConfigError(f"invalid config: {err}") from None


def remember(encoded: Encoded, change: ChangeSet) -> None:
    """Make `encoded` describe the state after `change`."""
    for name, puts in change.puts.items():
        encoded.tables.setdefault(name, {}).update(puts)
    for name, gone in change.deletes.items():
        table = encoded.tables.get(name, {})
        for uuid in gone:
            table.pop(uuid, None)
    encoded.sections.update(change.sections)


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
