"""The LVM collectors: `plain` (status, KiB, PV health, LV -> instance) and Ganeti's `lv`, on
captured outputs, Ganeti's samples, real LVM on loop devices, stand-alone, and the peer."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.cli.main import main
from herder.core import model
from herder.core.store import FileStore
from herder.mond.collector import CollectContext, CollectorError
from herder.mond.collectors.lvm import (
    LvCollector,
    PlainCollector,
    VolumeGroup,
    cluster_vg,
    lv_owners,
    parse_lvs,
    parse_size,
    parse_vgs,
    plain_data,
    pv_problems,
)
from herder.mond.context import make_context
from herder.mond.report import Kind
from herder.mond.runner import collect_once, render
from tests.conftest import build_config

SHARED = Path(__file__).resolve().parents[3] / "shared"
GANETI = SHARED / "conformance" / "ganeti"
MON_COLLECTOR = Path("/tmp/groot/usr/lib/ganeti/3.0/usr/lib/ganeti/mon-collector")

LVS = (
    "  uuid-a;d0.disk0_data;-wi-ao----;-1;-1;253;0;10737418240B;1;;;vguuid;xenvg;linear;0B;0;"
    "10737418240B;;/dev/sda5:0-2559;/dev/sda5(0)\n"
    "  uuid-b;d0.disk0_meta;-wi-ao----;-1;-1;253;1;134217728B;1;;;vguuid;xenvg;linear;0B;0;"
    "134217728B;;/dev/sda5:2560-2591;/dev/sda5(2560)\n"
    "  uuid-c;p0.disk0;-wi-a-----;-1;-1;253;2;2147483648B;2;;;vguuid;xenvg;linear;0B;0;"
    "1073741824B;;/dev/sda5:2592-2847;/dev/sda5(2592)\n"
    "  uuid-c;p0.disk0;-wi-a-----;-1;-1;253;2;2147483648B;2;;;vguuid;xenvg;linear;1073741824B;"
    "256;1073741824B;;/dev/sdb1:0-255;/dev/sdb1(0)\n"
    "  uuid-d;other;-wi-a-----;-1;-1;253;3;4194304B;1;;;vg2uuid;othervg;linear;0B;0;"
    "4194304B;;/dev/sdc1:0-0;/dev/sdc1(0)\n"
)
VGS = (
    "  xenvg|vguuid|wz--n-|107374182400|80530636800|2|0|3\n"
    "  othervg|vg2uuid|wz--n-|1073741824|1069547520|1|0|1\n"
)


def conformance(name: str) -> Path:
    path = GANETI / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared not mounted)")
    return path


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def context(inputs: dict[str, Path], config: model.ConfigData | None = None,
            node: str = "node1.example.com") -> CollectContext:
    return CollectContext(node_name=node, inputs=inputs, config_loader=lambda: config)


# --- parsers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "default", "expected"), [
    ("123", "b", 123), ("123B", "b", 123), ("65536.00", "k", 65536 * 1024), ("0B", "b", 0),
    ("1.5m", "b", 1536 * 1024), ("<1.31t", "b", round(1.31 * 1024**4)), ("2K", "b", 2000),
    ("4s", "b", 2048), ("10", "m", 10 * 1024**2),
])
def test_parse_size(text: str, default: str, expected: int) -> None:
    assert parse_size(text, default) == expected


@pytest.mark.parametrize("text", ["", "abc", "12x", "1.2.3"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_parse_lvs_rows_and_messages() -> None:
    text = "  WARNING: Couldn't find device with uuid abc-def.\n" + LVS
    rows, messages = parse_lvs(text)
    assert len(rows) == 5
    assert messages == ["WARNING: Couldn't find device with uuid abc-def."]
    first = rows[0]
    assert first["name"] == "d0.disk0_data" and first["size"] == 10737418240
    assert first["kernel_minor"] == 0 and first["major"] == -1 and first["seg_start"] == 0
    assert rows[3]["seg_start"] == 1073741824 and rows[3]["seg_start_pe"] == 256
    # the `|` separator and sizes without suffix parse the same
    rows2, _ = parse_lvs(LVS.replace(";", "|").replace("B|", "|"))
    assert rows2 == rows


@pytest.mark.parametrize("garbage", [
    "this is not lvs output\n",
    "  a;b;c\n",
    LVS.replace(";253;0;", ";x;0;"),
    LVS.replace("10737418240B;1;", "lots;1;", 1),
])
def test_parse_lvs_garbage(garbage: str) -> None:
    with pytest.raises(CollectorError, match="lvs output line"):
        parse_lvs(garbage)


def test_parse_lvs_ganeti_sample() -> None:
    rows, messages = parse_lvs(conformance("lvs_lv.txt").read_text())
    assert messages == []
    assert [r["name"] for r in rows] == [
        "df9ff3f6-a833-48ff-8bd5-bff2eaeab759.disk0_data",
        "df9ff3f6-a833-48ff-8bd5-bff2eaeab759.disk0_meta",
    ]
    data = rows[0]
    assert data["uuid"] == "nhasjL-cnZi-uqLS-WRLj-tkXI-nvCB-n0o2lj"
    assert (data["attr"], data["major"], data["minor"]) == ("-wi-ao", -1, -1)
    assert (data["kernel_major"], data["kernel_minor"]) == (253, 0)
    assert data["size"] == 1073741824 and data["seg_count"] == 1
    assert data["tags"] == "originstname+instance1.example.com" and data["modules"] == ""
    assert data["vg_name"] == "xenvg" and data["segtype"] == "linear"
    assert data["seg_pe_ranges"] == "/dev/sda5:0-15" and data["devices"] == "/dev/sda5(0)"
    assert rows[1]["size"] == 134217728 and rows[1]["kernel_minor"] == 1


def test_parse_vgs_formats() -> None:
    groups, messages = parse_vgs(
        "File descriptor 10 (/dev/null) leaked on vgs invocation. Parent PID 1: bash\n" + VGS)
    assert messages and messages[0].startswith("File descriptor 10")
    assert groups[0] == VolumeGroup(name="xenvg", uuid="vguuid", attr="wz--n-",
                                    size=107374182400, free=80530636800, pv_count=2,
                                    missing_pvs=0, lv_count=3)
    # vgs' default columns, human sizes (as in Ganeti's samples)
    groups, _ = parse_vgs("  VG    #PV #LV #SN Attr   VSize  VFree\n"
                          "  xenvg   2  52   0 wz-pn- 1.31t 1.07t\n")
    assert groups[0].name == "xenvg" and groups[0].partial and groups[0].pv_count == 2
    assert groups[0].size == round(1.31 * 1024**4)


@pytest.mark.parametrize("garbage", ["garbage\n", "  a|b|c\n", "  vg|u|wz--n-|x|1|1|0|0\n"])
def test_parse_vgs_garbage(garbage: str) -> None:
    with pytest.raises(CollectorError, match="vgs output line"):
        parse_vgs(garbage)


def test_pv_problems_messages() -> None:
    problems = pv_problems([
        "WARNING: Couldn't find device with uuid dm458N-fkLP.",
        "WARNING: VG testvg is missing PV dm458N-fkLP (last written to /dev/loop1).",
        "Couldn't find device with uuid 'gg4cmC-4lrT'.",
        "Couldn't find all physical volumes for volume group xenvg.",
        "Volume group xenvg not found",
        'Volume group "vg3" not found',
    ])
    assert problems.uuids_by_vg == {"testvg": ["dm458N-fkLP"]}
    assert problems.unattributed == ["gg4cmC-4lrT"]
    assert problems.incomplete == {"xenvg"} and problems.not_found == {"xenvg", "vg3"}


# --- plain: data, status, instance mapping -------------------------------------------------------


def test_plain_data_healthy_with_instances() -> None:
    config = build_config()
    groups, _ = parse_vgs(VGS)
    rows, _ = parse_lvs(LVS)
    owners = lv_owners(config, config.find_node("node1.example.com").uuid)
    data = plain_data(groups, rows, [], owners, volume_group="xenvg")
    assert data["status"] == {"code": 0, "message": ""}
    assert (data["total"], data["free"]) == (104857600, 78643200)
    assert data["used"] == data["total"] - data["free"]
    assert [vg["name"] for vg in data["vgs"]] == ["xenvg"]  # the cluster's VG only
    lvs = {lv["name"]: lv for lv in data["lvs"]}
    assert set(lvs) == {"d0.disk0_data", "d0.disk0_meta", "p0.disk0"}
    assert lvs["d0.disk0_data"]["instance"] == "drbd0.example.com"  # DRBD child
    assert lvs["d0.disk0_meta"]["size"] == 131072
    assert lvs["p0.disk0"] == {"name": "p0.disk0", "vg": "xenvg", "uuid": "uuid-c",
                               "attr": "-wi-a-----", "size": 2097152,
                               "devices": ["/dev/sda5(2592)", "/dev/sdb1(0)"],
                               "instance": "plain0.example.com"}
    # without a VG filter every VG is reported and summed
    every = plain_data(groups, rows, [], owners)
    assert [vg["name"] for vg in every["vgs"]] == ["xenvg", "othervg"]
    assert every["total"] == 104857600 + 1048576
    assert {lv["name"] for lv in every["lvs"]} == set(lvs) | {"other"}


def test_lv_owners_scope() -> None:
    config = build_config()
    node3 = config.find_node("node3.example.com").uuid
    # node3 holds only drbd1's secondary (drbd1: node2 -> node3)
    assert set(lv_owners(config, node3).values()) == {"drbd1.example.com"}
    assert set(lv_owners(config, None).values()) == {
        "drbd0.example.com", "drbd1.example.com", "plain0.example.com"}
    assert lv_owners(None, None) == {}


def test_plain_missing_pv_field() -> None:
    groups, _ = parse_vgs("  xenvg|u|wz-pn-|200|100|2|1|3\n")
    data = plain_data(groups, [], ["WARNING: VG xenvg is missing PV ab-cd (last written to x)."],
                      {}, "xenvg")
    assert data["status"]["code"] == 4
    assert data["status"]["message"] == (
        "backend pv unavailable: volume group xenvg: 1 physical volume missing (ab-cd)")
    assert data["vgs"][0]["missing_pvs"] == 1 and data["vgs"][0]["status"]["code"] == 4


def test_plain_configured_vg_absent() -> None:
    groups, _ = parse_vgs(VGS)
    data = plain_data(groups, [], [], {}, "nosuchvg")
    assert data["status"] == {"code": 4, "message":
                              "backend pv unavailable: volume group nosuchvg: not found"}
    assert data["vgs"] == [] and data["total"] == 0


@pytest.mark.parametrize(("name", "uuid", "fragment"), [
    ("vgs-missing-pvs-2.02.02.txt", "gg4cmC-4lrT-EN1v-39OA-6S2b-6eEI-wWlJJJ",
     "volume group xenvg: physical volumes missing"),
    ("vgs-missing-pvs-2.02.66.txt", "bHRa26-svpL-ihJX-e0S4-2HNz-wAAi-AlBFtl",
     "volume group xenvg: 1 physical volume missing"),
])
@pytest.mark.parametrize("with_config", [False, True])
def test_plain_ganeti_missing_pv_samples(name: str, uuid: str, fragment: str,
                                         with_config: bool) -> None:
    ctx = context({"vgs": conformance(name), "lvs": conformance("lvs_lv.txt")},
                  build_config() if with_config else None)
    collector = PlainCollector(ctx)
    sample = collect_once(collector)
    assert not sample.failed
    st = sample.data["status"]
    assert st["code"] == 4
    assert st["message"].startswith("backend pv unavailable: ")
    assert fragment in st["message"] and uuid in st["message"]
    assert render(collector, sample, verbose=False)["data"] == {
        "status": st, "free": sample.data["free"], "used": sample.data["used"],
        "total": sample.data["total"]}


@pytest.mark.parametrize("name", ["vgreduce-removemissing-2.02.02.txt",
                                  "vgreduce-removemissing-2.02.66-fail.txt",
                                  "vgreduce-removemissing-2.02.66-ok.txt"])
def test_lvm_messages_of_vgreduce_samples(name: str) -> None:
    """LVM's messages (here vgreduce's) are recognised as such, never taken for rows."""
    groups, messages = parse_vgs(conformance(name).read_text())
    assert groups == [] and messages
    data = plain_data(groups, [], messages, {})
    assert data["status"]["code"] == 4
    assert data["status"]["message"].startswith("backend pv unavailable: ")
    assert re.search(r"uuid|physical volumes missing \(", data["status"]["message"])


def test_plain_old_vgs_sample_sizes() -> None:
    ctx = context({"vgs": conformance("vgs-missing-pvs-2.02.66.txt"),
                   "lvs": conformance("lvs_lv.txt")})
    data = PlainCollector(ctx).collect()
    vg = data["vgs"][0]
    assert vg["total"] == round(1.31 * 1024**4) // 1024 and vg["lv_count"] == 52
    assert vg["missing_pvs"] == 1  # from the partial flag: old vgs has no count column
    assert data["total"] == vg["total"] and data["free"] == vg["free"]


def test_plain_scope_follows_lvm_templates(tmp_path: Path) -> None:
    inputs = {"vgs": write(tmp_path, "vgs", VGS), "lvs": write(tmp_path, "lvs", LVS)}
    config = build_config()
    assert cluster_vg(config) == "xenvg"
    assert [vg["name"] for vg in PlainCollector(context(inputs, config)).collect()["vgs"]] == [
        "xenvg"]
    config.cluster.enabled_disk_templates = ["file", "diskless"]  # no LVM in use
    assert cluster_vg(config) is None and cluster_vg(None) is None
    data = PlainCollector(context(inputs, config)).collect()
    assert [vg["name"] for vg in data["vgs"]] == ["xenvg", "othervg"]


def test_plain_garbage_is_status_4(tmp_path: Path) -> None:
    for inputs in ({"vgs": write(tmp_path, "vgs", "garbage\n"), "lvs": write(tmp_path, "l", "")},
                   {"vgs": write(tmp_path, "v", VGS), "lvs": write(tmp_path, "lvs", "junk\n")},
                   {"vgs": tmp_path / "missing", "lvs": write(tmp_path, "l2", "")}):
        collector = PlainCollector(context(inputs))
        sample = collect_once(collector)
        assert sample.failed
        report = render(collector, sample, verbose=False)
        assert report["kind"] == Kind.STATUS and report["data"]["status"]["code"] == 4
        assert report["data"]["status"]["message"]


def test_lv_collector(tmp_path: Path) -> None:
    ctx = context({"lvs": write(tmp_path, "lvs", LVS)}, build_config())
    collector = LvCollector(ctx)
    assert (collector.name, collector.category, collector.kind) == ("lv", "storage", 0)
    data = collector.collect()
    assert len(data) == 5  # one entry per segment, as Ganeti
    assert list(data[0]) == [
        "uuid", "name", "attr", "major", "minor", "kernel_major", "kernel_minor", "size",
        "seg_count", "tags", "modules", "vg_uuid", "vg_name", "segtype", "seg_start",
        "seg_start_pe", "seg_size", "seg_tags", "seg_pe_ranges", "devices", "instance"]
    assert [d["instance"] for d in data] == [
        "drbd0.example.com", "drbd0.example.com", "plain0.example.com", "plain0.example.com",
        None]
    bad = LvCollector(context({"lvs": write(tmp_path, "bad", "garbage\n")}))
    report = render(bad, collect_once(bad), verbose=True)
    assert report["kind"] == 0 and "lvs output line 1" in report["data"]["error"]


# --- stand-alone equals the runner ---------------------------------------------------------------


@pytest.mark.parametrize("with_config", [False, True])
def test_standalone_equals_runner(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  with_config: bool) -> None:
    vgs, lvs = write(tmp_path, "vgs.txt", VGS), write(tmp_path, "lvs.txt", LVS)
    config_path = tmp_path / "config.json"
    if with_config:
        FileStore(config_path).create(build_config())
    for name, inputs in (("plain", {"vgs": vgs, "lvs": lvs}), ("lv", {"lvs": lvs})):
        args = [f"--input={key}={path}" for key, path in inputs.items()]
        rc = main(["--config", str(config_path), "collect", name, "--verbose",
                   "--node", "node1.example.com", *args])
        assert rc == 0
        printed = json.loads(capsys.readouterr().out)
        ctx = make_context(config_path, node_name="node1.example.com", inputs=inputs)
        cls = PlainCollector if name == "plain" else LvCollector
        collector = cls(ctx)
        expected = render(collector, collect_once(collector), verbose=True)
        printed.pop("timestamp")
        expected.pop("timestamp")
        assert printed == json.loads(json.dumps(expected))
    assert printed["data"][0]["instance"] == ("drbd0.example.com" if with_config else None)


# --- the peer: Ganeti's mon-collector lv ---------------------------------------------------------


def ganeti_like_config() -> model.ConfigData:
    """build_config() with drbd0 renamed and its LVs named as in Ganeti's instance-disks.txt."""
    config = build_config()
    inst = config.find_instance("drbd0.example.com")
    inst.name = "instance1.example.com"
    data, meta = inst.disks[0].children
    data.logical_id = model.PlainId(vg="xenvg",
                                    lv="df9ff3f6-a833-48ff-8bd5-bff2eaeab759.disk0_data")
    meta.logical_id = model.PlainId(vg="xenvg",
                                    lv="df9ff3f6-a833-48ff-8bd5-bff2eaeab759.disk0_meta")
    return config


@pytest.mark.peer
def test_lv_matches_mon_collector() -> None:
    lvs, disks = conformance("lvs_lv.txt"), conformance("instance-disks.txt")
    if not MON_COLLECTOR.is_file():
        pytest.skip("Ganeti's mon-collector is absent (run ../shared/peers/setup.sh)")
    proc = subprocess.run([str(MON_COLLECTOR), "lv", "-f", str(lvs), "-i", str(disks)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    theirs = json.loads(proc.stdout)
    collector = LvCollector(context({"lvs": lvs}, ganeti_like_config()))
    ours = json.loads(json.dumps(render(collector, collect_once(collector), verbose=True)))
    for key in ("name", "version", "format_version", "category", "kind"):
        assert ours[key] == theirs[key]
    assert ours["data"] == theirs["data"]


# --- real LVM on loop devices --------------------------------------------------------------------

LVM_ENV = {**os.environ, "LC_ALL": "C", "LVM_SUPPRESS_FD_WARNINGS": "1"}


def sh(*argv: str) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=LVM_ENV, timeout=60,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def need_real_lvm() -> None:
    if os.geteuid() != 0:
        pytest.skip("real LVM needs root")
    for tool in ("losetup", "pvcreate", "vgcreate", "lvcreate", "vgs", "lvs"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing")


class LoopVg:
    """A throw-away VG on loop devices; cleanup always runs, step by step."""

    def __init__(self, tmp_path: Path, sizes_mib: list[int]) -> None:
        self.name = f"herdertestvg{uuid.uuid4().hex[:8]}"
        self.files: list[Path] = []
        self.devices: list[str] = []
        self.detached: set[str] = set()
        for i, size in enumerate(sizes_mib):
            path = tmp_path / f"pv{i}.img"
            with path.open("wb") as f:
                f.truncate(size * 1024 * 1024)
            self.files.append(path)
            self.devices.append(sh("losetup", "-f", "--show", str(path)).strip())

    def create(self) -> None:
        sh("pvcreate", "-q", *self.devices)
        sh("vgcreate", "-q", self.name, *self.devices)

    def lvcreate(self, name: str, size_mib: int) -> None:
        # no device-mapper in this kernel: create without activating
        sh("lvcreate", "-q", "--driverloaded", "n", "-an", "-Zn", "-y", "-L", f"{size_mib}M",
           "-n", name, self.name)

    def detach(self, device: str) -> None:
        sh("losetup", "-d", device)
        self.detached.add(device)

    def cleanup(self) -> None:
        steps: list[list[str]] = []
        if self.detached:
            steps.append(["vgreduce", "-q", "--removemissing", "--force", self.name])
        steps += [["lvremove", "-q", "-f", "--driverloaded", "n", self.name],
                  ["vgremove", "-q", "-f", self.name]]
        steps += [["pvremove", "-q", "-ff", "-y", d] for d in self.devices
                  if d not in self.detached]
        steps += [["losetup", "-d", d] for d in self.devices if d not in self.detached]
        for step in steps:
            subprocess.run(step, capture_output=True, env=LVM_ENV, timeout=60, check=False)


@pytest.fixture
def loop_vg(tmp_path: Path) -> Iterator[LoopVg]:
    need_real_lvm()
    vg = LoopVg(tmp_path, [64])
    try:
        vg.create()
    except RuntimeError as err:
        vg.cleanup()
        pytest.skip(f"cannot build a loop-device VG here: {err}")
    try:
        yield vg
    finally:
        vg.cleanup()


@pytest.fixture
def broken_vg(tmp_path: Path) -> Iterator[LoopVg]:
    need_real_lvm()
    vg = LoopVg(tmp_path, [32, 32])
    try:
        vg.create()
        vg.detach(vg.devices[1])
    except RuntimeError as err:
        vg.cleanup()
        pytest.skip(f"cannot build a loop-device VG here: {err}")
    try:
        yield vg
    finally:
        vg.cleanup()


def real_config(vg: str) -> model.ConfigData:
    config = build_config()
    config.cluster.volume_group_name = vg
    disk = config.find_instance("plain0.example.com").disks[0]
    disk.logical_id = model.PlainId(vg=vg, lv="p0.disk0")
    return config


def test_real_lvm_plain(loop_vg: LoopVg) -> None:
    try:
        loop_vg.lvcreate("p0.disk0", 8)
        loop_vg.lvcreate("spare", 4)
    except RuntimeError as err:
        pytest.skip(f"lvcreate does not work here: {err}")
    config = real_config(loop_vg.name)
    collector = PlainCollector(context({}, config))
    assert collector.available()
    sample = collect_once(collector)
    assert not sample.failed, sample.data
    data: dict[str, Any] = sample.data
    assert data["status"] == {"code": 0, "message": ""}
    (vg,) = data["vgs"]  # the config's VG only
    assert vg["name"] == loop_vg.name and vg["pv_count"] == 1 and vg["missing_pvs"] == 0
    assert vg["total"] == 60 * 1024  # 64 MiB minus LVM's metadata, in 4 MiB extents
    assert vg["free"] == (60 - 12) * 1024 and vg["used"] == 12 * 1024 and vg["lv_count"] == 2
    assert (data["total"], data["free"], data["used"]) == (vg["total"], vg["free"], vg["used"])
    lvs = {lv["name"]: lv for lv in data["lvs"]}
    assert lvs["p0.disk0"]["size"] == 8 * 1024
    assert lvs["p0.disk0"]["instance"] == "plain0.example.com"
    assert lvs["spare"]["size"] == 4 * 1024 and lvs["spare"]["instance"] is None
    # lv (Ganeti's layout, bytes) agrees
    lv_data = LvCollector(context({}, config)).collect()
    mine = {d["name"]: d for d in lv_data if d["vg_name"] == loop_vg.name}
    assert mine["p0.disk0"]["size"] == 8 * 1024 * 1024
    assert mine["p0.disk0"]["instance"] == "plain0.example.com"


def test_real_lvm_missing_pv(broken_vg: LoopVg) -> None:
    collector = PlainCollector(context({}, real_config(broken_vg.name)))
    sample = collect_once(collector)
    assert not sample.failed, sample.data
    st = sample.data["status"]
    assert st["code"] == 4
    assert st["message"].startswith(
        f"backend pv unavailable: volume group {broken_vg.name}: 1 physical volume missing")
    (vg,) = sample.data["vgs"]
    assert vg["missing_pvs"] == 1 and vg["pv_count"] == 2 and "p" in vg["attr"]
