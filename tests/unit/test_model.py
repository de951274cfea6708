"""The cluster model: round-trips, UUIDs, lookups, derived placement, validation at the edge."""

from __future__ import annotations

import copy
import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herder.core import model
from herder.core.errors import AmbiguousError, ConfigError, NotFoundError
from tests.conftest import build_config


def test_round_trip_is_lossless(config: model.ConfigData) -> None:
    encoded = model.encode(config)
    decoded = model.decode(encoded)
    assert decoded == config
    assert model.encode(decoded) == encoded  # stable, sorted output


def test_round_trip_keeps_drbd_logical_id(config: model.ConfigData) -> None:
    decoded = model.decode(model.encode(config))
    inst = decoded.find_instance("drbd0.example.com")
    lid = inst.disks[0].logical_id
    assert isinstance(lid, model.DrbdId)
    original = config.find_instance("drbd0.example.com").disks[0].logical_id
    assert lid == original
    assert [c.dev_type for c in inst.disks[0].children] == ["plain", "plain"]


def test_every_object_has_uuid_serial_and_times(config: model.ConfigData) -> None:
    raw = json.loads(model.encode(config))
    for table in ("nodegroups", "nodes", "instances"):
        for key, obj in raw[table].items():
            assert obj["uuid"] == key
            assert {"serial_no", "ctime", "mtime", "name", "tags"} <= obj.keys()
    assert {"serial_no", "ctime", "mtime", "uuid"} <= raw["cluster"].keys()
    disk = next(iter(raw["instances"].values()))["disks"][0]
    assert {"uuid", "serial_no", "ctime", "mtime"} <= disk.keys()


def test_lookup_by_name_short_name_and_uuid(config: model.ConfigData) -> None:
    node = next(iter(config.nodes.values()))
    assert config.find_node(node.uuid) is node
    assert config.find_node(node.name) is node
    assert config.find_node(node.name.split(".")[0]) is node
    inst = config.find_instance("plain0")
    assert config.find_instance(inst.uuid) is inst
    group = config.find_group("default")
    assert config.find_group(group.uuid) is group


def test_lookup_errors_are_clear(config: model.ConfigData) -> None:
    with pytest.raises(NotFoundError, match="node 'nosuch' not found"):
        config.find_node("nosuch")
    twin = msgspec.structs.replace(
        config.find_node("node1"), uuid=model.new_uuid(), name="node1.other.org",
        primary_ip="192.0.2.99", master_candidate=False,
    )
    config.nodes[twin.uuid] = twin
    with pytest.raises(AmbiguousError, match="node1.example.com, node1.other.org"):
        config.find_node("node1")
    assert config.find_node("node1.other.org") is twin  # the full name still works


def test_rename_keeps_uuid_and_references(config: model.ConfigData) -> None:
    inst = config.find_instance("drbd0")
    node = config.nodes[inst.primary_node]
    node_uuid, inst_uuid = node.uuid, inst.uuid
    node.name = "renamed.example.com"
    inst.name = "web.example.com"
    reloaded = model.decode(model.encode(model.revalidate(config)))
    assert reloaded.find_node("renamed.example.com").uuid == node_uuid
    assert reloaded.find_instance("web").uuid == inst_uuid
    assert reloaded.find_instance(inst_uuid).primary_node == node_uuid


def test_secondary_nodes_and_template_come_from_disks(config: model.ConfigData) -> None:
    drbd = config.find_instance("drbd0")
    lid = drbd.disks[0].logical_id
    assert isinstance(lid, model.DrbdId)
    assert drbd.disk_template == "drbd"
    assert drbd.secondary_nodes == [lid.nodes[1]]
    plain = config.find_instance("plain0")
    assert plain.disk_template == "plain"
    assert plain.secondary_nodes == []
    assert drbd.uuid in {i.uuid for i in config.instances_on(lid.nodes[1])}


def test_os_variant_is_parsed() -> None:
    cfg = build_config()
    inst = cfg.find_instance("drbd0")
    assert (inst.os_name, inst.os_variant) == ("debootstrap", "default")
    assert cfg.find_instance("plain0").os_variant is None


def test_touch_increments_serial_and_mtime(config: model.ConfigData) -> None:
    node = config.find_node("node2")
    before = node.serial_no
    node.touch(123.0)
    assert node.serial_no == before + 1
    assert node.mtime == 123.0


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("cluster", "master_ip"), 5, "Expected `str`"),
        (("serial_no",), "x", "Expected `int`"),
        (("version",), 99, "format version 99 is not supported"),
        (("cluster", "enabled_hypervisors"), ["vmware"], "unknown hypervisor 'vmware'"),
        (("cluster", "default_iallocators"), {"sideways": ["hail"]}, "unknown request type"),
        (("cluster", "uid_pool"), [[10, 5]], "bad uid pool range 10-5"),
    ],
)
def test_invalid_documents_are_refused_with_the_reason(
    config: model.ConfigData, path: tuple[str, ...], value: object, message: str
) -> None:
    raw = json.loads(model.encode(config))
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ConfigError, match=message):
        model.decode(json.dumps(raw))


def test_unknown_fields_are_refused(config: model.ConfigData) -> None:
    raw = json.loads(model.encode(config))
    next(iter(raw["nodes"].values()))["colour"] = "blue"
    with pytest.raises(ConfigError, match="unknown field `colour`"):
        model.decode(json.dumps(raw))


def test_object_filed_under_wrong_key_is_refused(config: model.ConfigData) -> None:
    raw = json.loads(model.encode(config))
    key, node = next(iter(raw["nodes"].items()))
    raw["nodes"]["other-key"] = raw["nodes"].pop(key)
    with pytest.raises(ConfigError, match=f"node '{node['name']}' is filed under 'other-key'"):
        model.decode(json.dumps(raw))


def test_drbd_disk_needs_two_distinct_nodes() -> None:
    with pytest.raises(ValueError, match="two nodes must differ"):
        model.DrbdId(nodes=["a", "a"], port=11000, minors=[0, 1], secret="s")
    with pytest.raises(ValueError, match="exactly two nodes"):
        model.DrbdId(nodes=["a"], port=11000, minors=[0], secret="s")
    with pytest.raises(ValueError, match="drbd logical id"):
        model.Disk(uuid="d", dev_type="drbd", size=1, logical_id=model.PlainId(vg="v", lv="l"))


def test_node_flag_combinations_are_checked() -> None:
    with pytest.raises(ValueError, match="offline node cannot be a master candidate"):
        model.Node(uuid="n", name="n", primary_ip="1.1.1.1", group="g", offline=True,
                   master_candidate=True)
    with pytest.raises(ValueError, match="must be master capable"):
        model.Node(uuid="n", name="n", primary_ip="1.1.1.1", group="g", master_capable=False,
                   master_candidate=True)


def test_ipolicy_ranges_are_checked() -> None:
    policy = model.default_ipolicy()
    data = model.to_builtins(policy)
    data["std"]["memory-size"] = 10**9
    with pytest.raises(ValueError, match="std spec lies outside"):
        msgspec.convert(data, model.IPolicy).check_std()
    raw = json.loads(model.encode(build_config()))
    raw["cluster"]["ipolicy"] = data
    with pytest.raises(ConfigError, match="std spec lies outside"):
        model.decode(json.dumps(raw))
    data = model.to_builtins(policy)
    data["disk-templates"] = ["floppy"]
    with pytest.raises(msgspec.ValidationError, match="unknown disk template 'floppy'"):
        msgspec.convert(data, model.IPolicy)


def test_group_ipolicy_override_is_filled_from_cluster(config: model.ConfigData) -> None:
    group = config.find_group("default")
    group.ipolicy = model.IPolicyOverride(vcpu_ratio=2.5, disk_templates=["plain"])
    filled = config.filled_ipolicy(group)
    assert filled.vcpu_ratio == 2.5
    assert filled.disk_templates == ["plain"]
    assert filled.spindle_ratio == config.cluster.ipolicy.spindle_ratio
    assert filled.minmax == config.cluster.ipolicy.minmax
    raw = json.loads(model.encode(config))
    assert raw["nodegroups"][group.uuid]["ipolicy"] == {
        "disk-templates": ["plain"], "vcpu-ratio": 2.5
    }


def test_collector_settings_default_bounds_from_interval() -> None:
    settings = model.CollectorSettings(interval=10.0)
    assert (settings.min_interval, settings.max_interval) == (5.0, 40.0)
    with pytest.raises(ValueError, match="min_interval <= interval <= max_interval"):
        model.CollectorSettings(interval=10.0, min_interval=20.0)
    assert set(model.default_data_collectors()) >= {"drbd", "diagnose", "inst-status", "diskstats"}


def test_default_iallocators_per_request_type(config: model.ConfigData) -> None:
    config.cluster.default_iallocators = {"allocate": ["hail", "backup"], "relocate": []}
    again = model.decode(model.encode(model.revalidate(config)))
    assert again.cluster.default_iallocators["allocate"] == ["hail", "backup"]


def test_tags_follow_ganeti_rules(config: model.ConfigData) -> None:
    node = config.find_node("node1")
    model.tags_add(node, ["rack:a1", "ssd", "ssd"])
    assert node.tags == ["rack:a1", "ssd"]
    with pytest.raises(ConfigError, match="only letters"):
        model.tags_add(node, ["bad tag"])
    with pytest.raises(ConfigError, match="1 to 128"):
        model.tags_add(node, ["x" * 129])
    with pytest.raises(NotFoundError, match="not present: nosuch"):
        model.tags_remove(node, ["nosuch"])
    model.tags_remove(node, ["ssd"])
    assert node.tags == ["rack:a1"]


# --- interned strings (`model._interned`): equal values, one object ---------------------------

def _decoded_twice(config: model.ConfigData) -> tuple[model.ConfigData, model.ConfigData]:
    encoded = model.encode(config)
    return model.decode(encoded), model.decode(encoded)


def test_decoded_references_share_one_string_per_value(config: model.ConfigData) -> None:
    first, second = _decoded_twice(config)
    assert first == config and second == config
    drbd = [first.find_instance(f"drbd{i}.example.com") for i in range(2)]
    plain = first.find_instance("plain0.example.com")
    # two decodes (a reload, a journal record, a writer's copy) still share the values
    assert plain.primary_node is second.find_instance("plain0.example.com").primary_node
    assert drbd[0].primary_node is plain.primary_node  # both on node1
    lid = drbd[0].disks[0].logical_id
    assert isinstance(lid, model.DrbdId) and lid.nodes[0] is drbd[0].primary_node
    other = drbd[1].disks[0].logical_id
    assert isinstance(other, model.DrbdId) and other.nodes[0] is lid.nodes[1]
    children = [c for i in drbd for c in i.disks[0].children]
    assert all(c.dev_type is children[0].dev_type for c in children)
    vgs = [c.logical_id.vg for c in [*children, plain.disks[0]]
           if isinstance(c.logical_id, model.PlainId)]
    assert len(vgs) == 5 and all(vg is vgs[0] for vg in vgs)
    assert drbd[0].os is drbd[1].os and drbd[0].hypervisor is plain.hypervisor
    assert drbd[0].disks[0].iv_name is drbd[1].disks[0].iv_name
    groups = {id(n.group) for n in first.nodes.values()} | {id(n.group)
                                                            for n in second.nodes.values()}
    assert len(groups) == 1
    for table in (first.nodes, first.instances, first.nodegroups):
        assert all(key is obj.uuid for key, obj in table.items())


def test_an_object_decoded_alone_shares_the_configs_strings(config: model.ConfigData) -> None:
    from herder.core import configdiff

    decoded = model.decode(model.encode(config))
    inst = decoded.find_instance("drbd1.example.com")
    alone = configdiff.decode_object("instances", configdiff.encode_object(inst))
    assert alone == inst and alone.primary_node is inst.primary_node
    assert alone.disks[0].children[0].dev_type is inst.disks[0].children[0].dev_type


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=24)
_OS = st.from_regex(r"[a-z][a-z0-9_-]{0,10}(\+[a-z0-9_]{1,6})?", fullmatch=True)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(vg=_TEXT.filter(bool), iv_name=_TEXT, os_name=_OS, network=st.none() | _TEXT,
       group_key=st.uuids())
def test_interning_keeps_every_value(config: model.ConfigData, vg: str, iv_name: str,
                                     os_name: str, network: str | None,
                                     group_key: object) -> None:
    """Whatever the strings, the decoded config equals the one encoded, encodes to the same
    bytes, and equals a decode of the same document into plain builtins."""
    changed = copy.deepcopy(config)
    group = next(iter(changed.nodegroups.values()))
    del changed.nodegroups[group.uuid]
    group.uuid = str(group_key)
    changed.nodegroups[group.uuid] = group
    for node in changed.nodes.values():
        node.group = group.uuid
    for inst in changed.instances.values():
        inst.os = os_name
        inst.nics[0].network = network
        for disk in [*inst.disks, *(c for d in inst.disks for c in d.children)]:
            disk.iv_name = iv_name
            if isinstance(disk.logical_id, model.PlainId):
                disk.logical_id.vg = vg
    encoded = model.encode(changed)
    decoded = model.decode(encoded)
    assert decoded == changed
    assert model.encode(decoded) == encoded
    assert model.to_builtins(decoded) == json.loads(encoded)
