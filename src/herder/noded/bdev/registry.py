"""Ganeti's `dev_type` -> the module's device class (one module per device type)."""

from __future__ import annotations

from herder.noded.bdev.base import BlockDev, BlockDevError
from herder.noded.bdev.blockdev import PersistentBlockDevice
from herder.noded.bdev.diskless import Diskless
from herder.noded.bdev.drbd import Drbd8
from herder.noded.bdev.ext import ExtStorageDevice
from herder.noded.bdev.file import FileStorage, SharedFileStorage
from herder.noded.bdev.gluster import GlusterStorage
from herder.noded.bdev.plain import LogicalVolume
from herder.noded.bdev.rbd import RadosBlockDevice

DEVICE_TYPES: dict[str, type[BlockDev]] = {
    cls.dev_type: cls
    for cls in (LogicalVolume, Drbd8, FileStorage, SharedFileStorage, PersistentBlockDevice,
                ExtStorageDevice, RadosBlockDevice, GlusterStorage, Diskless)
}


def device_class(dev_type: str) -> type[BlockDev]:
    try:
        return DEVICE_TYPES[dev_type]
    except KeyError:
        raise BlockDevError(f"Invalid block device type '{dev_type}'") from None
