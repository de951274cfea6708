"""confd answers, computed from a config: every query type, its answer shape and its serial."""

from __future__ import annotations

import pytest

from herder.confd import queries
from herder.core import confd, model
from tests.conftest import build_config


@pytest.fixture
def cfg() -> model.ConfigData:
    config = build_config(nodes=4, drbd_instances=3, plain_instances=2)
    config.cluster.serial_no = 41
    for n, node in enumerate(sorted(config.nodes.values(), key=lambda x: x.name)):
        node.serial_no = 100 + n
    nodes = sorted(config.nodes.values(), key=lambda x: x.name)
    nodes[2].master_candidate = True
    nodes[3].offline = True
    return config


def node(config: model.ConfigData, name: str) -> model.Node:
    return config.find_node(name)


def inst(config: model.ConfigData, name: str) -> model.Instance:
    return config.find_instance(name)


def test_registry_covers_every_type() -> None:
    assert set(queries.HANDLERS) == set(confd.REQ_NAMES)
    assert set(range(12)) <= set(queries.HANDLERS)
    assert all(t >= 100 for t in confd.HERDER_REQS)
    assert queries.answer(build_config(), 12, None) is None
    assert queries.answer(build_config(), 99, None) is None


def test_ping_answers_config_version_with_serial_zero(cfg: model.ConfigData) -> None:
    assert queries.ping(cfg, None) == (0, 3_000_000, 0)
    assert queries.ping(cfg, "ignored") == (0, 3_000_000, 0)


def test_node_role(cfg: model.ConfigData) -> None:
    assert queries.node_role_byname(cfg, "node1.example.com") == (0, confd.NODE_ROLE_MASTER, 41)
    assert queries.node_role_byname(cfg, "node2.example.com") == (0, confd.NODE_ROLE_CANDIDATE, 41)
    assert queries.node_role_byname(cfg, "node4.example.com") == (0, confd.NODE_ROLE_OFFLINE, 41)
    n4 = node(cfg, "node4")
    n4.offline, n4.drained = False, True
    assert queries.node_role_byname(cfg, "node4.example.com") == (0, confd.NODE_ROLE_DRAINED, 41)
    n4.drained = False
    assert queries.node_role_byname(cfg, "node4.example.com") == (0, confd.NODE_ROLE_REGULAR, 41)
    # by UUID and short name too
    assert queries.node_role_byname(cfg, node(cfg, "node2").uuid)[1] == confd.NODE_ROLE_CANDIDATE
    assert queries.node_role_byname(cfg, "node1")[1] == confd.NODE_ROLE_MASTER
    status, answer, serial = queries.node_role_byname(cfg, "nosuch.example.com")
    assert (status, serial) == (1, 0) and "Node name nosuch.example.com not found" in answer
    assert queries.node_role_byname(cfg, 5) == (1, confd.ERROR_ARGUMENT, 0)


def test_node_role_precedence_drained_before_candidate() -> None:
    config = build_config()
    n2 = config.find_node("node2")
    # a drained candidate cannot be stored, but roles are computed on whatever is loaded
    n2.drained = True
    assert queries.node_role(n2, config) == confd.NODE_ROLE_DRAINED


def test_node_pip_by_instance_ip(cfg: model.ConfigData) -> None:
    d0, d1 = inst(cfg, "drbd0"), inst(cfg, "drbd1")
    pip0 = cfg.nodes[d0.primary_node].primary_ip
    pip1 = cfg.nodes[d1.primary_node].primary_ip
    assert queries.node_pip_by_instance_ip(cfg, {"1": "203.0.113.1"}) == (0, pip0, 41)
    assert queries.node_pip_by_instance_ip(cfg, {"1": "203.0.113.1", "0": "br0"}) == (0, pip0, 41)
    assert queries.node_pip_by_instance_ip(cfg, {"1": "203.0.113.1", "0": "other"}) == (1, 0, 0)
    assert queries.node_pip_by_instance_ip(cfg, {"1": "10.9.9.9"}) == (
        1, confd.ERROR_UNKNOWN_ENTRY, 0)
    assert queries.node_pip_by_instance_ip(
        cfg, {"2": ["203.0.113.1", "203.0.113.2", "10.9.9.9"]}) == (
        0, [[0, pip0, 41], [0, pip1, 41], [1, 0, 0]], 41)
    # "1" wins over "2"
    assert queries.node_pip_by_instance_ip(cfg, {"1": "203.0.113.2", "2": ["x"]})[1] == pip1
    for bad in (None, "203.0.113.1", {}, {"2": [5]}, {"2": "x"}, {"1": 5}, {"1": "x", "0": 3}):
        assert queries.node_pip_by_instance_ip(cfg, bad) == (1, confd.ERROR_ARGUMENT, 0), bad


def test_node_pip_by_instance_ip_follows_nic_link() -> None:
    config = build_config()
    d0 = config.find_instance("drbd0")
    d0.nics[0].nicparams = {"link": "br9"}
    pip = config.nodes[d0.primary_node].primary_ip
    assert queries.node_pip_by_instance_ip(config, {"1": "203.0.113.1"})[0] == 1
    assert queries.node_pip_by_instance_ip(config, {"1": "203.0.113.1", "0": "br9"})[1] == pip
    assert queries.instances_ips_list(config, "br9")[1] == ["203.0.113.1"]


def test_cluster_master(cfg: model.ConfigData) -> None:
    assert queries.cluster_master(cfg, None) == (0, "node1.example.com", 41)
    assert queries.cluster_master(cfg, "") == (0, "node1.example.com", 41)
    expected = ["node1.example.com", "192.0.2.1", "192.0.2.11"]
    assert queries.cluster_master(cfg, {"3": [0, 1, 2]}) == (0, expected, 41)
    # string field ids (Ganeti 2.1 and Ganeti's confd-client tool) are accepted too
    assert queries.cluster_master(cfg, {"3": ["0", "1", "2"]}) == (0, expected, 41)
    assert queries.cluster_master(cfg, {"3": [2, 0]}) == (
        0, ["192.0.2.11", "node1.example.com"], 41)
    for bad in ("x", {"1": [0]}, {"3": "0"}, {"3": [5]}, {"3": [True]}, ["x"]):
        assert queries.cluster_master(cfg, bad) == (1, confd.ERROR_ARGUMENT, 0), bad


def test_ip_lists_in_reverse_uuid_order(cfg: model.ConfigData) -> None:
    by_uuid = sorted(cfg.nodes.values(), key=lambda n: n.uuid, reverse=True)
    assert queries.node_pip_list(cfg, None) == (0, [n.primary_ip for n in by_uuid], 41)
    mcs = [n.primary_ip for n in by_uuid if n.master_candidate]
    assert queries.mc_pip_list(cfg, None) == (0, mcs, 41)
    assert len(mcs) == 3


def test_instances_ips_list(cfg: model.ConfigData) -> None:
    ips = ["203.0.113.1", "203.0.113.2", "203.0.113.3"]
    assert queries.instances_ips_list(cfg, None) == (0, ips, 41)
    assert queries.instances_ips_list(cfg, "br0") == (0, ips, 41)
    assert queries.instances_ips_list(cfg, "nosuch") == (0, [], 41)
    assert queries.instances_ips_list(cfg, {"a": 1}) == (1, confd.ERROR_ARGUMENT, 0)


def test_node_drbd(cfg: model.ConfigData) -> None:
    n1 = node(cfg, "node1")
    status, rows, serial = queries.node_drbd(cfg, "node1.example.com")
    assert (status, serial) == (0, n1.serial_no)
    # drbd<i> runs on node<i+1> with its mirror on node<i+2>, minor i on both
    assert rows == [
        ["node1.example.com", 0, "drbd0.example.com", "disk/0", "primary", "node2.example.com"],
    ]
    status, rows, serial = queries.node_drbd(cfg, "node2.example.com")
    assert serial == node(cfg, "node2").serial_no
    assert [r[4] for r in rows] == ["secondary", "primary"]
    assert rows[0][2] == "drbd0.example.com" and rows[0][5] == "node1.example.com"
    assert queries.node_drbd(cfg, "node4.example.com") == (0, [[
        "node4.example.com", 2, "drbd2.example.com", "disk/0", "secondary", "node3.example.com",
    ]], node(cfg, "node4").serial_no)
    plain = build_config(drbd_instances=0)
    assert queries.node_drbd(plain, "node1")[:2] == (0, [])
    status, answer, serial = queries.node_drbd(cfg, "nosuch")
    assert (status, serial) == (1, 0) and "Node name nosuch not found" in answer


def test_node_instances(cfg: model.ConfigData) -> None:
    n2 = node(cfg, "node2")
    status, (primary, secondary), serial = queries.node_instances(cfg, "node2.example.com")
    assert (status, serial) == (0, n2.serial_no)
    assert [i["name"] for i in primary] == ["drbd1.example.com", "plain1.example.com"]
    assert [i["name"] for i in secondary] == ["drbd0.example.com"]
    one = primary[0]
    src = inst(cfg, "drbd1")
    assert one["uuid"] == src.uuid and one["primary_node"] == n2.uuid
    assert one["disks"] == [src.disks[0].uuid] and one["serial_no"] == src.serial_no
    assert one["nics"][0]["ip"] == "203.0.113.2" and "ip" not in primary[1]["nics"][0]
    assert set(one) >= {"name", "os", "hypervisor", "hvparams", "beparams", "osparams",
                        "osparams_private", "admin_state", "admin_state_source", "nics",
                        "disks", "disks_active", "ctime", "mtime", "uuid", "serial_no", "tags"}
    status, answer, serial = queries.node_instances(cfg, "nosuch")
    assert status == 1 and serial == 0 and "not found" in answer


def test_instance_disks(cfg: model.ConfigData) -> None:
    d0 = inst(cfg, "drbd0")
    status, disks, serial = queries.instance_disks(cfg, "drbd0.example.com")
    assert (status, serial) == (0, d0.serial_no)
    (disk,) = disks
    lid = d0.disks[0].logical_id
    assert isinstance(lid, model.DrbdId)
    assert disk["dev_type"] == "drbd" and disk["iv_name"] == "disk/0"
    assert disk["logical_id"] == [lid.nodes[0], lid.nodes[1], lid.port, lid.minors[0],
                                  lid.minors[1], lid.secret]
    assert disk["nodes"] == lid.nodes
    assert [c["logical_id"] for c in disk["children"]] == [
        ["xenvg", "d0.disk0_data"], ["xenvg", "d0.disk0_meta"]]
    assert all(c["nodes"] == lid.nodes for c in disk["children"])
    p0 = inst(cfg, "plain0")
    (plain,) = queries.instance_disks(cfg, "plain0")[1]
    assert plain["nodes"] == [p0.primary_node] and plain["children"] == []
    status, answer, serial = queries.instance_disks(cfg, "nosuch")
    assert (status, serial) == (1, 0) and answer.startswith("Instance not found")


def test_config_query(cfg: model.ConfigData) -> None:
    assert queries.config_query(cfg, "/cluster/cluster_name") == (0, "cluster.example.com", 41)
    assert queries.config_query(cfg, "/cluster/name") == (0, "cluster.example.com", 41)
    assert queries.config_query(cfg, "/cluster/master_node") == (0, cfg.cluster.master_node, 41)
    n1 = node(cfg, "node1")
    assert queries.config_query(cfg, f"/nodes/{n1.uuid}/primary_ip") == (0, "192.0.2.11", 41)
    assert queries.config_query(cfg, "/cluster/ipolicy/minmax/0/min/cpu-count")[1] == 1
    for bad in ("/", "", "cluster/name", "/no/such", "/cluster/name/x", 5, None):
        assert queries.config_query(cfg, bad) == (1, confd.ERROR_ARGUMENT, 0), bad


def test_data_collectors_in_microseconds(cfg: model.ConfigData) -> None:
    cfg.cluster.data_collectors["drbd"] = model.CollectorSettings(active=False, interval=2.5)
    status, answer, serial = queries.data_collectors(cfg, None)
    assert (status, serial) == (0, 41)
    assert answer["drbd"] == {"active": False, "interval": 2_500_000}
    assert answer["lv"] == {"active": True, "interval": 5_000_000}  # Ganeti's default too
    assert all(isinstance(v["interval"], int) for v in answer.values())


def test_herder_additions(cfg: model.ConfigData) -> None:
    assert queries.mc_list(cfg, None) == (
        0, ["node1.example.com", "node2.example.com", "node3.example.com"], 41)
    assert queries.offline_nodes(cfg, None) == (0, ["node4.example.com"], 41)
    assert queries.instance_list(cfg, None)[1] == [
        "drbd0.example.com", "drbd1.example.com", "drbd2.example.com", "plain0.example.com",
        "plain1.example.com"]
    d1 = inst(cfg, "drbd1")
    assert queries.instance_primary_node(cfg, "drbd1.example.com") == (
        0, "node2.example.com", d1.serial_no)
    _, mapping, serial = queries.instance_primary_node(cfg, None)
    assert serial == 41 and mapping["plain0.example.com"] == "node1.example.com"
    assert queries.instance_primary_node(cfg, "nosuch") == (1, confd.ERROR_UNKNOWN_ENTRY, 0)


def test_index_is_rebuilt_for_a_new_config(cfg: model.ConfigData) -> None:
    assert queries.instances_ips_list(cfg, None)[1][0] == "203.0.113.1"
    other = build_config(drbd_instances=1)
    other.find_instance("drbd0").nics[0].ip = "198.51.100.99"
    assert queries.instances_ips_list(other, None)[1] == ["198.51.100.99"]
