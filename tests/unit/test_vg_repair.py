"""The master's VG repair safety check (design-2.1 "Fix node volume group"): only when every
instance on the node keeps a healthy mirror elsewhere."""

from __future__ import annotations

from herder.core import model
from herder.masterd.vg_repair import vg_repair_allowed
from tests.conftest import build_config


def _drbd_only_config() -> model.ConfigData:
    return build_config(nodes=3, drbd_instances=3, plain_instances=0)


def test_repair_allowed_when_all_peers_healthy() -> None:
    config = _drbd_only_config()
    node = next(iter(config.nodes))
    health = dict.fromkeys(config.nodes, True)
    health[node] = False  # the node being repaired is the broken one
    allowed, reason = vg_repair_allowed(config, node, health)
    assert allowed, reason
    assert "healthy mirror" in reason


def test_repair_refused_when_a_peer_is_unhealthy_or_unknown() -> None:
    config = _drbd_only_config()
    nodes = list(config.nodes)
    health = dict.fromkeys(nodes, True)
    health[nodes[1]] = False
    allowed, reason = vg_repair_allowed(config, nodes[0], health)
    assert not allowed and "node2.example.com is unhealthy" in reason
    del health[nodes[1]]
    allowed, reason = vg_repair_allowed(config, nodes[0], health)
    assert not allowed and "no health report" in reason
    health[nodes[1]] = True
    config.nodes[nodes[1]].offline = True
    allowed, reason = vg_repair_allowed(config, nodes[0], health)
    assert not allowed and "offline" in reason


def test_repair_refused_with_plain_instances() -> None:
    config = build_config(nodes=2, drbd_instances=1, plain_instances=1)
    node = next(i.primary_node for i in config.instances.values() if i.disk_template == "plain")
    allowed, reason = vg_repair_allowed(config, node, dict.fromkeys(config.nodes, True))
    assert not allowed and "non-mirrored (plain)" in reason
    # A plain instance in another VG does not block repairing this one.
    allowed, _ = vg_repair_allowed(config, node, dict.fromkeys(config.nodes, True),
                                     vg_name="othervg")
    assert allowed


def test_repair_ignores_non_lvm_instances_and_unknown_node() -> None:
    config = build_config(nodes=2, drbd_instances=0, plain_instances=0)
    node = next(iter(config.nodes))
    inst = model.Instance(
        uuid=model.new_uuid(), name="file.example.com", primary_node=node, os="x", hypervisor="kvm",
        disks=[model.Disk(uuid=model.new_uuid(), dev_type="file", size=10,
                      logical_id=model.FileId(driver="loop", path="/srv/f/d0"))],
    )
    config.instances[inst.uuid] = inst
    allowed, reason = vg_repair_allowed(config, node, {})
    assert allowed and "all 0 instance(s)" in reason
    allowed, reason = vg_repair_allowed(config, "no-such-node", {})
    assert not allowed and "not in the cluster" in reason
