"""`cluster verify`'s checks across objects."""

from __future__ import annotations

import msgspec

from herder.core import model
from herder.core.verify import verify


def codes(config: model.ConfigData) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for finding in verify(config):
        result.setdefault(finding.code, []).append(f"{finding.object}: {finding.message}")
    return result


def test_a_consistent_cluster_has_no_findings(config: model.ConfigData) -> None:
    assert verify(config) == []


def test_instance_on_unknown_node(config: model.ConfigData) -> None:
    inst = config.find_instance("plain0")
    inst.primary_node = "4c1b0c5e-0000-0000-0000-000000000000"
    found = codes(config)
    assert found["dangling-node"] == [
        "instance plain0.example.com: primary node 4c1b0c5e-0000-0000-0000-000000000000 unknown"
    ]


def test_unknown_secondary_and_group(config: model.ConfigData) -> None:
    inst = config.find_instance("drbd0")
    lid = inst.disks[0].logical_id
    assert isinstance(lid, model.DrbdId)
    del config.nodes[lid.nodes[1]]
    config.find_node("node1").group = "nogroup"
    found = codes(config)
    assert any("secondary node" in m for m in found["dangling-node"])
    assert found["dangling-group"] == ["node node1.example.com: unknown group nogroup"]


def test_duplicates(config: model.ConfigData) -> None:
    a, b = config.find_instance("drbd0"), config.find_instance("drbd1")
    b.nics[0].mac = a.nics[0].mac
    b.nics[0].ip = a.nics[0].ip
    lid_a, lid_b = a.disks[0].logical_id, b.disks[0].logical_id
    assert isinstance(lid_a, model.DrbdId) and isinstance(lid_b, model.DrbdId)
    lid_b.port = lid_a.port
    twin = msgspec.structs.replace(config.find_node("node3"), uuid=model.new_uuid(),
                                   master_candidate=False)
    config.nodes[twin.uuid] = twin
    found = codes(config)
    assert "duplicate-mac" in found and a.nics[0].mac in found["duplicate-mac"][0]
    assert "duplicate-ip" in found
    assert found["duplicate-drbd-port"][0].startswith(f"DRBD: '{lid_a.port}' is used by 2")
    assert "node3.example.com" in found["duplicate-name"][0]


def test_same_ip_on_different_links_is_fine(config: model.ConfigData) -> None:
    a, b = config.find_instance("drbd0"), config.find_instance("drbd1")
    b.nics[0].ip = a.nics[0].ip
    b.nics[0].nicparams = {"link": "br-other"}
    assert "duplicate-ip" not in codes(config)


def test_drbd_minor_reused_on_a_node(config: model.ConfigData) -> None:
    a, b = config.find_instance("drbd0"), config.find_instance("drbd1")
    lid_a, lid_b = a.disks[0].logical_id, b.disks[0].logical_id
    assert isinstance(lid_a, model.DrbdId) and isinstance(lid_b, model.DrbdId)
    # drbd0 is on node1+node2, drbd1 on node2+node3: give drbd1 node2's minor of drbd0
    lid_b.minors[0] = lid_a.minors[1]
    assert "duplicate-drbd-minor" in codes(config)


def test_policy_violations(config: model.ConfigData) -> None:
    inst = config.find_instance("drbd0")
    inst.beparams["maxmem"] = 10**6
    inst.beparams["vcpus"] = 64
    config.cluster.ipolicy.disk_templates = ["plain"]
    found = codes(config)
    messages = found["policy-violation"]
    # Ganeti's words (cmdlib/common.py ComputeIPolicySpecViolation)
    for said in ("memory-size value 1000000 is not in range [128, 32768]",
                 "cpu-count value 64 is not in range [1, 8]",
                 "Disk template drbd is not allowed (allowed templates: plain)"):
        assert f"instance drbd0.example.com: {said}" in messages


def test_disabled_hypervisor_and_template(config: model.ConfigData) -> None:
    config.cluster.enabled_hypervisors = ["xen-pvm"]
    config.cluster.enabled_disk_templates = ["plain"]
    found = codes(config)
    assert len(found["hypervisor-disabled"]) == len(config.instances)
    assert len(found["template-disabled"]) == 2  # the two DRBD instances


def test_master_checks(config: model.ConfigData) -> None:
    config.cluster.master_node = "gone"
    assert "dangling-master" in codes(config)
