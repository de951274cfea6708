"""Copying a disk between two real node daemons (`noded.disk_transfer`, what `instance move`
uses): the target prepares an import (one token, one use), the source streams its device to
the target's `/import/<token>`, the bytes and checksum are confirmed; a wrong or used token
is refused and nothing is written."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import pytest
import xxhash

from herder.core.rpcdefs import disk_calls
from herder.noded import rpc as noded_rpc
from herder.noded.node_disks import DiskFailure
from tests.noded.noded_fixture import Running, running_noded

MIB = 1 << 20


def file_disk(path: Path, size: int = 4) -> dict[str, Any]:
    return {"dev_type": "file", "logical_id": ["loop", str(path)], "size": size,
            "params": {}, "iv_name": "disk/0", "uuid": "d-1", "mode": "rw"}


def allow(root: Path, *directories: Path) -> None:
    """The node's allowed-paths file (under its file root)."""
    paths = root / "etc/ganeti/file-storage-paths"
    paths.parent.mkdir(parents=True, exist_ok=True)
    paths.write_text("".join(f"{d}\n" for d in directories))


def test_a_disk_is_copied_between_two_node_daemons(tmp_path: Path) -> None:
    store_a, store_b = tmp_path / "fs-a" / "inst1", tmp_path / "fs-b" / "inst1"
    with running_noded(tmp_path / "a", "node1") as source, \
            running_noded(tmp_path / "b", "node2") as target:
        allow(tmp_path / "a" / "root", tmp_path / "fs-a")
        allow(tmp_path / "b" / "root", tmp_path / "fs-b")
        disk_a, disk_b = file_disk(store_a / "disk0"), file_disk(store_b / "disk0")
        for node, disk, directory in ((source, disk_a, store_a), (target, disk_b, store_b)):
            noded_rpc.dispatch(node.daemon, "file_storage_dir_create",
                               {"file_storage_dir": str(directory)})
            noded_rpc.dispatch(node.daemon, "blockdev_create", {
                "disk": disk, "size": 4, "owner": "inst1", "on_primary": True, "info": ""})
        data = random.Random(7).randbytes(4 * MIB)
        (store_a / "disk0").write_bytes(data)
        prepared = noded_rpc.dispatch(target.daemon, "blockdev_import_prepare",
                                      {"disk": disk_b, "instance": "inst1"})
        assert isinstance(prepared, disk_calls.ImportToken)
        port = int(target.url.rsplit(":", 1)[1])
        sent = noded_rpc.dispatch(source.daemon, "blockdev_export", {
            "disk": disk_a, "instance": "inst1", "token": prepared.token,
            "target": {"address": "127.0.0.1", "port": port}})
        assert sent == disk_calls.Transferred(
            bytes=4 * MIB, checksum=f"xxh3_128:{xxhash.xxh3_128_hexdigest(data)}")
        assert (store_b / "disk0").read_bytes() == data
        # the token was for one import: a second stream is refused
        with pytest.raises(DiskFailure, match="refused the stream \\(403\\)"):
            noded_rpc.dispatch(source.daemon, "blockdev_export", {
                "disk": disk_a, "instance": "inst1", "token": prepared.token,
                "target": {"address": "127.0.0.1", "port": port}})
        refused = httpx.post(f"{target.url}/import/not-a-token", content=b"x" * 10)
        assert refused.status_code == 403
        assert (store_b / "disk0").read_bytes() == data


def one_mib_import(tmp_path: Path, target: Running) -> str:
    """A 1 MiB file disk made on `target` and an import into it prepared: its token."""
    store = tmp_path / "fs" / "inst1"
    allow(tmp_path / "b" / "root", tmp_path / "fs")
    disk = file_disk(store / "disk0", size=1)
    noded_rpc.dispatch(target.daemon, "file_storage_dir_create",
                       {"file_storage_dir": str(store)})
    noded_rpc.dispatch(target.daemon, "blockdev_create",
                       {"disk": disk, "size": 1, "owner": "inst1"})
    prepared = noded_rpc.dispatch(target.daemon, "blockdev_import_prepare", {"disk": disk})
    assert isinstance(prepared, disk_calls.ImportToken)
    return prepared.token


def test_a_stream_larger_than_the_disk_is_refused(tmp_path: Path) -> None:
    with running_noded(tmp_path / "b", "node2") as target:
        token = one_mib_import(tmp_path, target)
        answer = httpx.post(f"{target.url}/import/{token}", content=b"\1" * (2 * MIB),
                            timeout=30)
        assert answer.status_code == 500 and "larger than the disk" in answer.text


def test_a_failing_export_command_fails_the_stream_in_one_line(tmp_path: Path) -> None:
    """A disk read through its export command (a userspace rbd image: `rbd export ... -`)
    whose command fails after some bytes: the stream fails with the command's last line,
    even though the target took what came."""
    from herder.noded import disk_transfer, exports

    with running_noded(tmp_path / "a", "node1") as source, \
            running_noded(tmp_path / "b", "node2") as target:
        token = one_mib_import(tmp_path, target)
        url, context = disk_transfer.import_url(
            source.daemon.trust, disk_calls.ExportTarget(
                address="127.0.0.1", port=int(target.url.rsplit(":", 1)[1])), token)
        command = ["sh", "-c", "head -c 4096 /dev/zero; echo 'rbd: export error: EIO' >&2; "
                   "echo 'rbd: export failed' >&2; exit 5"]
        with pytest.raises(disk_transfer.TransferError) as failed:
            exports.send_command_output(source.daemon, command, None, 0, url, context)
        assert str(failed.value) == "sh -c failed (exit code 5): rbd: export failed"
