"""Issue 32's operations herder lacked, run as jobs through the real processor, locks, config
store and allocator (in-process, no node daemons): search-tags, group assign-nodes, the
hidden/blacklisted OS lists, cluster destroy's refusal, change-group's, group evacuate's and
multi-allocation's checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.core import model
from tests.unit.test_jobs import Master


def _two_groups(config: model.ConfigData) -> model.ConfigData:
    """build_config's cluster with node4 in a second group "rack2"."""
    rack2 = model.NodeGroup(uuid=model.new_uuid(), name="rack2", ctime=1.0, mtime=1.0)
    config.nodegroups[rack2.uuid] = rack2
    config.find_node("node4").group = rack2.uuid
    return config


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path)
    yield m
    m.queue.stop()


def test_search_tags_answers_ganeti_paths(master: Master) -> None:
    for kind, name, tags in (("cluster", None, ["web:frontend", "other"]),
                             ("node", "node2.example.com", ["web:rack"]),
                             ("instance", "drbd0.example.com", ["web:db"]),
                             ("nodegroup", "default", ["webby"])):
        assert master.run({"OP_ID": "OP_TAGS_SET", "kind": kind, "name": name,
                           "tags": tags})["status"] == "success"
    info = master.run({"OP_ID": "OP_TAGS_SEARCH", "pattern": "^web"})
    assert info["opresult"] == [[
        ["/cluster", "web:frontend"], ["/instances/drbd0.example.com", "web:db"],
        ["/nodes/node2.example.com", "web:rack"], ["/nodegroup/default", "webby"]]]
    assert master.run({"OP_ID": "OP_TAGS_SEARCH", "pattern": "^none"})["opresult"] == [[]]


def test_assign_nodes_moves_a_node_to_another_group(master: Master) -> None:
    assert master.run({"OP_ID": "OP_GROUP_ADD", "group_name": "rack2"})["status"] == "success"
    info = master.run({"OP_ID": "OP_GROUP_ASSIGN_NODES", "group_name": "rack2",
                       "nodes": ["node4.example.com"]})
    assert info["status"] == "success", info
    config = master.store.load()
    assert config.nodes[config.find_node("node4").uuid].group == config.find_group("rack2").uuid


def test_assign_nodes_refuses_splitting_a_drbd_instance(master: Master) -> None:
    """node2 holds DRBD instances mirrored with node1 and node3: moving it alone would split
    them across groups; refused unless forced, as Ganeti's."""
    master.run({"OP_ID": "OP_GROUP_ADD", "group_name": "rack2"})
    before = master.store.load().find_node("node2").group
    info = master.run({"OP_ID": "OP_GROUP_ASSIGN_NODES", "group_name": "rack2",
                       "nodes": ["node2.example.com"]})
    assert info["status"] == "error" and "split" in str(info["opresult"]), info
    assert master.store.load().find_node("node2").group == before


def test_hidden_and_blacklisted_oses(master: Master) -> None:
    info = master.run({"OP_ID": "OP_CLUSTER_SET_PARAMS",
                       "hidden_os": [["add", "lenny"], ["add", "lenny"]],
                       "blacklisted_os": [["add", "etch"]]})
    assert info["status"] == "success", info
    cluster = master.store.load().cluster
    assert (cluster.hidden_os, cluster.blacklisted_os) == (["lenny"], ["etch"])
    master.run({"OP_ID": "OP_CLUSTER_SET_PARAMS", "hidden_os": [["remove", "lenny"]],
                "blacklisted_os": [["remove", "absent"]]})
    cluster = master.store.load().cluster
    assert (cluster.hidden_os, cluster.blacklisted_os) == ([], ["etch"])


def test_cluster_destroy_is_refused_while_nodes_or_instances_remain(master: Master) -> None:
    info = master.run({"OP_ID": "OP_CLUSTER_DESTROY"})
    assert info["status"] == "error" and "node(s)" in str(info["opresult"])
    assert len(master.store.load().nodes) == 4


def test_change_group_and_group_evacuate_checks(tmp_path: Path) -> None:
    """A group is no target of its own evacuation; a dry run names the instances that would
    move (the moves themselves need the nodes' figures: tests/system/test_simulated_cluster.py)."""
    from herder.core.store import FileStore
    from tests.conftest import build_config

    store = FileStore(tmp_path / "config.json")
    store.create(_two_groups(build_config(nodes=4, drbd_instances=1, plain_instances=1)))
    master = Master(tmp_path)
    try:
        refused = master.run({"OP_ID": "OP_GROUP_EVACUATE", "group_name": "default",
                              "target_groups": ["default"]})
        assert refused["status"] == "error" and "own evacuation" in str(refused["opresult"])
        dry = master.run({"OP_ID": "OP_GROUP_EVACUATE", "group_name": "default",
                          "dry_run": True})
        assert dry["opresult"] == [["drbd0.example.com", "plain0.example.com"]]
        inside = master.run({"OP_ID": "OP_INSTANCE_CHANGE_GROUP",
                             "instance_name": "drbd0.example.com",
                             "target_groups": ["default"]})
        assert inside["status"] == "error" and "are in them" in str(inside["opresult"])
        empty = master.run({"OP_ID": "OP_GROUP_EVACUATE", "group_name": "rack2"})
        assert empty["status"] == "success" and empty["opresult"] == [{"jobs": []}]
    finally:
        master.queue.stop()


def test_multi_alloc_refuses_existing_names(master: Master) -> None:
    instance = {"OP_ID": "OP_INSTANCE_CREATE", "disk_template": "plain",
                "disks": [{"size": 1024}], "nics": [], "os_type": "debootstrap+default"}
    taken = master.run({"OP_ID": "OP_INSTANCE_MULTI_ALLOC",
                        "instances": [{**instance, "instance_name": "drbd0.example.com"}]})
    assert taken["status"] == "error" and "already exist" in str(taken["opresult"])
    assert len(master.store.load().instances) == 3
