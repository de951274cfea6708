"""The target of a migration or failover of an instance on shared storage (`placement.
pick_target`): the node given, refused when it is the instance's primary, as Ganeti's
TLMigrateInstance.CheckPrereq does (found by the chaos test: two migrations of one instance
to the same node, the second checked once the first had moved it there, reached the node
claim's guard with a malformed move instead)."""

from __future__ import annotations

import msgspec
import pytest

from herder.core import model
from herder.core.errors import OpPrereqError
from herder.masterd.lu import placement
from tests.conftest import build_config


def diskless_on_node1() -> tuple[model.ConfigData, model.Instance]:
    config = build_config()
    plain = config.find_instance("plain0.example.com")
    inst = msgspec.structs.replace(plain, name="shared0.example.com", disks=[])
    config.instances[inst.uuid] = inst
    return config, inst


def test_the_node_given_is_the_target() -> None:
    config, inst = diskless_on_node1()
    assert inst.disk_template in placement.ALLOCATED
    assert placement.pick_target(config, inst, "node2.example.com").name == "node2.example.com"


def test_the_instances_own_primary_is_refused_with_ganetis_message() -> None:
    config, inst = diskless_on_node1()
    assert config.node_name(inst.primary_node) == "node1.example.com"
    with pytest.raises(OpPrereqError, match=r"^Cannot migrate instance shared0.example.com to "
                       r"its primary \(node1.example.com\)$") as caught:
        placement.pick_target(config, inst, "node1.example.com")
    assert caught.value.ganeti_args[1] == "wrong_state"
