"""The config's indexes (core.configindex): after any sequence of changes, an index that followed
them object by object, and the config's own kept index, equal a brute-force scan."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.core import configindex, model
from tests.conftest import build_config


def brute_force(config: model.ConfigData) -> dict[str, object]:
    """Every table of `ConfigIndex.comparable()`, by scanning every object."""
    def names(table: dict[str, Any]) -> dict[str, object]:
        by_name: dict[str, list[str]] = {}
        by_short: dict[str, list[str]] = {}
        for uuid, obj in table.items():
            by_name.setdefault(obj.name, []).append(uuid)
            by_short.setdefault(obj.name.split(".", 1)[0], []).append(uuid)
        return {"by_name": {k: sorted(v) for k, v in by_name.items()},
                "by_short": {k: sorted(v) for k, v in by_short.items()},
                "names": {uuid: obj.name for uuid, obj in table.items()}}

    primaries: dict[str, set[str]] = {}
    secondaries: dict[str, set[str]] = {}
    disk_owner: dict[str, str] = {}
    minor_owner: dict[tuple[str, int], str] = {}
    port_owner: dict[int, str] = {}

    def walk(inst: model.Instance, disk: model.Disk) -> None:
        disk_owner[disk.uuid] = inst.uuid
        if isinstance(disk.logical_id, model.DrbdId):
            port_owner[disk.logical_id.port] = inst.uuid
            for node, minor in zip(disk.logical_id.nodes, disk.logical_id.minors, strict=True):
                minor_owner[(node, minor)] = inst.uuid
        for child in disk.children:
            walk(inst, child)

    for inst in config.instances.values():
        primaries.setdefault(inst.primary_node, set()).add(inst.uuid)
        for node in {n for d in inst.disks if isinstance(d.logical_id, model.DrbdId)
                     for n in d.logical_id.nodes if n != inst.primary_node}:
            secondaries.setdefault(node, set()).add(inst.uuid)
        for disk in inst.disks:
            walk(inst, disk)
    group_nodes: dict[str, set[str]] = {}
    for node in config.nodes.values():
        group_nodes.setdefault(node.group, set()).add(node.uuid)
    return {
        "nodes": names(config.nodes), "instances": names(config.instances),
        "groups": names(config.nodegroups), "networks": names(config.networks),
        "primaries": primaries, "secondaries": secondaries, "group_nodes": group_nodes,
        "node_group": {n.uuid: n.group for n in config.nodes.values()},
        "disk_owner": disk_owner, "minor_owner": minor_owner, "port_owner": port_owner,
    }


_SERIALS = itertools.count()  # unique LV names and DRBD ports

# One change: (operation, a number choosing its target, a number choosing its new value).
CHANGES = st.lists(st.tuples(
    st.sampled_from(["add_plain", "add_drbd", "remove", "rename", "move_primary", "swap_drbd",
                     "add_node", "remove_node", "rename_node", "regroup_node", "add_group"]),
    st.integers(0, 1000), st.integers(0, 1000)), max_size=30)


def apply_change(config: model.ConfigData, index: configindex.ConfigIndex, op: str,
                 target: int, value: int) -> None:
    """Apply one change to `config` and tell `index` about it, as the store does."""
    nodes = sorted(config.nodes)
    instances = sorted(config.instances)
    groups = sorted(config.nodegroups)
    serial = next(_SERIALS)
    if op in ("add_plain", "add_drbd") and nodes:
        primary = nodes[target % len(nodes)]
        if op == "add_drbd" and len(nodes) > 1:
            peer = [n for n in nodes if n != primary][value % (len(nodes) - 1)]
            # ports and minors unique, as the LUs allocate them (a collision is verify's)
            used = brute_force(config)["minor_owner"]
            assert isinstance(used, dict)
            minors = [min(m for m in range(len(used) + 1) if (node, m) not in used)
                      for node in (primary, peer)]
            lid: model.LogicalId = model.DrbdId(nodes=[primary, peer], port=20000 + serial,
                                                minors=minors, secret="s")
            children = [model.Disk(uuid=model.new_uuid(), dev_type="plain", size=1,
                                   logical_id=model.PlainId(vg="xenvg", lv=f"x{serial}"))]
            disk = model.Disk(uuid=model.new_uuid(), dev_type="drbd", size=1, logical_id=lid,
                              children=children)
        else:
            disk = model.Disk(uuid=model.new_uuid(), dev_type="plain", size=1,
                              logical_id=model.PlainId(vg="xenvg", lv=f"p{serial}"))
        inst = model.Instance(uuid=model.new_uuid(), name=f"i{value % 13}.example.com",
                              primary_node=primary, os="debootstrap", hypervisor="kvm",
                              disks=[disk])
        config.instances[inst.uuid] = inst
        index.put_instance(inst)
    elif op == "remove" and instances:
        uuid = instances[target % len(instances)]
        del config.instances[uuid]
        index.drop_instance(uuid)
    elif op == "rename" and instances:
        inst = config.instances[instances[target % len(instances)]]
        inst.name = f"r{value % 11}.example.com"
        index.put_instance(inst)
    elif op == "move_primary" and instances and nodes:
        inst = config.instances[instances[target % len(instances)]]
        inst.primary_node = nodes[value % len(nodes)]
        index.put_instance(inst)
    elif op == "swap_drbd" and instances:
        inst = config.instances[instances[target % len(instances)]]
        for disk in inst.disks:
            if isinstance(disk.logical_id, model.DrbdId):
                disk.logical_id.nodes.reverse()
                disk.logical_id.minors.reverse()
                inst.primary_node = disk.logical_id.nodes[0]
        index.put_instance(inst)
    elif op == "add_node" and groups:
        node = model.Node(uuid=model.new_uuid(), name=f"n{value % 9}.example.com",
                          primary_ip="192.0.2.99", group=groups[target % len(groups)])
        config.nodes[node.uuid] = node
        index.put_node(node)
    elif op == "remove_node" and nodes:
        uuid = nodes[target % len(nodes)]
        if not any(uuid in i.all_nodes for i in config.instances.values()):
            del config.nodes[uuid]
            index.drop_node(uuid)
    elif op == "rename_node" and nodes:
        node = config.nodes[nodes[target % len(nodes)]]
        node.name = f"m{value % 9}.example.com"
        index.put_node(node)
    elif op == "regroup_node" and nodes and groups:
        node = config.nodes[nodes[target % len(nodes)]]
        node.group = groups[value % len(groups)]
        index.put_node(node)
    elif op == "add_group":
        group = model.NodeGroup(uuid=model.new_uuid(), name=f"g{value % 5}")
        config.nodegroups[group.uuid] = group
        index.put_group(group)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CHANGES)
def test_indexes_equal_a_brute_force_scan_after_any_changes(
        changes: list[tuple[str, int, int]]) -> None:
    config = build_config(nodes=4, drbd_instances=3, plain_instances=2)
    followed = configindex.ConfigIndex.build(config)
    assert followed.comparable() == brute_force(config)
    for op, target, value in changes:
        apply_change(config, followed, op, target, value)
        config.touch()  # as a store's write does: the kept index is dropped
        expected = brute_force(config)
        assert followed.comparable() == expected, (op, target, value)
        assert config.index().comparable() == expected, (op, target, value)


def test_node_queries_answer_from_the_index() -> None:
    config = build_config(nodes=3, drbd_instances=3, plain_instances=2)
    for node in config.nodes.values():
        primaries = sorted(i.name for i in config.instances.values()
                           if i.primary_node == node.uuid)
        secondaries = sorted(i.name for i in config.instances.values()
                             if node.uuid in i.secondary_nodes)
        assert [i.name for i in config.primary_instances(node.uuid)] == primaries
        assert [i.name for i in config.secondary_instances(node.uuid)] == secondaries
        assert {i.uuid for i in config.instances_on(node.uuid)} == {
            i.uuid for i in config.instances.values() if node.uuid in i.all_nodes}


def test_a_config_being_changed_is_never_answered_from_a_kept_index() -> None:
    config = build_config(nodes=3, drbd_instances=2, plain_instances=1)
    inst = next(iter(config.instances.values()))
    config.index()  # kept
    config.changing()
    old_name = inst.name
    inst.name = "renamed.example.com"  # a change in progress: counts and serial unchanged
    assert config.find_instance("renamed.example.com") is inst
    assert config.find_instance("renamed") is inst
    other = next(i for i in config.instances.values() if i is not inst)
    inst.primary_node, moved_from = other.primary_node, inst.primary_node
    assert inst in config.primary_instances(other.primary_node)
    assert inst not in config.primary_instances(moved_from) or moved_from == other.primary_node
    config.changing(False)
    assert old_name != inst.name
