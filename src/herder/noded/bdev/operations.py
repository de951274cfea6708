"""The node RPCs' block-device work, per Ganeti 3.0's backend (`Blockdev*`, `Drbd*`).

Each function takes the `Host` and the disks the RPC's arguments carry (`core.diskobjects`) and
walks the disk tree as Ganeti's backend does: children first, DRBD may run with missing
children, devices are found by building them (which attaches). Errors are BlockDevError with
one line. Returned values are plain data for the RPC answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from herder.core.diskobjects import BlockDevStatus, Disk
from herder.noded.bdev import ext, rbd
from herder.noded.bdev.base import (
    DD_BLOCK_SIZE,
    BlockDev,
    BlockDevError,
    Host,
    ImportSink,
    retry,
)
from herder.noded.bdev.drbd import Drbd8
from herder.noded.bdev.registry import device_class

log = logging.getLogger(__name__)

DISK_REMOVE_RETRY_INTERVAL = 3.0  # Ganeti's constants
DISK_REMOVE_RETRY_TIMEOUT = 30.0


def find_device(host: Host, disk: Disk, children: Sequence[BlockDev | None]) -> BlockDev | None:
    """The device if it exists and is assembled (Ganeti's bdev.FindDevice)."""
    device = device_class(disk.dev_type)(disk, children, host)
    return device if device.attached else None


def recursive_find(host: Host, disk: Disk) -> BlockDev | None:
    children = [recursive_find(host, child) for child in disk.children]
    return find_device(host, disk, children)


def recursive_assemble(host: Host, disk: Disk, as_primary: bool) -> BlockDev | bool:
    """Assemble the children, then the disk (on a secondary only what must run there)."""
    children: list[BlockDev | None] = []
    if disk.children:
        needed = disk.children_needed()
        max_missing = 0 if needed == -1 else len(disk.children) - needed
        for child in disk.children:
            try:
                device = recursive_assemble(host, child, as_primary)
            except BlockDevError as err:
                if children.count(None) >= max_missing:
                    raise
                log.error("error in child activation (continuing): %s", err)
                device = None
            children.append(device if isinstance(device, BlockDev) else None)
    if as_primary or disk.assemble_on_secondary():
        device = device_class(disk.dev_type)(disk, children, host)
        device.assemble()
        if as_primary or disk.open_on_secondary():
            device.open()
        return device
    return True


def blockdev_create(host: Host, disk: Disk, owner: str, on_primary: bool, info: str,
                    excl_stor: bool = False) -> list[str | int]:
    """Make the disk's device (its children must exist); returns its logical id."""
    children: list[BlockDev | None] = []
    for child in disk.children:
        try:
            device = recursive_assemble(host, child, on_primary)
        except BlockDevError as err:
            raise BlockDevError(f"Can't assemble device {child.iv_name or child.logical_id}:"
                                f" {err}") from None
        if on_primary or disk.assemble_on_secondary():
            assert isinstance(device, BlockDev)
            device.open()
        children.append(device if isinstance(device, BlockDev) else None)
    device = device_class(disk.dev_type).create(disk, children, host, excl_stor=excl_stor)
    if on_primary or disk.assemble_on_secondary():
        device.assemble()
        if on_primary or disk.open_on_secondary():
            device.open(force=True)
    device.set_info(info)
    return list(disk.logical_id)


def blockdev_remove(host: Host, disk: Disk) -> None:
    """Remove the device and then its children; a missing device is not an error."""
    messages: list[str] = []
    try:
        device = recursive_find(host, disk)
    except BlockDevError as err:
        log.info("can't attach to %s for removal: %s", disk.logical_id, err)
        device = None
    if device is not None:
        errors: list[str] = []

        def attempt() -> bool:
            try:
                device.remove()
            except BlockDevError as err:
                errors[:] = [str(err)]
                return False
            errors.clear()
            return True

        retry(host, attempt, delay=DISK_REMOVE_RETRY_INTERVAL, timeout=DISK_REMOVE_RETRY_TIMEOUT)
        messages.extend(errors)
    for child in disk.children:
        try:
            blockdev_remove(host, child)
        except BlockDevError as err:
            messages.append(str(err))
    if messages:
        raise BlockDevError("; ".join(messages))


@dataclass(frozen=True)
class Assembled:
    dev_path: str | None
    uri: str | None = None


def blockdev_assemble(host: Host, disk: Disk, as_primary: bool,
                      hypervisor: str | None = None) -> Assembled | bool:
    """Bring the disk up; on the primary its device path (and a userspace URI when the disk's
    `access` parameter asks for one and the type gives one)."""
    result = recursive_assemble(host, disk, as_primary)
    if not isinstance(result, BlockDev):
        return result
    uri = None
    if as_primary and hypervisor and disk.params.get("access") == "userspace":
        uri = result.userspace_uri(hypervisor)
    return Assembled(result.dev_path, uri)


def blockdev_export_command(host: Host, disk: Disk) -> list[str]:
    """The command writing the bytes of a disk that has no device path here (Ganeti's
    BlockDev.Export: a userspace rbd image or snapshot)."""
    return _found(host, disk).export_command()


def blockdev_import_sink(host: Host, disk: Disk) -> ImportSink:
    """The command taking the bytes of a disk that has no device path here (Ganeti's
    BlockDev.Import: a userspace rbd image)."""
    return _found(host, disk).import_sink()


def blockdev_shutdown(host: Host, disk: Disk) -> None:
    messages: list[str] = []
    device = recursive_find(host, disk)
    if device is not None:
        try:
            device.shutdown()
        except BlockDevError as err:
            messages.append(str(err))
    for child in disk.children:
        try:
            blockdev_shutdown(host, child)
        except BlockDevError as err:
            messages.append(str(err))
    if messages:
        raise BlockDevError("; ".join(messages))


def _found(host: Host, disk: Disk) -> BlockDev:
    device = recursive_find(host, disk)
    if device is None:
        raise BlockDevError(f"Can't find device {disk.iv_name or disk.logical_id}")
    return device


def blockdev_find(host: Host, disk: Disk) -> BlockDevStatus | None:
    device = recursive_find(host, disk)
    return None if device is None else device.sync_status()


def blockdev_getmirrorstatus(host: Host, disks: Sequence[Disk]) -> list[BlockDevStatus]:
    return [_found(host, disk).combined_sync_status() for disk in disks]


def blockdev_getmirrorstatus_multi(host: Host, disks: Sequence[Disk]
                                   ) -> list[tuple[bool, BlockDevStatus | str]]:
    """Ganeti's BlockdevGetmirrorstatusMulti: per disk (True, its combined status) or
    (False, why not: "Can't find device ..." or the device's error)."""
    found: list[tuple[bool, BlockDevStatus | str]] = []
    for disk in disks:
        try:
            device = recursive_find(host, disk)
            if device is None:
                found.append((False, f"Can't find device {disk.iv_name or disk.dev_type}"))
                continue
            found.append((True, device.combined_sync_status()))
        except BlockDevError as err:
            found.append((False, str(err)))
    return found


def drbd_needs_activation(host: Host, disks: Sequence[Disk]) -> list[str]:
    """Ganeti's DrbdNeedsActivation: the UUIDs of the DRBD disks that are not assembled
    here, or standalone, or without their local disk."""
    faulty: list[str] = []
    for disk in disks:
        device = recursive_find(host, disk)
        if device is None:
            faulty.append(disk.uuid or "")
            continue
        proc_status = getattr(device, "proc_status", None)
        if proc_status is not None:
            state = proc_status()
            if state.is_standalone or state.is_diskless:
                faulty.append(disk.uuid or "")
    return faulty


def blockdev_grow(host: Host, disk: Disk, amount: int, dryrun: bool, backingstore: bool,
                  excl_stor: bool = False) -> None:
    _found(host, disk).grow(amount, dryrun=dryrun, backingstore=backingstore,
                            excl_stor=excl_stor)


def blockdev_snapshot(host: Host, disk: Disk, snap_name: str | None,
                      snap_size: int | None) -> list[object]:
    if disk.dev_type == "drbd":
        if not disk.children:
            raise BlockDevError(f"DRBD device {disk.iv_name} without backing storage cannot be"
                                " snapshotted")
        return blockdev_snapshot(host, disk.children[0], snap_name, snap_size)
    if disk.dev_type not in ("plain", "ext", "rbd"):
        raise BlockDevError(f"Cannot snapshot block device {disk.logical_id} of type"
                            f" {disk.dev_type}")
    return _found(host, disk).snapshot(snap_name, snap_size)


def blockdev_snapshot_rollback(host: Host, disk: Disk, snap_name: str) -> None:
    """The disk takes the content of its snapshot (herder's; ext disks whose provider has a
    `rollback` script, rbd images no client has open)."""
    if disk.dev_type == "ext":
        ext.rollback(host, disk, snap_name)
    elif disk.dev_type == "rbd":
        rbd.rollback(host, disk, snap_name)
    else:
        raise BlockDevError(f"rolling back to a snapshot is not supported for "
                            f"{disk.dev_type} disks")


def blockdev_setinfo(host: Host, disk: Disk, info: str) -> None:
    _found(host, disk).set_info(info)


def blockdev_rename(host: Host, renames: Sequence[tuple[Disk, list[object]]]) -> None:
    messages: list[str] = []
    for disk, new_id in renames:
        device = recursive_find(host, disk)
        if device is None:
            messages.append(f"Can't find device {disk.logical_id} in rename")
            continue
        try:
            device.rename(new_id)
        except BlockDevError as err:
            messages.append(f"Can't rename device {disk.logical_id} to {new_id}: {err}")
    if messages:
        raise BlockDevError("; ".join(messages))


def blockdev_wipe(host: Host, disk: Disk, offset: int, size: int) -> None:
    """Zero `size` MiB from `offset` MiB (Ganeti's `dd` line)."""
    try:
        device = recursive_find(host, disk)
    except BlockDevError:
        device = None
    if device is None:
        raise BlockDevError(f"Cannot wipe device {disk.iv_name}: device not found")
    if offset < 0:
        raise BlockDevError("Negative offset")
    if size < 0:
        raise BlockDevError("Negative size")
    if offset > device.size:
        raise BlockDevError("Wipe offset is bigger than device size")
    if offset + size > device.size:
        raise BlockDevError("Wipe offset and size are bigger than device size")
    result = host.run(["dd", "if=/dev/zero", f"seek={offset}", f"bs={DD_BLOCK_SIZE}",
                       "oflag=direct", f"of={device.dev_path}", f"count={size}"])
    if result.failed:
        raise BlockDevError(f"wiping {device.dev_path} failed: {result.last_lines()}")


def blockdev_open(host: Host, disks: Sequence[Disk], exclusive: bool) -> list[str | None]:
    """Open the disks (DRBD: primary); their device paths."""
    devices = [_found(host, disk) for disk in disks]
    messages = []
    for device in devices:
        try:
            device.open(exclusive=exclusive)
        except BlockDevError as err:
            messages.append(str(err))
    if messages:
        raise BlockDevError("Can't open devices: " + ", ".join(messages))
    return [device.dev_path for device in devices]


def blockdev_close(host: Host, disks: Sequence[Disk]) -> None:
    devices = [_found(host, disk) for disk in disks]
    messages = []
    for device in devices:
        try:
            device.close()
        except BlockDevError as err:
            messages.append(str(err))
    if messages:
        raise BlockDevError("Can't close devices: " + ", ".join(messages))


def blockdev_addchildren(host: Host, parent: Disk, new_children: Sequence[Disk]) -> None:
    device = _drbd(host, parent)
    children = [recursive_find(host, child) for child in new_children]
    if None in children:
        raise BlockDevError("Can't find new device(s) to add")
    device.add_children([child for child in children if child is not None])


def blockdev_removechildren(host: Host, parent: Disk, old_children: Sequence[Disk]) -> None:
    device = _drbd(host, parent)
    paths: list[str] = []
    for child in old_children:
        path = child.static_dev_path()
        if path is None:
            found = recursive_find(host, child)
            if found is None or found.dev_path is None:
                raise BlockDevError(f"Can't find device {child.logical_id} while removing"
                                    " children")
            path = found.dev_path
        paths.append(path)
    device.remove_children(paths)


def _drbd(host: Host, disk: Disk) -> Drbd8:
    device = _found(host, disk)
    if not isinstance(device, Drbd8):
        raise BlockDevError(f"{disk.iv_name} is not a DRBD disk")
    return device


def blockdev_pause_resume_sync(host: Host, disks: Sequence[Disk], pause: bool) -> list[bool]:
    results = []
    for disk in disks:
        device = recursive_find(host, disk)
        results.append(isinstance(device, Drbd8) and device.pause_resume_sync(pause))
    return results


def drbd_disconnect_net(host: Host, disks: Sequence[Disk]) -> None:
    for device in [_drbd(host, disk) for disk in disks]:
        try:
            device.disconnect_net()
        except BlockDevError as err:
            raise BlockDevError(f"Can't change network configuration to standalone mode:"
                                f" {err}") from None


def drbd_attach_net(host: Host, disks: Sequence[Disk], multimaster: bool) -> None:
    """Reconnect, then wait (2 minutes at most) until connected; with `multimaster` (live
    migration) until both disks are UpToDate, since both sides become primary next."""
    devices = [_drbd(host, disk) for disk in disks]
    for device in devices:
        device.attach_net(multimaster)

    def connected() -> bool:
        done = True
        for device in devices:
            stats = device.proc_status()
            if multimaster:
                done = done and (stats.is_connected and stats.is_disk_uptodate
                                 and stats.remote_disk == "UpToDate")
            else:
                done = done and (stats.is_connected or stats.is_in_resync)
            if stats.is_standalone:
                # the peer changed its config in between: attach again
                device.attach_net(multimaster)
        return done

    if not retry(host, connected, delay=0.1, factor=1.5, max_delay=5.0, timeout=120.0):
        raise BlockDevError("Timeout in disk reconnecting")


def drbd_wait_sync(host: Host, disks: Sequence[Disk]) -> tuple[bool, float]:
    """(all resynced, lowest sync percent) after waiting up to 15 s per disk for it to be
    connected or resynchronising."""
    min_resync = 100.0
    all_done = True
    for device in [_drbd(host, disk) for disk in disks]:
        def ready(device: Drbd8 = device) -> bool:
            stats = device.proc_status()
            return stats.is_connected or stats.is_in_resync

        if not retry(host, ready, delay=1.0, timeout=15.0):
            raise BlockDevError(f"DRBD device {device.dev_path} is not in sync:"
                                f" {device.proc_status().connection}")
        stats = device.proc_status()
        all_done = all_done and not stats.is_in_resync
        if stats.sync_percent is not None:
            min_resync = min(min_resync, stats.sync_percent)
    return all_done, min_resync
