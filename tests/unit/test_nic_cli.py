"""`herder instance add --net` and `modify --net` read Ganeti 3.0's syntax (gnt-instance's
`N:key=val,...` and `add:...|N:modify,...|N:remove`, _ConvertNicDiskModifications), and
refuse what Ganeti refuses with one line naming the value."""

from __future__ import annotations

from typing import Any

import click
import pytest

from herder.cli.instance import disk_modification, nic_specs


@pytest.mark.parametrize(("text", "mod"), [
    ("add:network=lan,ip=pool,mac=generate",
     ["add", -1, {"network": "lan", "ip": "pool", "mac": "generate"}]),
    ("2:add,link=br1", ["add", 2, {"link": "br1"}]),
    ("1:remove", ["remove", 1, {}]),
    ("remove", ["remove", -1, {}]),
    ("0:modify,ip=none", ["modify", 0, {"ip": "none"}]),
    ("0:network=lan,ip=192.0.2.9", ["modify", 0, {"network": "lan", "ip": "192.0.2.9"}]),
])
def test_modify_net_reads_ganetis_modifications(text: str, mod: list[Any]) -> None:
    assert disk_modification(text, "--net") == mod


@pytest.mark.parametrize("text", ["1:remove,ip=pool", "1:add,remove", "lan", "1:ip"])
def test_modify_net_refuses_bad_modifications(text: str) -> None:
    with pytest.raises(click.BadParameter) as caught:
        disk_modification(text, "--net")
    assert "--net" in caught.value.format_message()


@pytest.mark.parametrize(("given", "specs"), [
    (("0:network=lan,ip=pool", "1:ip=none"), [{"network": "lan", "ip": "pool"}, {"ip": "none"}]),
    (("1:link=br1", "0:link=br0"), [{"link": "br0"}, {"link": "br1"}]),
    (("link=br0",), [{"link": "br0"}]),  # a bare one: herder's older form, still read
    ((), [{}]),  # no --net: one NIC with the cluster's parameters, as Ganeti
])
def test_add_net_reads_indexed_nics(given: tuple[str, ...], specs: list[dict[str, Any]]) -> None:
    assert nic_specs(given) == specs


@pytest.mark.parametrize(("given", "named"), [
    (("0:ip=pool", "0:ip=none"), "NIC 0 given twice"),
    (("1:ip=pool",), "[1] leave a gap"),
    (("x:ip=1",), "'x:ip=1'"),
])
def test_add_net_refuses_bad_indices_in_one_line(given: tuple[str, ...], named: str) -> None:
    with pytest.raises(click.BadParameter) as caught:
        nic_specs(given)
    message = caught.value.format_message()
    assert named in message and "\n" not in message
