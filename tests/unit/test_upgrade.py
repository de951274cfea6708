"""Older documents (no UUIDs, filed and referenced by name) load upgraded."""

from __future__ import annotations

import json
from pathlib import Path

from herder.core import model
from herder.core.store import FileStore

OLD = {
    "version": 0,
    "serial_no": 41,
    "cluster": {"name": "old.example.com", "master_node": "node1.example.com",
                "master_ip": "192.0.2.1", "beparams": {"memory": 256}},
    "nodegroups": {"default": {"alloc_policy": "preferred"}},
    "nodes": {
        "node1.example.com": {"primary_ip": "192.0.2.11", "group": "default",
                              "master_candidate": True},
        "node2.example.com": {"primary_ip": "192.0.2.12", "group": "default"},
    },
    "instances": {
        "web.example.com": {
            "primary_node": "node1.example.com", "os": "debian+squeeze", "hypervisor": "kvm",
            "beparams": {"memory": 512},
            "disks": [{"dev_type": "drbd", "size": 1024, "iv_name": "disk/0",
                       "logical_id": {"type": "drbd",
                                      "nodes": ["node1.example.com", "node2.example.com"],
                                      "port": 11000, "minors": [0, 1], "secret": "s3cr3t"}}],
            "nics": [{"mac": "AA:00:00:11:22:33", "ip": "203.0.113.5"}],
        },
    },
}


def test_uuidless_config_is_upgraded_on_load(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(OLD))
    config = FileStore(path).load()
    assert config.version == model.FORMAT_VERSION
    assert config.serial_no == 41
    node1 = config.find_node("node1.example.com")
    node2 = config.find_node("node2")
    group = config.find_group("default")
    inst = config.find_instance("web")
    for obj in (node1, node2, group, inst, config.cluster):
        assert len(obj.uuid) == 36 and "." not in obj.uuid
    assert config.cluster.master_node == node1.uuid
    assert node1.group == group.uuid
    assert inst.primary_node == node1.uuid
    assert inst.secondary_nodes == [node2.uuid]
    lid = inst.disks[0].logical_id
    assert isinstance(lid, model.DrbdId) and lid.nodes == [node1.uuid, node2.uuid]
    assert lid.port == 11000 and lid.secret == "s3cr3t"
    assert inst.beparams == {"maxmem": 512, "minmem": 512}
    assert config.cluster.beparams == {"maxmem": 256, "minmem": 256}
    assert inst.nics[0].mac == "aa:00:00:11:22:33"
    assert inst.disks[0].uuid and inst.nics[0].uuid


def test_upgrade_gives_the_same_uuids_every_time(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(OLD))
    first, second = FileStore(path).load(), FileStore(path).load()
    assert first == second


def test_upgraded_document_is_written_in_the_new_format(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(OLD))
    store = FileStore(path)
    before = store.load()
    with store.update() as config:
        config.find_node("node2").tags.append("upgraded")
    raw = json.loads(path.read_text())
    assert raw["version"] == model.FORMAT_VERSION
    assert set(raw["nodes"]) == {n.uuid for n in before.nodes.values()}
    assert store.load().find_node(before.find_node("node2").uuid).tags == ["upgraded"]
    assert store.load().serial_no == 42


def test_newer_format_is_refused(tmp_path: Path) -> None:
    import pytest

    from herder.core.errors import ConfigError

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**OLD, "version": 99}))
    with pytest.raises(ConfigError, match="version 99 is newer than this herder"):
        FileStore(path).load()
