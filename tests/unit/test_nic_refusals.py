"""Bad NIC input is refused with one line naming the value (lu/nics.py, on the copy the
LU's check works on): an exhausted pool, an address outside the network or already used, a
MAC another NIC has."""

from __future__ import annotations

import pytest

from herder.core import addrpool, configdiff, model
from herder.core.errors import OpPrereqError
from herder.masterd.lu import nics
from tests.conftest import build_config


def cluster_with_a_small_network() -> tuple[model.ConfigData, model.Instance]:
    config = build_config(2)
    state = addrpool.AddressPool.initialized("192.0.2.0/30", None).state()  # two free
    net = model.Network(uuid=model.new_uuid(), name="tiny", network="192.0.2.0/30",
                        reservations=state.reservations,
                        ext_reservations=state.ext_reservations)
    config.networks[net.uuid] = net
    for group in config.nodegroups.values():
        group.networks[net.uuid] = model.NetworkLink(mode="bridged", link="br0")
    inst = next(iter(config.instances.values()))
    return config, configdiff.decode_object("instances", configdiff.encode_object(inst))


def refusal(mods: list[list[object]]) -> str:
    config, inst = cluster_with_a_small_network()
    ctx = nics.NicContext.of(config, config.nodes[inst.primary_node], lambda _: None)
    with pytest.raises(OpPrereqError) as caught:
        nics.apply_mods(ctx, inst, mods)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_pool_hands_out_its_two_addresses_then_says_it_is_full() -> None:
    config, inst = cluster_with_a_small_network()
    ctx = nics.NicContext.of(config, config.nodes[inst.primary_node], lambda _: None)
    nics.apply_mods(ctx, inst, [["add", {"network": "tiny", "ip": "pool"}]] * 2)
    assert [nic.ip for nic in inst.nics[-2:]] == ["192.0.2.1", "192.0.2.2"]
    assert "tiny" in refusal([["add", {"network": "tiny", "ip": "pool"}]] * 3)


def test_an_address_outside_or_taken_and_a_used_mac_are_named() -> None:
    assert "10.9.9.9" in refusal([["add", {"network": "tiny", "ip": "10.9.9.9"}]])
    assert "192.0.2.1" in refusal([["add", {"network": "tiny", "ip": "192.0.2.1"}],
                                   ["add", {"network": "tiny", "ip": "192.0.2.1"}]])
    config, _ = cluster_with_a_small_network()
    used = next(nic.mac for other in config.instances.values() for nic in other.nics)
    assert used in refusal([["add", {"mac": used}]])
