"""`blockdev`: an existing block device adopted as it is (logical id `["manual", path]`).

Only devices under `/dev/disk/` may be adopted (Ganeti's ADOPTABLE_BLOCKDEV_ROOT, checked on
the path as given) and the path must resolve to a device under `/dev/` (Ganeti's node check).
Create and remove do nothing to the device; it cannot be renamed or grown.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from herder.core.diskobjects import Disk
from herder.noded.bdev.base import BlockDev, BlockDevError, Host
from herder.noded.bdev.file import is_below_dir

MANUAL_DRIVER = "manual"


def check_adoptable(host: Host, path: str) -> None:
    """Raise unless `path` is under the /dev/disk root and resolves under /dev/."""
    root = str(host.dev_disk_root)
    if not os.path.isabs(path) or not is_below_dir(root, os.path.abspath(path)):
        raise BlockDevError(f"Device node {path} lies outside {root}/ and cannot be adopted")
    if not os.path.exists(path):
        raise BlockDevError(f"{path}: no such device on this node")
    real = os.path.realpath(path)
    if not real.startswith("/dev/"):
        raise BlockDevError(f"Full path '{real}' of {path} lies outside /dev")


def block_device_sizes(host: Host, paths: Sequence[str]) -> dict[str, int]:
    """MiB per existing block device among `paths` under /dev/ (Ganeti's bdev_sizes RPC)."""
    sizes: dict[str, int] = {}
    for path in paths:
        if not is_below_dir("/dev", path) and not is_below_dir(str(host.dev_disk_root), path):
            continue
        if host.block_device_numbers(path) is None:
            continue
        result = host.run(["blockdev", "--getsize64", path])
        if result.failed:
            continue
        sizes[path] = int(result.stdout) // (1024 * 1024)
    return sizes


class PersistentBlockDevice(BlockDev):
    dev_type = "blockdev"

    def __init__(self, disk: Disk, children: Sequence[BlockDev | None], host: Host) -> None:
        super().__init__(disk, children, host)
        lid = disk.path_id
        if lid.driver != MANUAL_DRIVER:
            raise BlockDevError(f"Got persistent block device of invalid type: {lid.driver}")
        check_adoptable(host, lid.path)
        self.dev_path = lid.path
        self.attach()

    @classmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> PersistentBlockDevice:
        if excl_stor:
            raise BlockDevError("adopted block devices cannot be used with exclusive storage")
        device = cls(disk, children, host)
        if not device.attached:
            raise BlockDevError(f"{device.dev_path} is not a block device on this node")
        return device

    def attach(self) -> bool:
        numbers = self.host.block_device_numbers(self.dev_path or "")
        self.attached = numbers is not None
        self.major, self.minor = numbers if numbers else (None, None)
        return self.attached

    def assemble(self) -> None:
        """Nothing to bring up, but the device must be there (Ganeti's does not look: a
        missing device would reach the hypervisor)."""
        if not self.attach():
            raise BlockDevError(f"{self.dev_path} is not a block device on this node")

    def remove(self) -> None:
        """The device stays: it was adopted, not made."""

    def rename(self, new_logical_id: Sequence[object]) -> None:
        raise BlockDevError("Rename is not supported for adopted block devices")

    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        raise BlockDevError("Grow is not supported for adopted block devices")
