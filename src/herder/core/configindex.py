"""Indexes of one cluster config: who is where, by name and by reference, in O(1).

Queries over a cluster of 1,000 nodes and 10,000 instances (node lists with their instances,
confd's answers, the iallocator input) must not scan every instance for every node. A
`ConfigIndex` is built once per config in O(nodes + instances) and kept with it
(`model.ConfigData.index()`); it can also follow a change object by object (`put_*`, `drop_*`),
which is what the store does when it applies a change set.

Every table maps to UUIDs; the objects are looked up in the config, so an index never holds an
object that a change replaced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from herder.core import model  # types only: model imports the index

DRBD = "drbd"  # the disk template (dev_type) of a DRBD disk


@dataclass(frozen=True)
class InstanceFacts:
    """What one instance contributes to the indexes (kept so a change can take it back)."""

    name: str
    primary: str
    secondaries: tuple[str, ...]
    disks: tuple[str, ...]  # every disk UUID, children included
    minors: tuple[tuple[str, int], ...]  # (node UUID, DRBD minor)
    ports: tuple[int, ...]  # DRBD TCP ports


def instance_facts(inst: model.Instance) -> InstanceFacts:
    disks: list[str] = []
    minors: list[tuple[str, int]] = []
    ports: list[int] = []
    for disk in inst.disks:
        _walk_disk(disk, disks, minors, ports)
    return InstanceFacts(inst.name, inst.primary_node, tuple(inst.secondary_nodes),
                         tuple(disks), tuple(minors), tuple(ports))


def _walk_disk(disk: model.Disk, disks: list[str], minors: list[tuple[str, int]],
               ports: list[int]) -> None:
    # a module function, not a closure calling itself: that closure is a reference cycle per
    # instance, 100,000 objects of garbage for the cyclic GC per index of 10,000 instances
    disks.append(disk.uuid)
    if disk.dev_type == DRBD:  # as Ganeti tells a DRBD disk: model.Disk insists on its DrbdId
        lid = cast("model.DrbdId", disk.logical_id)
        ports.append(lid.port)
        minors.extend(zip(lid.nodes, lid.minors, strict=True))
    for child in disk.children:
        _walk_disk(child, disks, minors, ports)


def _short(name: str) -> str:
    return name.split(".", 1)[0]


@dataclass
class NameTable:
    """name -> UUIDs and short name (before the first dot) -> UUIDs of one kind of object.
    Lists, not single UUIDs: a broken config may hold duplicates (verify reports them)."""

    by_name: dict[str, list[str]] = field(default_factory=dict)
    by_short: dict[str, list[str]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # UUID -> name

    def put(self, uuid: str, name: str) -> None:
        self.drop(uuid)
        self.names[uuid] = name
        self.by_name.setdefault(name, []).append(uuid)
        self.by_short.setdefault(_short(name), []).append(uuid)

    def drop(self, uuid: str) -> None:
        name = self.names.pop(uuid, None)
        if name is None:
            return
        _remove(self.by_name, name, uuid)
        _remove(self.by_short, _short(name), uuid)


def _remove(table: dict[str, list[str]], key: str, uuid: str) -> None:
    entries = table.get(key)
    if entries is None:
        return
    if uuid in entries:
        entries.remove(uuid)
    if not entries:
        del table[key]


def _discard(table: dict[str, set[str]], key: str, uuid: str) -> None:
    members = table.get(key)
    if members is None:
        return
    members.discard(uuid)
    if not members:
        del table[key]


class ConfigIndex:
    """The indexes of one config (see the module's docstring)."""

    def __init__(self) -> None:
        self.nodes = NameTable()
        self.instances = NameTable()
        self.groups = NameTable()
        self.networks = NameTable()
        self.primaries: dict[str, set[str]] = {}  # node UUID -> instance UUIDs
        self.secondaries: dict[str, set[str]] = {}  # node UUID -> instance UUIDs
        self.group_nodes: dict[str, set[str]] = {}  # group UUID -> node UUIDs
        self.node_group: dict[str, str] = {}  # node UUID -> group UUID
        self.disk_owner: dict[str, str] = {}  # disk UUID -> instance UUID
        self.minor_owner: dict[tuple[str, int], str] = {}  # (node, minor) -> instance UUID
        self.port_owner: dict[int, str] = {}  # DRBD port -> instance UUID
        self.facts: dict[str, InstanceFacts] = {}

    @classmethod
    def build(cls, config: model.ConfigData) -> ConfigIndex:
        index = cls()
        for group in dict.values(config.nodegroups):  # reads only (a writer's table copies)
            index.groups.put(group.uuid, group.name)
        for network in dict.values(config.networks):
            index.networks.put(network.uuid, network.name)
        for node in dict.values(config.nodes):
            index.put_node(node)
        for inst in dict.values(config.instances):
            index.put_instance(inst)
        return index

    # --- following changes ----------------------------------------------------------------------

    def put_instance(self, inst: model.Instance) -> None:
        """Index `inst` as it is now (replacing what its UUID contributed before)."""
        self.drop_instance(inst.uuid)
        facts = instance_facts(inst)
        uuid = inst.uuid
        self.facts[uuid] = facts
        self.instances.put(uuid, facts.name)
        self.primaries.setdefault(facts.primary, set()).add(uuid)
        for node in facts.secondaries:
            self.secondaries.setdefault(node, set()).add(uuid)
        for disk in facts.disks:
            self.disk_owner[disk] = uuid
        for key in facts.minors:
            self.minor_owner[key] = uuid
        for port in facts.ports:
            self.port_owner[port] = uuid

    def drop_instance(self, uuid: str) -> None:
        facts = self.facts.pop(uuid, None)
        if facts is None:
            return
        self.instances.drop(uuid)
        _discard(self.primaries, facts.primary, uuid)
        for node in facts.secondaries:
            _discard(self.secondaries, node, uuid)
        for disk in facts.disks:
            if self.disk_owner.get(disk) == uuid:
                del self.disk_owner[disk]
        for key in facts.minors:
            if self.minor_owner.get(key) == uuid:
                del self.minor_owner[key]
        for port in facts.ports:
            if self.port_owner.get(port) == uuid:
                del self.port_owner[port]

    def put_node(self, node: model.Node) -> None:
        self.drop_node(node.uuid)
        self.nodes.put(node.uuid, node.name)
        self.node_group[node.uuid] = node.group
        self.group_nodes.setdefault(node.group, set()).add(node.uuid)

    def drop_node(self, uuid: str) -> None:
        self.nodes.drop(uuid)
        group = self.node_group.pop(uuid, None)
        if group is not None:
            _discard(self.group_nodes, group, uuid)

    def put_group(self, group: model.NodeGroup) -> None:
        self.groups.put(group.uuid, group.name)

    def drop_group(self, uuid: str) -> None:
        self.groups.drop(uuid)

    def put_network(self, network: model.Network) -> None:
        self.networks.put(network.uuid, network.name)

    def drop_network(self, uuid: str) -> None:
        self.networks.drop(uuid)

    # --- queries (UUIDs; `model.ConfigData` turns them into objects) ------------------------------

    def primary_uuids(self, node_uuid: str) -> set[str]:
        return self.primaries.get(node_uuid, set())

    def secondary_uuids(self, node_uuid: str) -> set[str]:
        return self.secondaries.get(node_uuid, set())

    def instance_uuids_on(self, node_uuid: str) -> list[str]:
        """Primary and secondary instances of a node, each once (a copy: a store's writer may
        make the index follow a change while a reader of the older config iterates)."""
        primaries = list(self.primary_uuids(node_uuid))
        seen = set(primaries)
        return primaries + [u for u in list(self.secondary_uuids(node_uuid)) if u not in seen]

    def comparable(self) -> dict[str, object]:
        """Every table, as plain values (tests compare an index followed through changes with
        one built from scratch)."""
        def names(table: NameTable) -> dict[str, object]:
            return {"by_name": {k: sorted(v) for k, v in table.by_name.items()},
                    "by_short": {k: sorted(v) for k, v in table.by_short.items()},
                    "names": dict(table.names)}

        return {
            "nodes": names(self.nodes), "instances": names(self.instances),
            "groups": names(self.groups), "networks": names(self.networks),
            "primaries": {k: set(v) for k, v in self.primaries.items()},
            "secondaries": {k: set(v) for k, v in self.secondaries.items()},
            "group_nodes": {k: set(v) for k, v in self.group_nodes.items()},
            "node_group": dict(self.node_group), "disk_owner": dict(self.disk_owner),
            "minor_owner": dict(self.minor_owner), "port_owner": dict(self.port_owner),
        }
