"""Parameters: declared once, inherited cluster -> group -> node/instance, refused when wrong."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from herder.core import model, upgrade
from herder.core import params as parameters
from herder.core.errors import ConfigError, ParameterError


def test_every_declared_default_has_its_declared_type() -> None:
    families = [*parameters.HV_FAMILIES.values(), parameters.BE_FAMILY, parameters.ND_FAMILY,
                parameters.NIC_FAMILY, *parameters.DISK_FAMILIES.values()]
    for family in families:
        for spec in family.specs.values():
            assert spec.kind in parameters.KINDS
            assert parameters.coerce(spec, spec.default) == spec.default, (family.owner, spec.name)


def test_hypervisor_params_fill_defaults_cluster_os_instance(config: model.ConfigData) -> None:
    inst = config.find_instance("drbd0")
    assert config.filled_hvparams(inst)["kernel_args"] == "ro"  # declared default
    config.cluster.hvparams["kvm"] = {"kernel_args": "console=ttyS0", "acpi": False}
    config.cluster.os_hvp["debootstrap"] = {"kvm": {"kernel_args": "quiet"}}
    inst.hvparams = {"acpi": True}
    filled = config.filled_hvparams(inst)
    assert filled["kernel_args"] == "quiet"  # os_hvp beats cluster
    assert filled["acpi"] is True  # instance beats cluster
    assert filled["migration_port"] == 8102  # untouched default
    assert config.filled_hvparams(config.find_instance("plain0"))["acpi"] is False


def test_backend_params_fill(config: model.ConfigData) -> None:
    config.cluster.beparams = {"vcpus": 4, "auto_balance": False}
    inst = config.find_instance("drbd0")  # overrides vcpus=2, maxmem=1024
    filled = config.filled_beparams(inst)
    assert (filled["vcpus"], filled["maxmem"], filled["auto_balance"]) == (2, 1024, False)
    assert config.filled_beparams(config.find_instance("plain0"))["vcpus"] == 4


def test_node_params_fill_cluster_group_node(config: model.ConfigData) -> None:
    group = config.find_group("default")
    node = config.find_node("node2")
    config.cluster.ndparams = {"spindle_count": 4, "ssh_port": 2222}
    group.ndparams = {"spindle_count": 8, "exclusive_storage": True}
    node.ndparams = {"spindle_count": 12}
    filled = config.filled_ndparams(node)
    assert filled["spindle_count"] == 12
    assert filled["exclusive_storage"] is True
    assert filled["ssh_port"] == 2222
    assert filled["cpu_speed"] == 1.0
    assert config.filled_ndparams(config.find_node("node1"))["spindle_count"] == 8


def test_disk_params_fill_per_template(config: model.ConfigData) -> None:
    group = config.find_group("default")
    config.cluster.diskparams = {"drbd": {"resync-rate": 1024}, "plain": {"stripes": 2}}
    group.diskparams = {"drbd": {"protocol": "B"}}
    drbd = config.filled_diskparams("drbd", group)
    assert (drbd["resync-rate"], drbd["protocol"], drbd["metavg"]) == (1024, "B", "xenvg")
    assert config.filled_diskparams("plain", group) == {"stripes": 2}
    assert config.filled_diskparams("drbd")["protocol"] == "C"


def test_bridged_nic_link_defaults_to_the_clusters(config: model.ConfigData) -> None:
    inst = config.find_instance("plain0")
    group = config.instance_group(inst)
    filled = config.filled_nicparams(inst.nics[0], group)
    assert filled == {"mode": "bridged", "link": "br0", "vlan": ""}
    inst.nics[0].nicparams = {"link": "br7"}
    assert config.filled_nicparams(inst.nics[0], group)["link"] == "br7"


def test_nic_on_a_network_takes_the_groups_link(config: model.ConfigData) -> None:
    net = model.Network(uuid=model.new_uuid(), name="public", network="203.0.113.0/24")
    config.networks[net.uuid] = net
    group = config.find_group("default")
    group.networks[net.uuid] = model.NetworkLink(mode="routed", link="rt100")
    nic = config.find_instance("drbd0").nics[0]
    nic.network = net.uuid
    assert config.filled_nicparams(nic, group) == {"mode": "routed", "link": "rt100", "vlan": ""}


def test_routed_nic_without_ip_is_refused(config: model.ConfigData) -> None:
    inst = config.find_instance("plain0")
    assert inst.nics[0].ip is None
    inst.nics[0].nicparams = {"mode": "routed", "link": "table100"}
    with pytest.raises(ConfigError, match="NIC 0 is in routed mode and needs an IP"):
        model.revalidate(config)
    inst.nics[0].ip = "203.0.113.50"
    model.revalidate(config)  # now fine


def test_cluster_wide_routed_default_requires_ips(config: model.ConfigData) -> None:
    config.cluster.nicparams = {"mode": "routed", "link": "main"}
    with pytest.raises(ConfigError, match="plain0.example.com: NIC 0 is in routed mode"):
        model.revalidate(config)


@pytest.mark.parametrize(
    ("family", "params", "message"),
    [
        (parameters.BE_FAMILY, {"colour": "red"}, "unknown backend parameter 'colour'"),
        (parameters.BE_FAMILY, {"vcpus": "many"}, "'vcpus': expected an integer"),
        (parameters.BE_FAMILY, {"vcpus": True}, "'vcpus': expected an integer"),
        (parameters.BE_FAMILY, {"auto_balance": "maybe"}, "expected a boolean"),
        (parameters.BE_FAMILY, {"maxmem": "lots"}, "not a size"),
        (parameters.ND_FAMILY, {"cpu_speed": "fast"}, "'cpu_speed'"),
        (parameters.NIC_FAMILY, {"mode": "tunnel"}, "'tunnel' is not one of bridged"),
        (parameters.HV_FAMILIES["kvm"], {"no_such": 1},
         "unknown hypervisor kvm parameter 'no_such'"),
        (parameters.HV_FAMILIES["kvm"], {"migration_mode": "teleport"},
         "not one of live, non-live"),
        (parameters.DISK_FAMILIES["drbd"], {"stripes": 2}, "unknown disk template drbd parameter"),
        (parameters.DISK_FAMILIES["drbd"], {"protocol": "D"}, "not one of A, B, C"),
    ],
)
def test_bad_parameters_are_refused(family: parameters.ParamFamily, params: dict,
                                    message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        parameters.validate(family, params)


def test_strings_from_the_command_line_are_converted() -> None:
    assert parameters.validate(parameters.BE_FAMILY,
                               {"vcpus": "4", "maxmem": "2G", "auto_balance": "no"}) == {
        "vcpus": 4, "maxmem": 2048, "auto_balance": False,
    }
    assert parameters.validate(parameters.ND_FAMILY, {"cpu_speed": "1.5"}) == {"cpu_speed": 1.5}
    assert parameters.parse_size("512") == 512
    assert parameters.parse_size("1.5T") == 1.5 * 1024 * 1024
    assert parameters.parse_size("2048K") == 2


def test_global_hypervisor_params_refused_on_instances(config: model.ConfigData) -> None:
    for name in sorted(parameters.HV_GLOBAL_PARAMS & set(parameters.HV_FAMILIES["kvm"].specs)):
        with pytest.raises(ParameterError, match=f"'{name}' is cluster-wide only"):
            parameters.validate(parameters.HV_FAMILIES["kvm"],
                                {name: parameters.HV_FAMILIES["kvm"].specs[name].default},
                                instance_level=True)
    # ... but fine at cluster level
    parameters.validate(parameters.HV_FAMILIES["kvm"], {"migration_port": 9000})
    raw = json.loads(model.encode(config))
    next(iter(raw["instances"].values()))["hvparams"] = {"migration_port": 9000}
    with pytest.raises(ConfigError, match="cluster-wide only"):
        model.decode(json.dumps(raw))
    raw["cluster"]["os_hvp"] = {"debian": {"kvm": {"migration_mode": "live"}}}
    next(iter(raw["instances"].values()))["hvparams"] = {}
    with pytest.raises(ConfigError, match="cluster-wide only"):
        model.decode(json.dumps(raw))


def test_global_hypervisor_params_dropped_from_instances_on_upgrade() -> None:
    old = {
        "version": 0,
        "cluster": {"name": "c.example.com", "master_node": "n1", "master_ip": "192.0.2.1"},
        "nodegroups": {"default": {}},
        "nodes": {"n1": {"primary_ip": "192.0.2.11", "group": "default"}},
        "instances": {"i1": {
            "primary_node": "n1", "os": "debian", "hypervisor": "kvm",
            "hvparams": {"migration_port": 9000, "migration_mode": "live", "acpi": False},
        }},
    }
    config = upgrade.load_document(json.dumps(old).encode())
    assert config.find_instance("i1").hvparams == {"acpi": False}


def test_parse_assignments_resets_and_booleans() -> None:
    assert parameters.parse_assignments(
        ["vcpus=2,maxmem=1G", "acpi=default", "-kernel_path", "no_acpi"]) \
        == {"vcpus": "2", "maxmem": "1G", "acpi": "false", "kernel_path": None}
    with pytest.raises(ParameterError, match="expected key=value"):
        parameters.parse_assignments(["justaword"])
    with pytest.raises(ParameterError, match="missing parameter name"):
        parameters.parse_assignments(["=3"])


def test_apply_overrides_resets_to_inherited() -> None:
    current = {"vcpus": 2, "maxmem": 1024}
    updated = parameters.apply_overrides(parameters.BE_FAMILY, current,
                                         {"vcpus": None, "minmem": "512"})
    assert updated == {"maxmem": 1024, "minmem": 512}
    with pytest.raises(ParameterError, match="unknown backend parameter 'bogus'"):
        parameters.apply_overrides(parameters.BE_FAMILY, current, {"bogus": None})


@pytest.mark.parametrize("mask", ["0-15000000", "0-100000000", "1,0-16384", "16384",
                                  "all:0-15000000", "0:1:99999999"])
def test_cpu_masks_are_bounded_before_anything_expands_them(mask: str) -> None:
    """Issue 35 item 9: `cpu_mask 0-15000000` cost 1.8 s and half a GiB (the range was
    expanded to check it). A CPU number above libvirt's cpuset limit is refused, and the check
    expands nothing: a refusal and an accepted mask of the largest CPUs cost the same."""
    family = parameters.HV_FAMILIES["kvm"]
    with pytest.raises(ParameterError, match=f"CPU numbers go up to {parameters.MAX_CPU}"):
        parameters.validate(family, {"cpu_mask": mask})
    started = tracemalloc_peak(lambda: parameters.validate(
        family, {"cpu_mask": ",".join(["0-16383"] * 1000)}))
    assert started < 1 << 20  # bytes: the ranges were never expanded


def tracemalloc_peak(action: Callable[[], object]) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_uid_pools_are_bounded_at_the_edge() -> None:
    """Issue 35 item 9: the uid pool is expanded into a set on the node that starts an
    instance: a pool of four billion uids is refused when it is set or added to."""
    from herder.core import uidpool
    from herder.masterd.jobs import opcodes

    for field in ("uid_pool", "add_uids"):
        with pytest.raises(opcodes.OpcodeError, match=f"at most {uidpool.MAX_POOL_SIZE}"):
            opcodes.parse({"OP_ID": "OP_CLUSTER_SET_PARAMS", field: [[0, uidpool.MAX_UID]]})
        with pytest.raises(opcodes.OpcodeError, match=f"at most {uidpool.MAX_POOL_SIZE}"):
            opcodes.parse({"OP_ID": "OP_CLUSTER_SET_PARAMS",
                           field: [[0, 40000], [50000, 80000]]})
    assert opcodes.parse({"OP_ID": "OP_CLUSTER_SET_PARAMS",
                          "uid_pool": [[1000, 1000 + uidpool.MAX_POOL_SIZE - 1]]})
