"""The device types that can hold data on this machine, for real: a pattern written to the
device survives grow, rename (or their clean refusal) and shutdown/assemble, and reads back.

file and sharedfile: sparse files in per-instance directories of a file-storage root;
blockdev: a loop device adopted through a stand-in for /dev/disk; ext: the `sharedimg`
provider (src/herder/sim/extstorage/sharedimg: images in a shared directory, loop-attached).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from herder.core.diskobjects import Disk, decode_disk
from herder.noded.bdev import file as file_storage
from herder.noded.bdev import operations
from herder.noded.bdev.base import BlockDevError, Host, SubprocessRunner

EXTSTORAGE = Path(__file__).resolve().parents[3] / "src/herder/sim/extstorage"
PATTERN = bytes(range(256)) * 16  # 4 KiB
OFFSET = 1024 * 1024 + 512


def write_pattern(path: str) -> None:
    with open(path, "r+b") as device:
        device.seek(OFFSET)
        device.write(PATTERN)
        device.flush()
        os.fsync(device.fileno())


def read_pattern(path: str) -> bytes:
    with open(path, "rb") as device:
        device.seek(OFFSET)
        return device.read(len(PATTERN))


def size_of(path: str) -> int:
    with open(path, "rb") as device:
        return device.seek(0, os.SEEK_END)


def needs_loop_devices() -> None:
    if os.geteuid() != 0 or not shutil.which("losetup"):
        pytest.skip("needs root and losetup")


def storage_host(tmp_path: Path, *roots: Path, extstorage: Path = EXTSTORAGE) -> Host:
    paths_file = tmp_path / "file-storage-paths"
    paths_file.write_text("# the cluster's file storage directories\n"
                          + "".join(f"{root}\n" for root in roots))
    # sharedimg records this node's loop devices in a run directory of the test's own
    runner = SubprocessRunner(extra_env={"SHAREDIMG_RUN_DIR": str(tmp_path / "run")})
    return Host(runner=runner, file_storage_paths_file=paths_file, es_search_path=(extstorage,),
                dev_disk_root=tmp_path / "dev-disk", ext_timeout=30.0)


def file_disk(dev_type: str, path: Path, size: int = 4) -> Disk:
    return decode_disk({"dev_type": dev_type, "logical_id": ["loop", str(path)], "size": size,
                        "params": {}, "iv_name": "disk/0", "uuid": "u-1", "mode": "rw"})


@pytest.mark.parametrize("dev_type", ["file", "sharedfile"])
def test_file_types_keep_data(tmp_path: Path, dev_type: str) -> None:
    root = tmp_path / ("shared-file-storage" if dev_type == "sharedfile" else "file-storage")
    root.mkdir()
    host = storage_host(tmp_path, root)
    instance_dir = root / "inst1.example.com"
    file_storage.create_storage_dir(host, str(instance_dir))
    disk = file_disk(dev_type, instance_dir / "disk0.img")

    operations.blockdev_create(host, disk, "inst1", True, "originstname+inst1")
    assembled = operations.blockdev_assemble(host, disk, True)
    assert isinstance(assembled, operations.Assembled)
    path = assembled.dev_path
    assert path == str(instance_dir / "disk0.img") and size_of(path) == 4 * 1024 * 1024
    write_pattern(path)

    operations.blockdev_grow(host, disk, 4, False, True)
    assert size_of(path) == 8 * 1024 * 1024
    new_path = instance_dir / "disk0-renamed.img"
    operations.blockdev_rename(host, [(disk, ["loop", str(new_path)])])
    renamed = disk.with_logical_id(["loop", str(new_path)])
    status = operations.blockdev_find(host, renamed)
    assert status is not None and status.dev_path == str(new_path)
    assert read_pattern(str(new_path)) == PATTERN

    with pytest.raises(BlockDevError, match="Cannot remove file storage directory"):
        file_storage.remove_storage_dir(host, str(instance_dir))  # not empty yet
    operations.blockdev_remove(host, renamed)
    file_storage.remove_storage_dir(host, str(instance_dir))
    assert list(root.iterdir()) == []


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[str]:
    needs_loop_devices()
    image = tmp_path / "adopt.img"
    with image.open("wb") as handle:
        handle.truncate(8 * 1024 * 1024)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True,
                          text=True, check=True).stdout.strip()
    try:
        yield loop
    finally:
        subprocess.run(["losetup", "-d", loop], check=False)


def test_blockdev_adopts_and_keeps_data(tmp_path: Path, loop_device: str) -> None:
    host = storage_host(tmp_path)
    link = tmp_path / "dev-disk" / "by-id" / "herder-test-disk"
    link.parent.mkdir(parents=True)
    link.symlink_to(loop_device)
    disk = decode_disk({"dev_type": "blockdev", "logical_id": ["manual", str(link)],
                        "size": 8, "params": {}, "iv_name": "disk/0", "uuid": "u-2"})
    operations.blockdev_create(host, disk, "inst1", True, "originstname+inst1")
    assembled = operations.blockdev_assemble(host, disk, True)
    assert isinstance(assembled, operations.Assembled) and assembled.dev_path == str(link)
    write_pattern(str(link))
    with pytest.raises(BlockDevError, match="Grow is not supported"):
        operations.blockdev_grow(host, disk, 4, False, True)
    with pytest.raises(BlockDevError, match="Rename is not supported"):
        operations.blockdev_rename(host, [(disk, ["manual", str(link) + "-new"])])
    status = operations.blockdev_find(host, disk)
    assert status is not None and status.major == os.major(os.stat(loop_device).st_rdev)
    operations.blockdev_remove(host, disk)  # adopted: the device stays
    assert read_pattern(loop_device) == PATTERN


def ext_disk(images: Path, name: str = "vol-inst1-0", size: int = 4) -> Disk:
    return decode_disk({"dev_type": "ext", "logical_id": ["sharedimg", name], "size": size,
                        "params": {"access": "kernelspace", "dir": str(images)},
                        "iv_name": "disk/0", "name": "disk0", "uuid": "u-3", "mode": "rw"})


def loops_of(image: Path) -> list[str]:
    out = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                         capture_output=True, text=True, check=False).stdout
    return out.split()


@pytest.fixture
def images(tmp_path: Path) -> Iterator[Path]:
    """The sharedimg provider's image directory; every loop device left on its images is
    detached at the end."""
    needs_loop_devices()
    directory = tmp_path / "images"
    directory.mkdir()
    yield directory
    for image in directory.glob("*.img"):
        for loop in loops_of(image):
            subprocess.run(["losetup", "-d", loop], check=False)


def test_ext_sharedimg_keeps_data(tmp_path: Path, images: Path) -> None:
    host = storage_host(tmp_path)
    disk = ext_disk(images)
    image = images / "vol-inst1-0.img"
    operations.blockdev_create(host, disk, "inst1", True, "originstname+inst1")
    assert (images / "vol-inst1-0.img.meta").read_text() == "originstname+inst1\n"
    assembled = operations.blockdev_assemble(host, disk, True)
    assert isinstance(assembled, operations.Assembled) and assembled.dev_path
    device = assembled.dev_path
    assert loops_of(image) == [device]
    write_pattern(device)

    operations.blockdev_grow(host, disk, 4, False, True)
    assert image.stat().st_size == 8 * 1024 * 1024 and size_of(device) == 8 * 1024 * 1024
    operations.blockdev_rename(host, [(disk, ["sharedimg", "vol-inst1-0"])])
    operations.blockdev_shutdown(host, disk)  # detaches: as on a failover's old node
    assert loops_of(image) == []
    again = operations.blockdev_assemble(host, disk, True)
    assert isinstance(again, operations.Assembled) and again.dev_path
    assert read_pattern(again.dev_path) == PATTERN

    # another node attaches a loop device of its own, and detaches only that one
    (tmp_path / "other").mkdir()
    other = storage_host(tmp_path / "other")
    elsewhere = operations.blockdev_assemble(other, disk, True)
    assert isinstance(elsewhere, operations.Assembled)
    assert elsewhere.dev_path and elsewhere.dev_path != again.dev_path
    assert read_pattern(elsewhere.dev_path) == PATTERN
    operations.blockdev_shutdown(other, disk)
    assert loops_of(image) == [again.dev_path]

    operations.blockdev_remove(host, disk)
    assert not image.exists() and loops_of(image) == []


def test_ext_sharedimg_snapshot_and_rollback(tmp_path: Path, images: Path) -> None:
    """An ext disk of the sharedimg provider: a snapshot (Ganeti's blockdev_snapshot), more
    written, then rolled back (herder's `rollback` script): the data is the snapshot's again;
    a rollback while the volume is attached, to a snapshot that does not exist, or of a
    provider without the script is refused in one line and changes nothing."""
    host = storage_host(tmp_path)
    disk = ext_disk(images)
    operations.blockdev_create(host, disk, "inst1", True, "originstname+inst1")
    assembled = operations.blockdev_assemble(host, disk, True)
    assert isinstance(assembled, operations.Assembled) and assembled.dev_path
    write_pattern(assembled.dev_path)
    assert operations.blockdev_snapshot(host, disk, "vol-inst1-0.snap1", None) == [
        "sharedimg", "vol-inst1-0.snap1"]
    with open(assembled.dev_path, "r+b") as device:  # written after the snapshot
        device.seek(OFFSET)
        device.write(b"\xff" * len(PATTERN))
        os.fsync(device.fileno())
    with pytest.raises(BlockDevError, match="is attached") as attached:
        operations.blockdev_snapshot_rollback(host, disk, "vol-inst1-0.snap1")
    assert "\n" not in str(attached.value)
    assert read_pattern(assembled.dev_path) == b"\xff" * len(PATTERN)
    operations.blockdev_shutdown(host, disk)
    with pytest.raises(BlockDevError, match="no snapshot nope"):
        operations.blockdev_snapshot_rollback(host, disk, "nope")
    operations.blockdev_snapshot_rollback(host, disk, "vol-inst1-0.snap1")
    again = operations.blockdev_assemble(host, disk, True)
    assert isinstance(again, operations.Assembled) and again.dev_path
    assert read_pattern(again.dev_path) == PATTERN
    assert (images / "vol-inst1-0.snap1.img").exists()  # the snapshot stays
    operations.blockdev_remove(host, disk)
    snapshot = ext_disk(images, "vol-inst1-0.snap1")  # a snapshot is a volume of its own
    operations.blockdev_remove(host, snapshot)
    assert sorted(p.name for p in images.iterdir()) == []

    # a provider without the script: refused before anything runs
    shutil.copytree(EXTSTORAGE / "sharedimg", tmp_path / "ext" / "noroll")
    (tmp_path / "ext" / "noroll" / "rollback").unlink()
    plain_host = storage_host(tmp_path, extstorage=tmp_path / "ext")
    other = decode_disk({**msgspec.to_builtins(disk), "logical_id": ["noroll", "vol-x"]})
    with pytest.raises(BlockDevError, match="noroll cannot roll back .* no rollback script"):
        operations.blockdev_snapshot_rollback(plain_host, other, "vol-inst1-0.snap1")
    assert sorted(p.name for p in images.iterdir()) == []


def test_rollback_of_other_types_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "file-storage"
    host = storage_host(tmp_path, root)
    disk = file_disk("file", root / "inst1" / "disk0")
    with pytest.raises(BlockDevError, match="not supported for file disks"):
        operations.blockdev_snapshot_rollback(host, disk, "snap")


@pytest.mark.parametrize("name", ["", "../x", ".hidden", "-opt", "a b", "a/b"])
def test_bad_snapshot_names_are_refused_at_the_nodes_door(tmp_path: Path, name: str) -> None:
    from herder.noded import rpc as noded_rpc

    disk = {"dev_type": "ext", "logical_id": ["sharedimg", "vol-inst1-0"], "size": 4}
    for method in ("blockdev_snapshot", "blockdev_snapshot_rollback"):
        with pytest.raises(noded_rpc.BadArguments, match="snapshot name"):
            noded_rpc.decode(method, {"disk": disk, "snap_name": name})
