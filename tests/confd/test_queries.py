"""confd answers, computed from a config: every query type, its answer shape and its serial."""

from __future__ import annotations

import pytest

from herder.confd import queries as Q
from herder.core import confd as C
from herder.core import model as M
from tests.conftest import build_config


@pytest.fixture
def cfg() -> M.ConfigData:
    config = build_config(nodes=4, drbd_instances=3, plain_instances=2)
    config.cluster.serial_no = 41
    for n, node in enumerate(sorted(config.nodes.values(), key=lambda x: x.name)):
        node.serial_no = 100 + n
    nodes = sorted(config.nodes.values(), key=lambda x: x.name)
    nodes[2].master_candidate = True
    nodes[3].offline = True
    return config


def node(config: M.ConfigData, name: str) -> M.Node:
    return config.find_node(name)


def inst(config: M.ConfigData, name: str) -> M.Instance:
    return config.find_instance(name)


def test_registry_covers_every_type() -> None:
    assert set(Q.HANDLERS) == set(C.REQ_NAMES)
    assert set(range(12)) <= set(Q.HANDLERS)
    assert all(t >= 100 for t in C.HERDER_REQS)
    assert Q.answer(build_config(), 12, None) is None
    assert Q.answer(build_config(), 99, None) is None


def test_ping_answers_config_version_with_serial_zero(cfg: M.ConfigData) -> None:
    assert Q.ping(cfg, None) == (0, 3_000_000, 0)
    assert Q.ping(cfg, "ignored") == (0, 3_000_000, 0)


def test_node_role(cfg: M.ConfigData) -> None:
    assert Q.node_role_byname(cfg, "node1.example.com") == (0, C.NODE_ROLE_MASTER, 41)
    assert Q.node_role_byname(cfg, "node2.example.com") == (0, C.NODE_ROLE_CANDIDATE, 41)
    assert Q.node_role_byname(cfg, "node4.example.com") == (0, C.NODE_ROLE_OFFLINE, 41)
    n4 = node(cfg, "node4")
    n4.offline, n4.drained = False, True
    assert Q.node_role_byname(cfg, "node4.example.com") == (0, C.NODE_ROLE_DRAINED, 41)
    n4.drained = False
    assert Q.node_role_byname(cfg, "node4.example.com") == (0, C.NODE_ROLE_REGULAR, 41)
    # by UUID and short name too
    assert Q.node_role_byname(cfg, node(cfg, "node2").uuid)[1] == C.NODE_ROLE_CANDIDATE
    assert Q.node_role_byname(cfg, "node1")[1] == C.NODE_ROLE_MASTER
    status, answer, serial = Q.node_role_byname(cfg, "nosuch.example.com")
    assert (status, serial) == (1, 0) and "Node name nosuch.example.com not found" in answer
    assert Q.node_role_byname(cfg, 5) == (1, C.ERROR_ARGUMENT, 0)


def test_node_role_precedence_drained_before_candidate() -> None:
    config = build_config()
    n2 = config.find_node("node2")
    # a drained candidate cannot be stored, but roles are computed on whatever is loaded
    n2.drained = True
    assert Q.node_role(n2, config) == C.NODE_ROLE_DRAINED


def test_node_pip_by_instance_ip(cfg: M.ConfigData) -> None:
    d0, d1 = inst(cfg, "drbd0"), inst(cfg, "drbd1")
    pip0 = cfg.nodes[d0.primary_node].primary_ip
    pip1 = cfg.nodes[d1.primary_node].primary_ip
    assert Q.node_pip_by_instance_ip(cfg, {"1": "203.0.113.1"}) == (0, pip0, 41)
    assert Q.node_pip_by_instance_ip(cfg, {"1": "203.0.113.1", "0": "br0"}) == (0, pip0, 41)
    assert Q.node_pip_by_instance_ip(cfg, {"1": "203.0.113.1", "0": "other"}) == (1, 0, 0)
    assert Q.node_pip_by_instance_ip(cfg, {"1": "10.9.9.9"}) == (1, C.ERROR_UNKNOWN_ENTRY, 0)
    assert Q.node_pip_by_instance_ip(cfg, {"2": ["203.0.113.1", "203.0.113.2", "10.9.9.9"]}) == (
        0, [[0, pip0, 41], [0, pip1, 41], [1, 0, 0]], 41)
    # "1" wins over "2"
    assert Q.node_pip_by_instance_ip(cfg, {"1": "203.0.113.2", "2": ["x"]})[1] == pip1
    for bad in (None, "203.0.113.1", {}, {"2": [5]}, {"2": "x"}, {"1": 5}, {"1": "x", "0": 3}):
        assert Q.node_pip_by_instance_ip(cfg, bad) == (1, C.ERROR_ARGUMENT, 0), bad


def test_node_pip_by_instance_ip_follows_nic_link() -> None:
    config = build_config()
    d0 = config.find_instance("drbd0")
    d0.nics[0].nicparams = {"link": "br9"}
    pip = config.nodes[d0.primary_node].primary_ip
    assert Q.node_pip_by_instance_ip(config, {"1": "203.0.113.1"})[0] == 1
    assert Q.node_pip_by_instance_ip(config, {"1": "203.0.113.1", "0": "br9"})[1] == pip
    assert Q.instances_ips_list(config, "br9")[1] == ["203.0.113.1"]


def test_cluster_master(cfg: M.ConfigData) -> None:
    assert Q.cluster_master(cfg, None) == (0, "node1.example.com", 41)
    assert Q.cluster_master(cfg, "") == (0, "node1.example.com", 41)
    expected = ["node1.example.com", "192.0.2.1", "192.0.2.11"]
    assert Q.cluster_master(cfg, {"3": [0, 1, 2]}) == (0, expected, 41)
    # string field ids (Ganeti 2.1 and Ganeti's confd-client tool) are accepted too
    assert Q.cluster_master(cfg, {"3": ["0", "1", "2"]}) == (0, expected, 41)
    assert Q.cluster_master(cfg, {"3": [2, 0]}) == (0, ["192.0.2.11", "node1.example.com"], 41)
    for bad in ("x", {"1": [0]}, {"3": "0"}, {"3": [5]}, {"3": [True]}, ["x"]):
        assert Q.cluster_master(cfg, bad) == (1, C.ERROR_ARGUMENT, 0), bad


def test_ip_lists_in_reverse_uuid_order(cfg: M.ConfigData) -> None:
    by_uuid = sorted(cfg.nodes.values(), key=lambda n: n.uuid, reverse=True)
    assert Q.node_pip_list(cfg, None) == (0, [n.primary_ip for n in by_uuid], 41)
    mcs = [n.primary_ip for n in by_uuid if n.master_candidate]
    assert Q.mc_pip_list(cfg, None) == (0, mcs, 41)
    assert len(mcs) == 3


def test_instances_ips_list(cfg: M.ConfigData) -> None:
    ips = ["203.0.113.1", "203.0.113.2", "203.0.113.3"]
    assert Q.instances_ips_list(cfg, None) == (0, ips, 41)
    assert Q.instances_ips_list(cfg, "br0") == (0, ips, 41)
    assert Q.instances_ips_list(cfg, "nosuch") == (0, [], 41)
    assert Q.instances_ips_list(cfg, {"a": 1}) == (1, C.ERROR_ARGUMENT, 0)


def test_node_drbd(cfg: M.ConfigData) -> None:
    n1 = node(cfg, "node1")
    status, rows, serial = Q.node_drbd(cfg, "node1.example.com")
    assert (status, serial) == (0, n1.serial_no)
    # drbd<i> runs on node<i+1> with its mirror on node<i+2>, minor i on both
    assert rows == [
        ["node1.example.com", 0, "drbd0.example.com", "disk/0", "primary", "node2.example.com"],
    ]
    status, rows, serial = Q.node_drbd(cfg, "node2.example.com")
    assert serial == node(cfg, "node2").serial_no
    assert [r[4] for r in rows] == ["secondary", "primary"]
    assert rows[0][2] == "drbd0.example.com" and rows[0][5] == "node1.example.com"
    assert Q.node_drbd(cfg, "node4.example.com") == (0, [[
        "node4.example.com", 2, "drbd2.example.com", "disk/0", "secondary", "node3.example.com",
    ]], node(cfg, "node4").serial_no)
    plain = build_config(drbd_instances=0)
    assert Q.node_drbd(plain, "node1")[:2] == (0, [])
    status, answer, serial = Q.node_drbd(cfg, "nosuch")
    assert (status, serial) == (1, 0) and "Node name nosuch not found" in answer


def test_node_instances(cfg: M.ConfigData) -> None:
    n2 = node(cfg, "node2")
    status, (primary, secondary), serial = Q.node_instances(cfg, "node2.example.com")
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
    status, answer, serial = Q.node_instances(cfg, "nosuch")
    assert status == 1 and serial == 0 and "not found" in answer


def test_instance_disks(cfg: M.ConfigData) -> None:
    d0 = inst(cfg, "drbd0")
    status, disks, serial = Q.instance_disks(cfg, "drbd0.example.com")
    assert (status, serial) == (0, d0.serial_no)
    (disk,) = disks
    lid = d0.disks[0].logical_id
    assert isinstance(lid, M.DrbdId)
    assert disk["dev_type"] == "drbd" and disk["iv_name"] == "disk/0"
    assert disk["logical_id"] == [lid.nodes[0], lid.nodes[1], lid.port, lid.minors[0],
                                  lid.minors[1], lid.secret]
    assert disk["nodes"] == lid.nodes
    assert [c["logical_id"] for c in disk["children"]] == [
        ["xenvg", "d0.disk0_data"], ["xenvg", "d0.disk0_meta"]]
    assert all(c["nodes"] == lid.nodes for c in disk["children"])
    p0 = inst(cfg, "plain0")
    (plain,) = Q.instance_disks(cfg, "plain0")[1]
    assert plain["nodes"] == [p0.primary_node] and plain["children"] == []
    status, answer, serial = Q.instance_disks(cfg, "nosuch")
    assert (status, serial) == (1, 0) and answer.startswith("Instance not found")


def test_config_query(cfg: M.ConfigData) -> None:
    assert Q.config_query(cfg, "/cluster/cluster_name") == (0, "cluster.example.com", 41)
    assert Q.config_query(cfg, "/cluster/name") == (0, "cluster.example.com", 41)
    assert Q.config_query(cfg, "/cluster/master_node") == (0, cfg.cluster.master_node, 41)
    n1 = node(cfg, "node1")
    assert Q.config_query(cfg, f"/nodes/{n1.uuid}/primary_ip") == (0, "192.0.2.11", 41)
    assert Q.config_query(cfg, "/cluster/ipolicy/minmax/0/min/cpu-count")[1] == 1
    for bad in ("/", "", "cluster/name", "/no/such", "/cluster/name/x", 5, None):
        assert Q.config_query(cfg, bad) == (1, C.ERROR_ARGUMENT, 0), bad


def test_data_collectors_in_microseconds(cfg: M.ConfigData) -> None:
    cfg.cluster.data_collectors["drbd"] = M.CollectorSettings(active=False, interval=2.5)
    status, answer, serial = Q.data_collectors(cfg, None)
    assert (status, serial) == (0, 41)
    assert answer["drbd"] == {"active": False, "interval": 2_500_000}
    assert answer["lv"] == {"active": True, "interval": 5_000_000}  # Ganeti's default too
    assert all(isinstance(v["interval"], int) for v in answer.values())


def test_herder_additions(cfg: M.ConfigData) -> None:
    assert Q.mc_list(cfg, None) == (
        0, ["node1.example.com", "node2.example.com", "node3.example.com"], 41)
    assert Q.offline_nodes(cfg, None) == (0, ["node4.example.com"], 41)
    assert Q.instance_list(cfg, None)[1] == [
        "drbd0.example.com", "drbd1.example.com", "drbd2.example.com", "plain0.example.com",
        "plain1.example.com"]
    d1 = inst(cfg, "drbd1")
    assert Q.instance_primary_node(cfg, "drbd1.example.com") == (
        0, "node2.example.com", d1.serial_no)
    _, mapping, serial = Q.instance_primary_node(cfg, None)
    assert serial == 41 and mapping["plain0.example.com"] == "node1.example.com"
    assert Q.instance_primary_node(cfg, "nosuch") == (1, C.ERROR_UNKNOWN_ENTRY, 0)


def test_index_is_rebuilt_for_a_new_config(cfg: M.ConfigData) -> None:
    assert Q.instances_ips_list(cfg, None)[1][0] == "203.0.113.1"
    other = build_config(drbd_instances=1)
    other.find_instance("drbd0").nics[0].ip = "198.51.100.99"
    assert Q.instances_ips_list(other, None)[1] == ["198.51.100.99"]
