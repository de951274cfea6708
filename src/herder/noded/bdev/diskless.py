"""`diskless`: the template of instances without disks. There is no device to make or find:
a disk object of this type is refused in one line."""

from __future__ import annotations

from collections.abc import Sequence

from herder.core.diskobjects import Disk
from herder.noded.bdev.base import BlockDev, BlockDevError, Host

NO_DISKS = "diskless instances have no disks"


class Diskless(BlockDev):
    dev_type = "diskless"

    @classmethod
    def create(cls, disk: Disk, children: Sequence[BlockDev | None], host: Host, *,
               excl_stor: bool = False) -> Diskless:
        raise BlockDevError(NO_DISKS)

    def attach(self) -> bool:
        return False

    def remove(self) -> None:
        """Nothing exists, so nothing is removed."""

    def grow(self, amount: int, *, dryrun: bool, backingstore: bool, excl_stor: bool) -> None:
        raise BlockDevError(NO_DISKS)
