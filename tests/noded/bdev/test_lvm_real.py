"""`plain` for real on LVM metadata: a VG on a loop device, activation off (no device-mapper
here), the module's create/rename/grow/set_info/remove run unchanged and `lvs` shows the
result. On such a node an LV has no device node, so create with the real check refuses in one
line and leaves nothing; `drbd` refuses the same way before touching anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from herder.core.diskobjects import decode_disk
from herder.noded.bdev import operations
from herder.noded.bdev.base import NO_DEVICE_MAPPER, BlockDevError, Host, SubprocessRunner
from herder.noded.bdev.drbd import Drbd8
from herder.noded.bdev.plain import LogicalVolume, vg_info, volume_groups
from tests.noded.bdev.harness import drbd_disk, plain_disk

pytestmark = pytest.mark.slow

LVM_CONF = """\
devices {{
    filter = [ "a|^{loop}$|", "r|.*|" ]
    global_filter = [ "a|^{loop}$|", "r|.*|" ]
    obtain_device_list_from_udev = 0
    use_devicesfile = 0
}}
global {{
    activation = 0
}}
activation {{
    udev_sync = 0
    udev_rules = 0
    monitoring = 0
}}
backup {{
    backup = 0
    archive = 0
}}
"""


@dataclass
class LoopVg:
    vg: str
    env: dict[str, str]

    def lvs(self) -> dict[str, tuple[int, str]]:
        """LV name -> (size MiB, tags) as `lvs` reports them."""
        out = subprocess.run(["lvs", "--noheadings", "--units=m", "--nosuffix",
                              "--separator=|", "-olv_name,lv_size,lv_tags", self.vg],
                             env={**os.environ, **self.env}, capture_output=True, text=True,
                             check=True).stdout
        rows = [line.strip().split("|") for line in out.splitlines() if line.strip()]
        return {name: (int(float(size)), tags) for name, size, tags in rows}

    def host(self, *, metadata_only: bool) -> Host:
        return Host(runner=SubprocessRunner(extra_env=self.env),
                    lv_device_nodes_required=not metadata_only)


@pytest.fixture
def loop_vg(tmp_path: Path) -> Iterator[LoopVg]:
    if os.geteuid() != 0 or not (shutil.which("losetup") and shutil.which("vgcreate")):
        pytest.skip("needs root, losetup and LVM")
    image = tmp_path / "pv.img"
    with image.open("wb") as handle:
        handle.truncate(256 * 1024 * 1024)
    attach = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True,
                            text=True, check=False)
    if attach.returncode != 0:
        pytest.skip(f"no loop device: {attach.stderr.strip()}")
    loop = attach.stdout.strip()
    conf_dir = tmp_path / "lvm"
    conf_dir.mkdir()
    (conf_dir / "lvm.conf").write_text(LVM_CONF.format(loop=loop))
    env = {"LVM_SYSTEM_DIR": str(conf_dir), "LVM_SUPPRESS_FD_WARNINGS": "1"}
    vg = f"herdertest{uuid.uuid4().hex[:8]}"
    full_env = {**os.environ, **env}
    try:
        made = subprocess.run(["vgcreate", vg, loop], env=full_env, capture_output=True,
                              text=True, check=False)
        if made.returncode != 0:
            pytest.skip(f"vgcreate failed: {made.stderr.strip()}")
        yield LoopVg(vg, env)
    finally:
        subprocess.run(["vgremove", "-f", vg], env=full_env, capture_output=True, check=False)
        subprocess.run(["losetup", "-d", loop], capture_output=True, check=False)


def test_plain_lifecycle_on_lvm_metadata(loop_vg: LoopVg) -> None:
    host = loop_vg.host(metadata_only=True)
    disk = decode_disk(plain_disk("inst1.disk0", 64, vg=loop_vg.vg))
    device = LogicalVolume.create(disk, [], host)
    assert device.attached and device.dev_path == f"/dev/{loop_vg.vg}/inst1.disk0"
    assert loop_vg.lvs() == {"inst1.disk0": (64, "")}

    device.set_info("originstname+inst1.example.com")
    device.set_info("originstname+inst1-renamed")  # replaces the old tag
    assert loop_vg.lvs()["inst1.disk0"][1] == "originstname+inst1-renamed"

    device.grow(32, dryrun=True, backingstore=True, excl_stor=False)
    assert loop_vg.lvs()["inst1.disk0"][0] == 64
    device.grow(32, dryrun=False, backingstore=True, excl_stor=False)
    assert loop_vg.lvs()["inst1.disk0"][0] == 96

    device.rename([loop_vg.vg, "inst1.disk0-renamed"])
    assert set(loop_vg.lvs()) == {"inst1.disk0-renamed"}

    free, size, name = vg_info(host, [loop_vg.vg])[0]  # type: ignore[index]
    assert name == loop_vg.vg and size - free == 96

    renamed = LogicalVolume(disk.with_logical_id([loop_vg.vg, "inst1.disk0-renamed"]), [], host)
    assert renamed.attached
    renamed.remove()
    assert loop_vg.lvs() == {}
    # already gone: the RPC finds nothing and succeeds
    operations.blockdev_remove(host, renamed.disk)


def test_vg_list_names_the_vg_with_its_size(loop_vg: LoopVg) -> None:
    """Ganeti's vg_list (replace-disks' volume group check): VG name -> whole MiB."""
    groups = volume_groups(loop_vg.host(metadata_only=True))
    assert list(groups) == [loop_vg.vg]  # the LVM filter shows this loop device only
    assert isinstance(groups[loop_vg.vg], int) and 240 <= groups[loop_vg.vg] <= 256


def test_plain_bad_inputs_leave_nothing(loop_vg: LoopVg) -> None:
    host = loop_vg.host(metadata_only=True)
    with pytest.raises(BlockDevError) as too_big:
        LogicalVolume.create(decode_disk(plain_disk("big", 4096, vg=loop_vg.vg)), [], host)
    assert str(too_big.value).startswith(f"not enough free space in volume group"
                                         f" '{loop_vg.vg}': 4096 MiB required")
    with pytest.raises(BlockDevError, match="volume group 'nosuchvg' not found"):
        LogicalVolume.create(decode_disk(plain_disk("x", 8, vg="nosuchvg")), [], host)
    with pytest.raises(BlockDevError, match="Invalid LVM name 'snapshot'"):
        LogicalVolume.create(decode_disk(plain_disk("snapshot", 8, vg=loop_vg.vg)), [], host)
    assert loop_vg.lvs() == {}


def test_no_device_mapper_refused_and_cleaned_up(loop_vg: LoopVg) -> None:
    host = loop_vg.host(metadata_only=False)
    disk = decode_disk(plain_disk("inst1.disk0", 16, vg=loop_vg.vg))
    with pytest.raises(BlockDevError) as refused:
        LogicalVolume.create(disk, [], host)
    assert str(refused.value) == NO_DEVICE_MAPPER
    assert loop_vg.lvs() == {}  # the LV made for the check was removed again


def test_drbd_refused_without_device_nodes(loop_vg: LoopVg) -> None:
    """DRBD over LVs that exist only in metadata: refused before any DRBD or dd command."""
    metadata_only = loop_vg.host(metadata_only=True)
    raw = drbd_disk(size=16)
    raw["children"] = [plain_disk("inst1.disk0_data", 16, vg=loop_vg.vg),
                       plain_disk("inst1.disk0_meta", 128, vg=loop_vg.vg)]
    disk = decode_disk(raw)
    children = [LogicalVolume.create(child, [], metadata_only) for child in disk.children]
    ran: list[list[str]] = []
    real = loop_vg.host(metadata_only=False)
    runner = real.runner

    def recording(argv: list[str], **kwargs: object) -> object:
        ran.append(list(argv))
        return runner(argv, **kwargs)  # type: ignore[arg-type]

    real.runner = recording  # type: ignore[assignment]
    with pytest.raises(BlockDevError) as refused:
        Drbd8.create(disk, children, real)
    assert str(refused.value) == NO_DEVICE_MAPPER
    assert ran == []
    assert set(loop_vg.lvs()) == {"inst1.disk0_data", "inst1.disk0_meta"}
