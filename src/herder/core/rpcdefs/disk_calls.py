"""An instance's disks on a node (Ganeti's names and arguments): `blockdev_*`, `drbd_*` and the
file-storage directories, on Ganeti's disk objects (`core.diskobjects`), and a disk's bytes
copied to another node (`blockdev_import_prepare`, `blockdev_export`)."""

from __future__ import annotations

import msgspec

from herder.core import paths
from herder.core.diskobjects import MAX_DISK_MIB, BlockDevStatus, Disk
from herder.core.rpcdefs.base import (
    AnswerT,
    Call,
    in_range,
    instance_name,
    ip_address,
    storage_dir,
)
from herder.core.rpcdefs.payload import InstancePayload

# on the primary [device path, userspace URI or None]; elsewhere true
Assembled = tuple[str | None, str | None] | bool


class OneDisk(Call[AnswerT], kw_only=True):
    disk: Disk


class SomeDisks(Call[AnswerT], kw_only=True):
    disks: list[Disk] = msgspec.field(default_factory=list)
    instance: str | None = None  # the owner's name

    def __post_init__(self) -> None:
        if self.instance is not None:
            instance_name(self.instance, "instance")


class BlockdevCreate(OneDisk[list[str | int]], kw_only=True):
    """Make one disk (its children must exist; Ganeti's BlockdevCreate); the answer is its
    logical id."""

    METHOD = "blockdev_create"
    SERIAL = True
    size: int = 0
    owner: str | None = None  # the instance
    on_primary: bool = True
    info: str = ""
    excl_stor: bool = False

    def __post_init__(self) -> None:
        if self.owner:
            instance_name(self.owner, "owner")


class BlockdevRemove(OneDisk[None], kw_only=True):
    METHOD = "blockdev_remove"
    SERIAL = True


class BlockdevAssemble(OneDisk[Assembled], kw_only=True):
    """Bring a disk up, as the primary or a secondary."""

    METHOD = "blockdev_assemble"
    instance: str | None = None  # the owner's name
    as_primary: bool = True
    idx: int = 0
    hypervisor: str | None = None  # rbd: the userspace URI for this hypervisor

    def __post_init__(self) -> None:
        if self.instance is not None:
            instance_name(self.instance, "instance")


class BlockdevShutdown(OneDisk[None], kw_only=True):
    METHOD = "blockdev_shutdown"


class BlockdevFind(OneDisk[BlockDevStatus | None], kw_only=True):
    """The device's status, or None when it is not assembled here."""

    METHOD = "blockdev_find"


class BlockdevGetmirrorstatus(SomeDisks[list[BlockDevStatus]], kw_only=True):
    METHOD = "blockdev_getmirrorstatus"


class BlockdevGetmirrorstatusMulti(SomeDisks[list[tuple[bool, BlockDevStatus | str]]],
                                   kw_only=True):
    """Per disk [true, its status] or [false, why]: `cluster verify`'s question, which one
    missing device does not spoil for the others."""

    METHOD = "blockdev_getmirrorstatus_multi"
    TIMEOUT = 60.0


class LvList(Call[dict[str, tuple[str, bool, bool]]], kw_only=True):
    """`vg/lv` -> [size MiB as text, inactive, online] of the VGs `vg_names` (every VG when
    empty)."""

    METHOD = "lv_list"
    TIMEOUT = 60.0
    vg_names: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        for name in self.vg_names:
            if not name or name.startswith("-") or any(ch in name for ch in "\0\n\r"):
                raise ValueError(f"invalid storage unit name {name!r}")


class VgList(Call[dict[str, int]], kw_only=True):
    """VG name -> size in MiB (replace-disks' volume group check)."""

    METHOD = "vg_list"


class DrbdNeedsActivation(SomeDisks[list[str]], kw_only=True):
    """The UUIDs of the given DRBD disks that need activate-disks here."""

    METHOD = "drbd_needs_activation"


class BlockdevGrow(OneDisk[None], kw_only=True):
    METHOD = "blockdev_grow"
    SERIAL = True
    amount: int  # MiB
    dryrun: bool = False
    backingstore: bool = True
    excl_stor: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.amount <= 1 << 40:
            raise ValueError(f"amount {self.amount} out of range")


class BlockdevRename(Call[None], kw_only=True):
    """`devlist`: [[disk, new logical id], ...]."""

    METHOD = "blockdev_rename"
    SERIAL = True
    devlist: list[tuple[Disk, list[str | int]]]


class BlockdevWipe(OneDisk[None], kw_only=True):
    METHOD = "blockdev_wipe"
    offset: int
    size: int


def snapshot_name(name: str) -> None:
    """A snapshot's name, given to the device type (an LV name, an ExtStorage volume name)."""
    paths.check_component(name, "snapshot name")
    if name.startswith((".", "-")) or not all(ch.isalnum() or ch in "-_.+" for ch in name):
        raise ValueError(f"invalid snapshot name {name!r}")


class BlockdevSnapshot(OneDisk[list[str]], kw_only=True):
    """Snapshot a disk (Ganeti's blockdev_snapshot: LVM's `lvcreate -s`, an ExtStorage
    provider's `snapshot`); the answer is the snapshot's logical id."""

    METHOD = "blockdev_snapshot"
    SERIAL = True
    snap_name: str
    snap_size: int | None = None  # MiB; None: the disk's size

    def __post_init__(self) -> None:
        snapshot_name(self.snap_name)
        if self.snap_size is not None:
            in_range(self.snap_size, 1, MAX_DISK_MIB, "snap_size")


class BlockdevSnapshotRollback(OneDisk[None], kw_only=True):
    """The disk takes the content of its snapshot (herder's: Ganeti has no rollback)."""

    METHOD = "blockdev_snapshot_rollback"
    SERIAL = True
    snap_name: str

    def __post_init__(self) -> None:
        snapshot_name(self.snap_name)


class BlockdevSetinfo(OneDisk[None], kw_only=True):
    """The owner text a device records (LV tags)."""

    METHOD = "blockdev_setinfo"
    info: str


class BlockdevOpen(SomeDisks[list[str | None]], kw_only=True):
    """Open the disks (DRBD: primary); the answer is their device paths."""

    METHOD = "blockdev_open"
    exclusive: bool = True


class BlockdevClose(SomeDisks[None], kw_only=True):
    METHOD = "blockdev_close"


class ChildrenChange(OneDisk[None], kw_only=True):
    ndevs: list[Disk]  # the LVs attached to (or detached from) the DRBD disk `disk`


class BlockdevAddchildren(ChildrenChange, kw_only=True):
    METHOD = "blockdev_addchildren"


class BlockdevRemovechildren(ChildrenChange, kw_only=True):
    METHOD = "blockdev_removechildren"


class DrbdDisconnectNet(SomeDisks[None], kw_only=True):
    METHOD = "drbd_disconnect_net"


class DrbdAttachNet(SomeDisks[None], kw_only=True):
    METHOD = "drbd_attach_net"
    multimaster: bool = False


class DrbdWaitSync(SomeDisks[tuple[bool, float]], kw_only=True):
    """(all resynced, the lowest sync percent)."""

    METHOD = "drbd_wait_sync"


class StorageDirCall(Call[None], kw_only=True):
    file_storage_dir: str

    def __post_init__(self) -> None:
        storage_dir(self.file_storage_dir)


class FileStorageDirCreate(StorageDirCall, kw_only=True):
    METHOD = "file_storage_dir_create"
    SERIAL = True


class FileStorageDirRemove(StorageDirCall, kw_only=True):
    METHOD = "file_storage_dir_remove"
    SERIAL = True


class FileStorageDirRename(Call[None], kw_only=True):
    METHOD = "file_storage_dir_rename"
    SERIAL = True
    old_file_storage_dir: str
    new_file_storage_dir: str

    def __post_init__(self) -> None:
        storage_dir(self.old_file_storage_dir)
        storage_dir(self.new_file_storage_dir)


class DiskMapEntry(msgspec.Struct, kw_only=True):
    """Which instance a disk of this node belongs to, and where it is."""

    instance: str | None
    size: int
    path: str | None
    dev_type: str


class DiskMap(Call[dict[str, DiskMapEntry]], kw_only=True):
    """The node's owner record: disk UUID -> its entry."""

    METHOD = "disk_map"
    READ_ONLY = True


class ImportToken(msgspec.Struct, kw_only=True):
    token: str  # for `POST /import/<token>` on this node


DISK_INDEX_MAX = 255  # an instance's disks are far fewer (Ganeti's limit is 16 by policy)


def disk_index(index: int) -> None:
    in_range(index, 0, DISK_INDEX_MAX, "idx")


def import_token(token: str) -> None:
    if not token or not all(ch.isalnum() or ch in "-_" for ch in token):
        raise ValueError("invalid import token")


class BlockdevImportPrepare(OneDisk[ImportToken], kw_only=True):
    """Expect a disk's bytes from another node: its device assembled here, a one-time token.
    With `os_instance` (an import from an export) the bytes go through that instance's OS
    `import` script for disk `idx`, which writes the device."""

    METHOD = "blockdev_import_prepare"
    instance: str | None = None
    os_instance: InstancePayload | None = None
    idx: int = 0

    def __post_init__(self) -> None:
        if self.instance is not None:
            instance_name(self.instance, "instance")
        disk_index(self.idx)


class ExportTarget(msgspec.Struct, kw_only=True):
    address: str
    port: int
    name: str | None = None  # the target node's name

    def __post_init__(self) -> None:
        ip_address(self.address)
        if not 0 < self.port < 65536:
            raise ValueError(f"port {self.port} out of range")


class Transferred(msgspec.Struct, kw_only=True):
    bytes: int | None  # as the target confirmed them
    # of the bytes sent, which the target's matched: `xxh3_128:<hex>` (noded.disk_transfer)
    checksum: str


class BlockdevExport(OneDisk[Transferred], kw_only=True):
    """Send a disk's bytes to another node's prepared import. With `os_instance` (an export)
    the bytes are what that instance's OS `export` script writes of disk `idx`."""

    METHOD = "blockdev_export"
    instance: str | None = None
    target: ExportTarget
    token: str
    os_instance: InstancePayload | None = None
    idx: int = 0

    def __post_init__(self) -> None:
        if self.instance is not None:
            instance_name(self.instance, "instance")
        import_token(self.token)
        disk_index(self.idx)
