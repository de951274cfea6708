"""Import of Ganeti config.data files (issue 2, item 6).

Expected values are read from the sample files themselves, so the tests check that the import
keeps what Ganeti wrote rather than restating it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from herder.cli.ganeti_import import import_ganeti, import_ganeti_file
from herder.core import model
from herder.core.errors import ConfigError

SHARED = Path(__file__).resolve().parents[3] / "shared"
GANETI = SHARED / "conformance" / "ganeti"
SAMPLES = ["cluster_config_3.0.json", "cluster_config_3.1.json", "cluster_config_2.16.json"]


def _sample_path(name: str) -> Path:
    path = GANETI / name
    if not path.is_file():
        pytest.skip(f"shared Ganeti sample {path} is not available")
    return path


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_sample_path(name).read_text())
    return data


@pytest.fixture(params=SAMPLES)
def sample(request: pytest.FixtureRequest) -> tuple[dict[str, Any], model.ConfigData, list[str]]:
    path = _sample_path(request.param)
    raw = json.loads(path.read_text())
    config, notes = import_ganeti_file(path)
    return raw, config, notes


def _drbd_instance(raw: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """An instance of the sample whose first disk is DRBD: (uuid, instance, disk) as in the file."""
    for inst_uuid, inst in raw["instances"].items():
        disk = raw["disks"][inst["disks"][0]]
        if disk["dev_type"] == "drbd":
            return inst_uuid, inst, disk
    pytest.fail("the sample has no DRBD instance")


# --- the samples --------------------------------------------------------------------------------


def test_counts_match_the_file(sample: tuple[dict[str, Any], model.ConfigData, list[str]]) -> None:
    raw, config, _ = sample
    assert len(config.nodes) == len(raw["nodes"])
    assert len(config.instances) == len(raw["instances"])
    assert len(config.nodegroups) == len(raw["nodegroups"])
    assert len(config.networks) == len(raw["networks"])
    assert config.serial_no == raw["serial_no"]


def test_cluster_values(sample: tuple[dict[str, Any], model.ConfigData, list[str]]) -> None:
    raw, config, _ = sample
    rc, c = raw["cluster"], config.cluster
    assert c.uuid == rc["uuid"]
    assert c.name == rc["cluster_name"]
    assert c.serial_no == rc["serial_no"]
    assert c.master_node == rc["master_node"]
    assert config.master is not None
    assert config.master.name == raw["nodes"][rc["master_node"]]["name"]
    for key in ("master_ip", "master_netdev", "master_netmask", "mac_prefix",
                "volume_group_name", "candidate_pool_size", "highest_used_port",
                "drbd_usermode_helper", "shared_file_storage_dir", "file_storage_dir"):
        assert getattr(c, key) == rc[key], key
    assert c.tcpudp_port_pool == rc["tcpudp_port_pool"]
    assert c.enabled_hypervisors == rc["enabled_hypervisors"]
    assert c.enabled_disk_templates == rc["enabled_disk_templates"]
    assert c.uid_pool == [tuple(r) for r in rc["uid_pool"]]
    assert c.beparams == rc["beparams"]["default"]
    assert c.nicparams == rc["nicparams"]["default"]
    assert c.ndparams == rc["ndparams"]
    assert c.diskparams["drbd"] == rc["diskparams"]["drbd"]
    assert model.to_builtins(c.ipolicy) == rc["ipolicy"]
    assert c.hvparams["xen-pvm"] == rc["hvparams"]["xen-pvm"]
    assert c.os_hvp == rc["os_hvp"]


def test_default_iallocator_for_every_request_type(
    sample: tuple[dict[str, Any], model.ConfigData, list[str]],
) -> None:
    raw, config, notes = sample
    name = raw["cluster"]["default_iallocator"]
    expected = [name] if name else []
    assert set(config.cluster.default_iallocators) == set(model.IALLOCATOR_REQUEST_TYPES)
    assert all(v == expected for v in config.cluster.default_iallocators.values())
    assert any("iallocator" in n for n in notes)


def test_data_collectors_in_seconds(
    sample: tuple[dict[str, Any], model.ConfigData, list[str]],
) -> None:
    raw, config, _ = sample
    collectors = config.cluster.data_collectors
    for name, settings in raw["cluster"]["data_collectors"].items():
        assert collectors[name].active == settings["active"]
        assert collectors[name].interval == pytest.approx(settings["interval"] / 1e6)
    for name, interval in model.DEFAULT_COLLECTOR_INTERVALS.items():
        if name not in raw["cluster"]["data_collectors"]:
            assert collectors[name].interval == interval


def test_nodes(sample: tuple[dict[str, Any], model.ConfigData, list[str]]) -> None:
    raw, config, _ = sample
    for node_uuid, rn in raw["nodes"].items():
        node = config.nodes[node_uuid]
        assert node.uuid == rn["uuid"]
        assert node.name == rn["name"]
        assert node.primary_ip == rn["primary_ip"]
        assert node.secondary_ip == rn["secondary_ip"]
        assert node.group == rn["group"]
        assert config.find_node(rn["name"]) is node
        for flag in ("master_candidate", "master_capable", "vm_capable", "offline", "drained",
                     "powered"):
            assert getattr(node, flag) == rn[flag], flag
        assert (node.serial_no, node.ctime, node.mtime) == (
            rn["serial_no"], rn["ctime"], rn["mtime"]
        )
        assert node.tags == rn["tags"]


def test_groups(sample: tuple[dict[str, Any], model.ConfigData, list[str]]) -> None:
    raw, config, _ = sample
    for group_uuid, rg in raw["nodegroups"].items():
        group = config.nodegroups[group_uuid]
        assert group.name == rg["name"]
        assert group.alloc_policy == rg["alloc_policy"]
        assert group.ndparams == rg["ndparams"]
        assert group.serial_no == rg["serial_no"]
    another = config.find_group("another")
    raw_another = raw["nodegroups"][another.uuid]
    assert model.to_builtins(another.ipolicy) == raw_another["ipolicy"]
    assert another.ipolicy.vcpu_ratio == raw_another["ipolicy"]["vcpu-ratio"]
    assert another.ipolicy.spindle_ratio == raw_another["ipolicy"]["spindle-ratio"]
    assert "std" not in model.to_builtins(another.ipolicy)  # cluster-wide: inherited


def test_instances_disks_nics(sample: tuple[dict[str, Any], model.ConfigData, list[str]]) -> None:
    raw, config, _ = sample
    for inst_uuid, ri in raw["instances"].items():
        inst = config.instances[inst_uuid]
        assert inst.name == ri["name"]
        assert inst.primary_node == ri["primary_node"]
        assert inst.os == ri["os"]
        assert inst.hypervisor == ri["hypervisor"]
        assert inst.admin_state == ri["admin_state"]
        assert inst.admin_state_source == ri["admin_state_source"]
        assert inst.disks_active == ri["disks_active"]
        assert inst.tags == ri.get("tags", [])
        assert (inst.serial_no, inst.ctime, inst.mtime) == (
            ri["serial_no"], ri["ctime"], ri["mtime"]
        )
        assert [d.uuid for d in inst.disks] == ri["disks"]
        for disk, disk_uuid in zip(inst.disks, ri["disks"], strict=True):
            rd = raw["disks"][disk_uuid]
            assert disk.dev_type == rd["dev_type"]
            assert disk.size == rd["size"]
            assert disk.mode == rd["mode"]
            assert disk.iv_name == rd["iv_name"]
            assert len(disk.children) == len(rd.get("children", []))
            if rd["dev_type"] == "plain":
                assert isinstance(disk.logical_id, model.PlainId)
                assert [disk.logical_id.vg, disk.logical_id.lv] == rd["logical_id"]
        assert [n.uuid for n in inst.nics] == [n["uuid"] for n in ri["nics"]]
        assert [n.mac for n in inst.nics] == [n["mac"] for n in ri["nics"]]


def test_drbd_disk(sample: tuple[dict[str, Any], model.ConfigData, list[str]]) -> None:
    raw, config, _ = sample
    inst_uuid, ri, rd = _drbd_instance(raw)
    inst = config.instances[inst_uuid]
    node_a, node_b, port, minor_a, minor_b, secret = rd["logical_id"]
    lid = inst.disks[0].logical_id
    assert isinstance(lid, model.DrbdId)
    assert lid.nodes == [node_a, node_b]
    assert lid.port == port
    assert lid.minors == [minor_a, minor_b]
    assert lid.secret == secret
    assert inst.primary_node == ri["primary_node"]
    assert inst.secondary_nodes == [n for n in (node_a, node_b) if n != ri["primary_node"]]
    children = inst.disks[0].children
    for child, rc in zip(children, rd["children"], strict=True):
        assert isinstance(child.logical_id, model.PlainId)
        assert [child.logical_id.vg, child.logical_id.lv] == rc["logical_id"]
        assert child.size == rc["size"]
    assert len({c.uuid for c in children}) == len(children)  # generated, distinct


def test_networks(sample: tuple[dict[str, Any], model.ConfigData, list[str]]) -> None:
    raw, config, notes = sample
    for net_uuid, rn in raw["networks"].items():
        net = config.networks[net_uuid]
        assert net.name == rn["name"]
        assert net.network == rn["network"]
        assert net.gateway == rn.get("gateway")
        # the IP pool comes over bit for bit, and reads as Ganeti's would
        assert (net.reservations, net.ext_reservations) == (rn.get("reservations"),
                                                            rn.get("ext_reservations"))
        pool = net.pool()
        assert pool.map() == "".join(
            "X" if "1" in (a, b) else "." for a, b in zip(
                rn.get("reservations") or "0" * pool.network.num_addresses,
                rn.get("ext_reservations") or "0" * pool.network.num_addresses, strict=True))
    assert not any("reservation" in n for n in notes)


def test_notes_name_what_was_dropped(
    sample: tuple[dict[str, Any], model.ConfigData, list[str]],
) -> None:
    _, _, notes = sample
    text = "\n".join(notes)
    # lxc_tty etc. are not herder parameters: dropped, named in a note
    assert "lxc_tty" in text
    assert "rsahostkeypub" in text
    assert "candidate_certs" not in text  # empty in the sample: nothing to report
    assert all(isinstance(n, str) and n for n in notes)


def test_round_trip(sample: tuple[dict[str, Any], model.ConfigData, list[str]]) -> None:
    _, config, _ = sample
    assert model.decode(model.encode(config)) == config
    assert model.revalidate(config) == config


def test_import_is_deterministic() -> None:
    path = _sample_path(SAMPLES[0])
    assert model.encode(import_ganeti_file(path)[0]) == model.encode(import_ganeti_file(path)[0])


# --- refusals -----------------------------------------------------------------------------------


def test_not_a_ganeti_config(tmp_path: Path) -> None:
    qa = _sample_path("qa-minimal-nodes-instances-only.json")
    with pytest.raises(ConfigError, match="not a Ganeti config"):
        import_ganeti_file(qa)
    array = tmp_path / "array.json"
    array.write_text("[1, 2, 3]")
    with pytest.raises(ConfigError, match="not a Ganeti config"):
        import_ganeti_file(array)
    with pytest.raises(ConfigError, match="not a Ganeti config"):
        import_ganeti({"nodes": {}})


def test_invalid_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"cluster": {"name": nope}, "version": 3000000}')
    with pytest.raises(ConfigError, match="not valid JSON"):
        import_ganeti_file(bad)


def test_truncated_file(tmp_path: Path) -> None:
    text = _sample_path(SAMPLES[0]).read_text()
    cut = tmp_path / "config.data"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(ConfigError, match="truncated"):
        import_ganeti_file(cut)
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(ConfigError, match="truncated"):
        import_ganeti_file(empty)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        import_ganeti_file(tmp_path / "absent.json")


def test_unfixable_config_is_refused() -> None:
    data = _load(SAMPLES[0])
    inst = next(iter(data["instances"].values()))
    inst["primary_node"] = "no-such-node"
    with pytest.raises(ConfigError, match="no-such-node"):
        import_ganeti(data)

    data = _load(SAMPLES[0])
    next(iter(data["instances"].values()))["nics"][0]["nicparams"] = {"mode": "routed"}
    with pytest.raises(ConfigError, match="routed"):
        import_ganeti(data)

    data = _load(SAMPLES[0])
    next(iter(data["instances"].values()))["disks"] = ["no-such-disk"]
    with pytest.raises(ConfigError, match="no-such-disk"):
        import_ganeti(data)


# --- adaptations --------------------------------------------------------------------------------


def test_unknown_parameters_dropped_with_a_note() -> None:
    data = _load(SAMPLES[0])
    data["cluster"]["beparams"]["default"]["frobnicate"] = 3
    data["cluster"]["ndparams"]["warp_drive"] = True
    inst_uuid, inst, disk = _drbd_instance(data)
    inst["hvparams"] = {"root_path": "/dev/sda1", "bogus_hv": "x"}
    inst["beparams"] = {"maxmem": 512, "bogus_be": 1}
    disk["params"] = {"bogus_disk": 1}
    node_uuid = next(iter(data["nodes"]))
    data["nodes"][node_uuid]["ndparams"] = {"spindle_count": 4, "bogus_nd": 1}

    config, notes = import_ganeti(copy.deepcopy(data))
    text = "\n".join(notes)
    for name in ("frobnicate", "warp_drive", "bogus_hv", "bogus_be", "bogus_disk", "bogus_nd"):
        assert name in text, name
    assert "frobnicate" not in config.cluster.beparams
    assert config.cluster.beparams["maxmem"] == data["cluster"]["beparams"]["default"]["maxmem"]
    imported = config.instances[inst_uuid]
    assert imported.hvparams == {"root_path": "/dev/sda1"}
    assert imported.beparams == {"maxmem": 512}
    assert imported.disks[0].params == {}
    assert config.nodes[node_uuid].ndparams == {"spindle_count": 4}


def test_global_hv_params_dropped_from_instances() -> None:
    data = _load(SAMPLES[0])
    inst_uuid, inst, _ = _drbd_instance(data)
    inst["hvparams"] = {"migration_port": 1234, "xen_cmd": "xl", "root_path": "/dev/xvda2"}
    data["cluster"]["os_hvp"]["busybox"] = {"xen-pvm": {"migration_mode": "non-live"}}
    config, notes = import_ganeti(data)
    assert config.instances[inst_uuid].hvparams == {"root_path": "/dev/xvda2"}
    assert config.cluster.os_hvp["busybox"] == {"xen-pvm": {}}
    text = "\n".join(notes)
    assert "cluster-wide-only" in text
    assert "migration_port" in text and "xen_cmd" in text and "migration_mode" in text


def test_private_osparams_dropped_with_a_note() -> None:
    data = _load(SAMPLES[0])
    inst_uuid, inst, _ = _drbd_instance(data)
    inst["osparams"] = {"dhcp": "yes"}
    inst["osparams_private"] = {"root_password": "hunter2-private"}
    config, notes = import_ganeti(data)
    assert config.instances[inst_uuid].osparams == {"dhcp": "yes"}
    assert any("osparams_private" in n for n in notes)
    assert "hunter2-private" not in model.encode(config).decode()


def test_drbd_node_names_become_uuids() -> None:
    data = _load(SAMPLES[0])
    inst_uuid, _, disk = _drbd_instance(data)
    uuids = disk["logical_id"][:2]
    disk["logical_id"][:2] = [data["nodes"][u]["name"] for u in uuids]
    config, _ = import_ganeti(data)
    lid = config.instances[inst_uuid].disks[0].logical_id
    assert isinstance(lid, model.DrbdId)
    assert lid.nodes == uuids


def test_embedded_disks_and_old_device_types() -> None:
    """Older documents embed disks in the instance and call them lvm / drbd8."""
    data = _load(SAMPLES[0])
    disks = data.pop("disks")
    for inst in data["instances"].values():
        inst["disks"] = [copy.deepcopy(disks[u]) for u in inst["disks"]]
        for disk in inst["disks"]:
            disk["dev_type"] = {"plain": "lvm", "drbd": "drbd8"}[disk["dev_type"]]
            for child in disk.get("children", []):
                child["dev_type"] = "lvm"
    config, _ = import_ganeti(data)
    for inst_uuid, ri in data["instances"].items():
        inst = config.instances[inst_uuid]
        assert [d.uuid for d in inst.disks] == [d["uuid"] for d in ri["disks"]]
        expected = {"lvm": "plain", "drbd8": "drbd"}[ri["disks"][0]["dev_type"]]
        assert inst.disk_template == expected


def test_uid_pool_maintenance_filters_and_group_networks() -> None:
    data = _load(SAMPLES[0])
    data["cluster"]["uid_pool"] = [[1000, 1009], [2000, 2000]]
    data["cluster"]["default_iallocator"] = ""
    data["maintenance"] = {
        "roundDelay": 600, "jobs": [17], "balance": True, "balanceThreshold": 0.25,
        "evacuated": ["node9"], "serial_no": 4, "ctime": 1.0, "mtime": 2.0,
        "incidents": [{"uuid": "inc-1", "node": "node1.example.com", "original": {"x": 1},
                       "action": "evacuate", "jobs": [3], "repair-status": "pending",
                       "tag": "maintd:repairready:inc-1", "serial_no": 1}],
    }
    rule = {"uuid": "4f0c3a4e-1d2b-4c5d-8e9f-0a1b2c3d4e5f", "watermark": 12, "priority": 1,
            "predicates": [["jobid", [">", "id", "watermark"]]], "action": ["RATE_LIMIT", 2],
            "reason_trail": [["gnt:user", "maintenance", 1]], "serial_no": 3}
    data["filters"] = {rule["uuid"]: rule}
    net_uuid = next(iter(data["networks"]))
    group_uuid = next(iter(data["nodegroups"]))
    data["nodegroups"][group_uuid]["networks"] = {net_uuid: {"mode": "routed", "link": "100",
                                                              "vlan": ".20"}}

    config, notes = import_ganeti(data)
    assert config.cluster.uid_pool == [(1000, 1009), (2000, 2000)]
    assert all(v == [] for v in config.cluster.default_iallocators.values())
    maint = config.maintenance
    assert (maint.round_delay, maint.jobs, maint.balance, maint.balance_threshold) == (
        600, [17], True, 0.25
    )
    assert maint.evacuated == ["node9"]
    assert maint.serial_no == 4
    assert maint.incidents[0].action == "evacuate"
    assert maint.incidents[0].repair_status == "pending"
    link = config.nodegroups[group_uuid].networks[net_uuid]
    assert (link.mode, link.link, link.vlan) == ("routed", "100", ".20")
    (imported,) = config.filters.values()  # Ganeti's filter rules, as they were
    assert (imported.uuid, imported.watermark, imported.action) == (
        rule["uuid"], 12, ("RATE_LIMIT", 2))
    assert imported.predicates == [("jobid", [">", "id", "watermark"])]
    assert any("filter" in n and "serial_no" in n for n in notes)
