"""An export's config.ini (`core.exportconf`): what herder writes reads back as the instance it
came from, and a config.ini that is not an export's is one line naming what is wrong.
(Compared with Ganeti's own export code: tests/ganeti/test_export_vs_ganeti.py.)"""

from __future__ import annotations

import pytest

from herder.core import exportconf, model
from tests.conftest import build_config


def plain_instance(config: model.ConfigData) -> model.Instance:
    inst = next(i for i in config.instances.values() if i.name.startswith("plain"))
    inst.disks[0].iv_name, inst.disks[0].name = "disk/0", "root"
    inst.tags = ["web"]
    return inst


def test_what_herder_writes_reads_back_as_the_instance() -> None:
    config = build_config()
    inst = plain_instance(config)
    info = exportconf.parse(exportconf.build(config, inst, 1_800_000_000))
    assert (info.name, info.os, info.hypervisor, info.disk_template, info.timestamp) == (
        inst.name, inst.os, "kvm", "plain", 1_800_000_000)
    assert info.source == inst.primary_node  # Ganeti 3.0 writes the node's UUID
    assert info.disks == (exportconf.ExportDisk(ivname="disk/0", dump=inst.disks[0].uuid,
                                                size=2048, name="root"),)
    assert info.nics == (exportconf.ExportNic(mac=inst.nics[0].mac, nicparams={
        "link": "br0", "mode": "bridged"}),)  # filled; the empty vlan left out
    assert info.tags == ("web",)
    assert info.beparams["maxmem"] == str(config.filled_beparams(inst)["maxmem"])
    assert "migration_port" not in info.hvparams  # Ganeti's HVC_GLOBALS stay out
    assert info.hvparams["kernel_path"] == str(config.filled_hvparams(inst)["kernel_path"])


GOOD = """[export]
version = 0
timestamp = 1
source = n1
os = debootstrap+default

[instance]
name = web1.example.com
disk_template = plain
hypervisor = kvm
nic_count = 0
disk_count = 1
disk0_ivname = disk/0
disk0_dump = 8b3c0f0e-disk
disk0_size = 1024
"""


@pytest.mark.parametrize(("text", "fragment"), [
    ("not an ini file", "cannot be read"),
    ("[export]\nos = x\n", "no [export] or [instance] section"),
    (GOOD.replace("os = debootstrap+default\n", ""), "no os in [export]"),
    (GOOD.replace("disk_count = 1", "disk_count = many"), "disk_count is not a number"),
    (GOOD.replace("disk0_size = 1024\n", ""), "[instance] has no disk0_size"),
    (GOOD.replace("8b3c0f0e-disk", "../../etc/shadow"), "is not a file name"),
    (GOOD.replace("8b3c0f0e-disk", ".hidden"), "is not a file name"),
    (GOOD.replace("nic_count = 0", "nic_count = 1"), "[instance] has no nic0_mac"),
    (GOOD.replace("timestamp = 1", "timestamp = soon"), "the timestamp is not a number"),
    (GOOD.replace("[instance]\nname", "[instance]\nname = a\nname"), "cannot be read"),
])
def test_a_corrupt_config_ini_is_one_line(text: str, fragment: str) -> None:
    with pytest.raises(exportconf.ExportConfError) as err:
        exportconf.parse(text)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_good_one_parses() -> None:
    info = exportconf.parse(GOOD)
    assert info.disks[0].dump == "8b3c0f0e-disk" and info.nics == ()
