"""Bad input and failing providers: one clear line, and nothing half-created."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from herder.core.diskobjects import DiskObjectError, decode_disk
from herder.noded.bdev import file as file_storage
from herder.noded.bdev import operations
from herder.noded.bdev.base import BlockDevError, Host
from herder.noded.bdev.blockdev import PersistentBlockDevice
from herder.noded.bdev.ext import ExtStorageDevice, find_provider, verify_parameters
from tests.noded.bdev.harness import drbd_disk
from tests.noded.bdev.test_real_data import EXTSTORAGE, ext_disk, file_disk, storage_host


def one_line(err: pytest.ExceptionInfo[BlockDevError]) -> str:
    message = str(err.value)
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize(("raw", "why"), [
    ({"dev_type": "drbd", "logical_id": ["a", "b", 1, 2, 3], "size": 1}, "6 items"),
    ({"dev_type": "plain", "logical_id": ["xenvg"], "size": 1}, "two strings"),
    ({"dev_type": "plain", "logical_id": ["xenvg", "lv"], "size": "1024"}, "size"),
    ({"dev_type": "plain", "logical_id": ["xenvg", "lv"], "size": -1}, "negative"),
    ({"dev_type": "lvm", "logical_id": ["xenvg", "lv"], "size": 1}, "dev_type"),
    ({"dev_type": "drbd", "logical_id": ["a", "b", "port", 2, 3, "s"], "size": 1}, "integer"),
])
def test_malformed_disk_objects(raw: dict[str, object], why: str) -> None:
    with pytest.raises(DiskObjectError) as err:
        decode_disk(raw)
    message = str(err.value)
    assert message and "\n" not in message and why in message


def test_ganeti_disk_object_decodes() -> None:
    disk = decode_disk({**drbd_disk(), "nodes": ["n1", "n2"], "serial_no": 3, "ctime": 1.5})
    assert disk.drbd_id.secret == "shared_secret_123"
    assert (disk.dynamic_params.local_minor, disk.dynamic_params.remote_ip) == (0, "192.0.2.2")
    assert [child.plain_id.lv for child in disk.children] == ["inst.disk0_data",
                                                             "inst.disk0_meta"]


def test_file_paths_outside_the_allowed_ones(tmp_path: Path) -> None:
    root = tmp_path / "file-storage"
    root.mkdir()
    host = storage_host(tmp_path, root)
    outside = tmp_path / "elsewhere" / "disk0"
    for path, why in ((outside, "is not acceptable for file storage"),
                      (Path("/etc/herder/disk0"), "forbidden prefix"),
                      (root / ".." / "escape" / "disk0", "is not acceptable")):
        with pytest.raises(BlockDevError) as err:
            operations.blockdev_create(host, file_disk("file", path), "i", True, "")
        assert why in one_line(err)
    with pytest.raises(BlockDevError, match="is not acceptable"):
        file_storage.create_storage_dir(host, str(tmp_path / "elsewhere"))
    assert not (tmp_path / "elsewhere").exists()
    no_paths = Host(file_storage_paths_file=tmp_path / "missing")
    with pytest.raises(BlockDevError) as err:
        file_storage.create_storage_dir(no_paths, str(root / "inst"))
    assert "No paths are valid" in one_line(err)


def test_file_missing_instance_directory(tmp_path: Path) -> None:
    root = tmp_path / "file-storage"
    root.mkdir()
    host = storage_host(tmp_path, root)
    with pytest.raises(BlockDevError) as err:
        operations.blockdev_create(host, file_disk("file", root / "inst" / "d0"), "i", True, "")
    assert "can't create" in one_line(err)
    assert list(root.iterdir()) == []


def test_blockdev_outside_dev_disk(tmp_path: Path) -> None:
    host = storage_host(tmp_path)
    (tmp_path / "dev-disk").mkdir()

    def adopt(path: str) -> None:
        disk = decode_disk({"dev_type": "blockdev", "logical_id": ["manual", path], "size": 1})
        PersistentBlockDevice.create(disk, [], host)

    with pytest.raises(BlockDevError) as err:
        adopt("/dev/null")
    assert "lies outside" in one_line(err)
    with pytest.raises(BlockDevError, match="no such device on this node"):
        adopt(str(tmp_path / "dev-disk" / "by-id" / "missing"))
    real = Host()  # the real rule: /dev/disk/ itself
    with pytest.raises(BlockDevError, match="lies outside /dev/disk/"):
        PersistentBlockDevice.create(
            decode_disk({"dev_type": "blockdev", "logical_id": ["manual", "/dev/loop0"],
                         "size": 1}), [], real)


def test_diskless_has_no_disks() -> None:
    disk = decode_disk({"dev_type": "diskless", "logical_id": [], "size": 0})
    with pytest.raises(BlockDevError, match="diskless instances have no disks"):
        operations.blockdev_create(Host(), disk, "i", True, "")
    assert operations.blockdev_find(Host(), disk) is None


def test_unknown_provider(tmp_path: Path) -> None:
    host = storage_host(tmp_path)
    for name, why in (("nosuchprovider", "not found in search path"),
                      ("../etc", "Invalid ExtStorage provider name")):
        with pytest.raises(BlockDevError) as err:
            find_provider(host, name)
        assert why in one_line(err)


def broken_provider(tmp_path: Path, create_body: str) -> Path:
    """sharedimg with another `create`, in its own search path."""
    search = tmp_path / "extstorage"
    shutil.copytree(EXTSTORAGE / "sharedimg", search / "sharedimg")
    create = search / "sharedimg" / "create"
    create.write_text("#!/bin/sh\n. \"$(dirname \"$0\")/common.sh\"\n" + create_body)
    create.chmod(0o755)
    return search


def test_failing_provider_leaves_nothing(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    search = broken_provider(tmp_path, 'truncate -s "${VOL_SIZE}M" "$IMAGE"\n'
                                       'echo "iSCSI target unreachable" >&2\nexit 3\n')
    host = Host(es_search_path=(search,), ext_timeout=30.0)
    with pytest.raises(BlockDevError) as err:
        ExtStorageDevice.create(ext_disk(images), [], host)
    message = one_line(err)
    assert "create of vol-inst1-0 failed" in message
    assert "iSCSI target unreachable" in message
    assert list(images.iterdir()) == []  # the provider's remove took its half-made image


def test_hanging_provider_is_killed_and_leaves_nothing(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    pid_file = tmp_path / "create.pid"
    search = broken_provider(tmp_path, f'truncate -s "${{VOL_SIZE}}M" "$IMAGE"\n'
                                       f'echo $$ > {pid_file}\nsleep 600\n')
    host = Host(es_search_path=(search,), ext_timeout=2.0)
    started = time.monotonic()
    with pytest.raises(BlockDevError) as err:
        ExtStorageDevice.create(ext_disk(images), [], host)
    assert time.monotonic() - started < 60
    assert "timed out after 2 s" in one_line(err)
    assert list(images.iterdir()) == []
    script_pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(script_pid, 0)


def test_provider_parameters_are_checked(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    host = storage_host(tmp_path)
    verify_parameters(host, "sharedimg", {"dir": str(images), "access": "kernelspace"})
    with pytest.raises(BlockDevError, match="does not support the parameter"):
        verify_parameters(host, "sharedimg", {"pool": "x"})
    with pytest.raises(BlockDevError, match="verify of  failed"):
        verify_parameters(host, "sharedimg", {"dir": str(tmp_path / "nothing")})


def test_provider_without_executable_script(tmp_path: Path) -> None:
    search = broken_provider(tmp_path, "exit 0\n")
    (search / "sharedimg" / "grow").chmod(0o644)
    with pytest.raises(BlockDevError) as err:
        find_provider(Host(es_search_path=(search,)), "sharedimg")
    assert "'grow'" in one_line(err) and "not executable" in str(err.value)
