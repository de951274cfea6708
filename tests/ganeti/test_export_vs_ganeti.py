"""An export's config.ini as Ganeti 3.0.2's own code writes and reads it (backend.FinalizeExport,
backend.ExportInfo, run in Debian's python3 from the peers' library: `export_driver.py`):

- herder's config.ini of an instance equals Ganeti's for the same instance (same sections, keys
  and values; only the timestamp differs), and Ganeti's ExportInfo reads herder's;
- Ganeti's config.ini reads in herder (`core.exportconf.parse`) into what an import takes,
  and its parameters pass the validation an import's opcode runs.

Skips cleanly without Ganeti's code (/tmp/groot, from ../shared/peers).
"""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Any

import pytest

from herder.core import exportconf, model, params
from tests.conftest import build_config
from tests.noded.bdev import harness

pytestmark = pytest.mark.peer

HERE = Path(__file__).resolve().parent


def ganeti_available() -> bool:
    return (harness.GROOT / "ganeti" / "backend.py").is_file() and \
        harness.DEBIAN_PYTHON.is_file()


def ganeti_instance(config: model.ConfigData, inst: model.Instance) -> dict[str, Any]:
    """The instance as Ganeti's RPC layer hands it to FinalizeExport (parameters filled)."""
    group = config.nodegroups.get(config.nodes[inst.primary_node].group)
    return {
        "name": inst.name, "uuid": inst.uuid, "primary_node": inst.primary_node,
        "os": inst.os, "hypervisor": inst.hypervisor, "disk_template": inst.disk_template,
        "hvparams": dict(config.filled_hvparams(inst)),
        "beparams": dict(config.filled_beparams(inst)), "osparams": dict(inst.osparams),
        "osparams_private": {}, "tags": list(inst.tags), "disks": [],
        "nics": [{"mac": nic.mac, "ip": nic.ip, "network": nic.network, "name": nic.name,
                  "nicparams": dict(config.filled_nicparams(nic, group))}
                 for nic in inst.nics]}


def snap_disks(inst: model.Instance) -> list[dict[str, Any]]:
    return [{"uuid": disk.uuid, "iv_name": disk.iv_name, "size": disk.size, "name": disk.name,
             "dev_type": "plain", "logical_id": ["xenvg", f"{disk.uuid}.snap"]}
            for disk in inst.disks]


def run_ganeti(request: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = harness.run_ganeti_driver(HERE / "export_driver.py", request,
                                                       "export code")
    return answer


class CaseKeeping(configparser.RawConfigParser):
    def optionxform(self, optionstr: str) -> str:
        return optionstr


def sections(text: str) -> dict[str, dict[str, str]]:
    parser = CaseKeeping()
    parser.read_string(text)
    return {name: dict(parser.items(name)) for name in parser.sections()}


@pytest.fixture
def exported(tmp_path: Path) -> tuple[model.ConfigData, model.Instance, Path, Path]:
    """An instance exported by Ganeti (under ganeti/) and by herder (under herder/)."""
    if not ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    config = build_config()
    inst = next(i for i in config.instances.values() if i.name.startswith("plain"))
    inst.disks[0].name, inst.disks[0].iv_name = "root", "disk/0"
    inst.tags, inst.osparams = ["web", "prod"], {"packages": "vim"}
    ours = tmp_path / "herder" / inst.name
    ours.mkdir(parents=True)
    (ours / exportconf.CONF_FILE).write_text(exportconf.build(config, inst, 1_800_000_000))
    answer = run_ganeti({"export_dir": str(tmp_path / "ganeti"),
                         "instance": ganeti_instance(config, inst),
                         "snap_disks": snap_disks(inst), "read": [str(ours)]})
    assert not answer["read"][0].startswith("error:"), answer["read"][0]
    return config, inst, tmp_path / "ganeti" / inst.name, ours


def test_herders_config_ini_is_ganetis(exported: Any) -> None:
    _config, _inst, theirs, ours = exported
    ganeti = sections((theirs / exportconf.CONF_FILE).read_text())
    herder = sections((ours / exportconf.CONF_FILE).read_text())
    ganeti["export"].pop("timestamp")
    assert herder["export"].pop("timestamp") == "1800000000"
    # Ganeti's tags are a set: written in its hash order
    assert set(herder["instance"].pop("tags").split()) == \
        set(ganeti["instance"].pop("tags").split()) == {"web", "prod"}
    assert herder == ganeti


def test_ganeti_lists_and_reads_every_export_a_retention_count_keeps(tmp_path: Path) -> None:
    """herder's exports of one instance with keep 3 (the newest under its name, the older
    ones dated, `noded.exports.finalize`): Ganeti's ListExports lists each and its
    ExportInfo reads each, so gnt-backup list and import see them all."""
    from herder.noded import exports

    if not ganeti_available():
        pytest.skip("Ganeti 3.0.2 from ../shared/peers (/tmp/groot) is absent")
    config = build_config()
    inst = next(i for i in config.instances.values() if i.name.startswith("plain"))
    for day in range(4):
        (tmp_path / f"{inst.name}.new").mkdir()
        (tmp_path / f"{inst.name}.new" / inst.disks[0].uuid).write_bytes(b"%d" % day)
        exports.finalize(tmp_path, inst.name,
                         exportconf.build(config, inst, 1_800_000_000 + day * 86400), keep=3)
    names = exports.list_exports(tmp_path)
    assert names == [inst.name, f"{inst.name}@20270116-080000", f"{inst.name}@20270117-080000"]
    answer = run_ganeti({"export_dir": str(tmp_path), "read": [str(tmp_path / n) for n in names]})
    assert answer["listed"] == names
    for name, text in zip(names, answer["read"], strict=True):
        assert not text.startswith("error:"), (name, text)
        assert sections(text)["instance"]["name"] == inst.name
        assert text == (tmp_path / name / exportconf.CONF_FILE).read_text()


def test_ganetis_export_reads_as_an_import_takes_it(exported: Any) -> None:
    config, inst, theirs, _ours = exported
    info = exportconf.parse((theirs / exportconf.CONF_FILE).read_text())
    assert (info.name, info.os, info.disk_template, info.hypervisor) == (
        inst.name, inst.os, "plain", "kvm")
    assert info.disks == (exportconf.ExportDisk(ivname="disk/0", dump=inst.disks[0].uuid,
                                                size=inst.disks[0].size, name="root"),)
    assert [nic.mac for nic in info.nics] == [nic.mac for nic in inst.nics]
    assert info.nics[0].nicparams == {"link": "br0", "mode": "bridged"}  # vlan "" left out
    assert sorted(info.tags) == ["prod", "web"] and info.osparams == {"packages": "vim"}
    # the parameters validate as an import's opcode validates them, to the instance's values
    assert params.validate(params.BE_FAMILY, info.beparams) == config.filled_beparams(inst)
    hvparams = params.validate(params.hv_family("kvm"), info.hvparams, instance_level=True)
    assert hvparams == {k: v for k, v in config.filled_hvparams(inst).items()
                        if k not in params.HV_GLOBAL_PARAMS}
