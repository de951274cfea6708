"""Ganeti's disk RPCs (`blockdev_*`, `drbd_*`, the file-storage directories) carried out by the
block-device layer (`herder.noded.bdev.operations`) on the node's disks (`noded.node_disks`),
the owner record, and a disk's bytes copied to another node (`noded.disk_transfer`). The
layer's errors (BlockDevError, one line) go back to the master as they are; a handler adds
what it was doing where the layer cannot know it."""

from __future__ import annotations

from herder.core.diskobjects import BlockDevStatus
from herder.core.rpcdefs import disk_calls
from herder.noded import disk_transfer, exports
from herder.noded.bdev import file as file_storage
from herder.noded.bdev import operations, plain
from herder.noded.bdev.base import BlockDevError
from herder.noded.node import Node
from herder.noded.node_disks import DiskFailure


def disk_map(node: Node, call: disk_calls.DiskMap) -> dict[str, disk_calls.DiskMapEntry]:
    return node.disks.owners()


def blockdev_create(node: Node, call: disk_calls.BlockdevCreate) -> list[str | int]:
    """Make one disk (its children must exist; Ganeti's BlockdevCreate). Returns its logical
    id."""
    return node.disks.create(call.disk, call.owner or "", call.on_primary, call.info,
                             call.excl_stor)


def blockdev_remove(node: Node, call: disk_calls.BlockdevRemove) -> None:
    node.disks.remove(call.disk)


def blockdev_assemble(node: Node, call: disk_calls.BlockdevAssemble) -> disk_calls.Assembled:
    """Bring a disk up: on the primary [device path, userspace URI or None]; elsewhere
    true."""
    return node.disks.assemble(call.disk, call.instance, call.as_primary, call.hypervisor)


def blockdev_shutdown(node: Node, call: disk_calls.BlockdevShutdown) -> None:
    try:
        operations.blockdev_shutdown(node.disks.host, call.disk)
    except BlockDevError as err:
        raise DiskFailure(f"shutting down {call.disk.label}: {err}") from None


def blockdev_find(node: Node, call: disk_calls.BlockdevFind) -> BlockDevStatus | None:
    """Ganeti's BlockDevStatus of the disk, or None when it is not assembled here."""
    return operations.blockdev_find(node.disks.host, call.disk)


def blockdev_getmirrorstatus(node: Node, call: disk_calls.BlockdevGetmirrorstatus
                             ) -> list[BlockDevStatus]:
    return operations.blockdev_getmirrorstatus(node.disks.host, call.disks)


def blockdev_getmirrorstatus_multi(node: Node, call: disk_calls.BlockdevGetmirrorstatusMulti
                                   ) -> list[tuple[bool, BlockDevStatus | str]]:
    """Per disk [true, Ganeti's BlockDevStatus] or [false, why]."""
    return operations.blockdev_getmirrorstatus_multi(node.disks.host, call.disks)


def lv_list(node: Node, call: disk_calls.LvList) -> dict[str, tuple[str, bool, bool]]:
    """Ganeti's lv_list: `vg/lv` -> [size, inactive, online] of the VGs `vg_names` (every VG
    when empty)."""
    return plain.volume_list(node.disks.host, call.vg_names)


def vg_list(node: Node, call: disk_calls.VgList) -> dict[str, int]:
    """Ganeti's vg_list: VG name -> size in MiB (replace-disks' volume group check)."""
    return plain.volume_groups(node.disks.host)


def drbd_needs_activation(node: Node, call: disk_calls.DrbdNeedsActivation) -> list[str]:
    """Ganeti's: the UUIDs of the given DRBD disks that need activate-disks here."""
    return operations.drbd_needs_activation(node.disks.host, call.disks)


def blockdev_grow(node: Node, call: disk_calls.BlockdevGrow) -> None:
    try:
        operations.blockdev_grow(node.disks.host, call.disk, call.amount, call.dryrun,
                                 call.backingstore, call.excl_stor)
    except BlockDevError as err:
        raise DiskFailure(f"growing {call.disk.label}: {err}") from None


def blockdev_rename(node: Node, call: disk_calls.BlockdevRename) -> None:
    """`devlist`: [[disk, new logical id], ...]."""
    operations.blockdev_rename(node.disks.host,
                               [(disk, list(new_id)) for disk, new_id in call.devlist])


def blockdev_wipe(node: Node, call: disk_calls.BlockdevWipe) -> None:
    operations.blockdev_wipe(node.disks.host, call.disk, call.offset, call.size)


def blockdev_setinfo(node: Node, call: disk_calls.BlockdevSetinfo) -> None:
    operations.blockdev_setinfo(node.disks.host, call.disk, call.info)


def blockdev_snapshot(node: Node, call: disk_calls.BlockdevSnapshot) -> list[str]:
    """Ganeti's BlockdevSnapshot: the snapshot's logical id."""
    made = operations.blockdev_snapshot(node.disks.host, call.disk, call.snap_name,
                                        call.snap_size)
    return [str(part) for part in made]


def blockdev_snapshot_rollback(node: Node, call: disk_calls.BlockdevSnapshotRollback) -> None:
    operations.blockdev_snapshot_rollback(node.disks.host, call.disk, call.snap_name)


def blockdev_open(node: Node, call: disk_calls.BlockdevOpen) -> list[str | None]:
    return operations.blockdev_open(node.disks.host, call.disks, call.exclusive)


def blockdev_close(node: Node, call: disk_calls.BlockdevClose) -> None:
    operations.blockdev_close(node.disks.host, call.disks)


def blockdev_addchildren(node: Node, call: disk_calls.BlockdevAddchildren) -> None:
    """`disk`: the DRBD disk; `ndevs`: the LVs to attach as its data and metadata."""
    operations.blockdev_addchildren(node.disks.host, call.disk, call.ndevs)


def blockdev_removechildren(node: Node, call: disk_calls.BlockdevRemovechildren) -> None:
    operations.blockdev_removechildren(node.disks.host, call.disk, call.ndevs)


# --- DRBD ----------------------------------------------------------------------------------------


def drbd_disconnect_net(node: Node, call: disk_calls.DrbdDisconnectNet) -> None:
    operations.drbd_disconnect_net(node.disks.host, call.disks)


def drbd_attach_net(node: Node, call: disk_calls.DrbdAttachNet) -> None:
    operations.drbd_attach_net(node.disks.host, call.disks, call.multimaster)


def drbd_wait_sync(node: Node, call: disk_calls.DrbdWaitSync) -> tuple[bool, float]:
    return operations.drbd_wait_sync(node.disks.host, call.disks)


# --- the file-storage directories (Ganeti's file_storage_dir_*) -----------------------------


def file_storage_dir_create(node: Node, call: disk_calls.FileStorageDirCreate) -> None:
    file_storage.create_storage_dir(node.disks.host, call.file_storage_dir)


def file_storage_dir_remove(node: Node, call: disk_calls.FileStorageDirRemove) -> None:
    file_storage.remove_storage_dir(node.disks.host, call.file_storage_dir)


def file_storage_dir_rename(node: Node, call: disk_calls.FileStorageDirRename) -> None:
    file_storage.rename_storage_dir(node.disks.host, call.old_file_storage_dir,
                                    call.new_file_storage_dir)


# --- copying a disk to another node (noded/disk_transfer.py) -------------------------------


def blockdev_import_prepare(node: Node, call: disk_calls.BlockdevImportPrepare
                            ) -> disk_calls.ImportToken:
    """Expect a disk's bytes from another node: its device assembled here, a one-time
    token for `POST /import/<token>`. With `os_instance` (an import from an export) the
    bytes go through the instance's OS `import` script, which writes the device. A device
    without a path here (a userspace rbd image) takes them through its import command
    (Ganeti's Import(): `rbd import`), fed by the script's stdout when there is one."""
    pending = exports.import_pending(node, call.disk, call.instance, call.idx,
                                     call.os_instance)
    return disk_calls.ImportToken(token=node.imports.add(
        pending.path, pending.size, script=pending.script, sink=pending.sink))


def blockdev_export(node: Node, call: disk_calls.BlockdevExport) -> disk_calls.Transferred:
    """Send a disk's bytes to another node's prepared import; the bytes and checksum the
    target confirmed. With `os_instance` (an export) the bytes are what the instance's OS
    `export` script writes of the device; with `peer_ca` the target is a node of another
    cluster (a move between clusters), its certificate issued by that CA."""
    source = node.disks.export_source(call.disk, call.instance)
    try:
        url, context = disk_transfer.import_url(node.trust, call.target, call.token,
                                                call.peer_ca)
        if isinstance(source, list):
            return exports.send_command_output(node, source, call.os_instance, call.idx,
                                               url, context)
        path = source
        if call.os_instance is not None:
            script = exports.os_stream(node, call.os_instance, "export", call.idx, path)
            return disk_transfer.send_through_script(script, url, context)
        return disk_transfer.send(path, call.disk.size * 2**20, url, context)
    except disk_transfer.TransferError as err:
        raise DiskFailure(f"copying {call.disk.label} to {call.target.address}: {err}") from None

