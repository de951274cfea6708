"""Ganeti 3.0's disk objects as its node RPCs carry them: built from herder's config on the
master, decoded once into the same typed structure on the node (this module owns them both
ways).

A node is told everything it needs about a disk (docs/real-nodes.md §2): `dev_type`,
`logical_id` as Ganeti's list (`plain` [vg, lv]; `drbd` [node_a, node_b, port, minor_a,
minor_b, secret]; `file`/`sharedfile`/`gluster`/`blockdev` [driver, path]; `ext`/`rbd`
[provider, name]), `children`, `size` (MiB), `params` (the logical-disk parameters Ganeti's
`Disk.ComputeLDParams` derives from the template's filled disk parameters: the DRBD device gets
the sync and network ones, its data and metadata LVs their stripes), `iv_name`, `name`, `uuid`,
`mode`, `spindles`, and for DRBD `dynamic_params` (Ganeti's `UpdateDynamicDiskParams`: the
receiving node's and its peer's secondary IP and minor). Other keys Ganeti sends (`nodes`,
`serial_no`, `ctime`, ...) are ignored.

`Disk` checks every logical id's shape for its type when it is made or decoded, so the node's
device types read typed ids (`plain_id`, `drbd_id`, `path_id`, `ext_id`) and never index lists.
`BlockDevStatus` is Ganeti's answer about a device (`blockdev_find` and the mirror status).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import IntEnum
from typing import Any, Literal, cast, get_args

import msgspec

from herder.core import model, paths

MAX_DISK_MIB = 1 << 40  # far beyond any disk; keeps sizes in what files and LVM can hold

DevType = Literal["plain", "drbd", "file", "sharedfile", "blockdev", "ext", "rbd", "gluster",
                  "diskless"]

# Ganeti's constants.DISK_LD_DEFAULTS: which logical-disk parameters each device type takes.
_LD_KEYS: dict[str, tuple[str, ...]] = {
    "plain": ("stripes",), "rbd": ("access", "pool"), "ext": ("access",),
    "gluster": ("access", "host", "port", "volume"),
}
# DRBD's logical-disk parameter -> the drbd template's disk parameter (ComputeLDParams).
_DRBD_LD = {"resync-rate": "resync-rate", "disabled-barriers": "disk-barriers",
            "disable-meta-flush": "meta-barriers", "default-metavg": "metavg",
            "disk-custom": "disk-custom", "net-custom": "net-custom", "protocol": "protocol",
            "dynamic-resync": "dynamic-resync", "c-plan-ahead": "c-plan-ahead",
            "c-fill-target": "c-fill-target", "c-delay-target": "c-delay-target",
            "c-max-rate": "c-max-rate", "c-min-rate": "c-min-rate"}


class DiskObjectError(ValueError):
    """A disk object is malformed (one line naming what)."""


def dev_type(name: str) -> DevType:
    """A config disk's type as a disk object's (DiskObjectError for another name)."""
    if name not in get_args(DevType):
        raise DiskObjectError(f"unknown disk type {name!r}")
    return cast(DevType, name)


# --- the typed logical ids ----------------------------------------------------------------------


class PlainId(msgspec.Struct, frozen=True):
    vg: str
    lv: str


class DrbdId(msgspec.Struct, frozen=True):
    node_a: str
    node_b: str
    port: int
    minor_a: int
    minor_b: int
    secret: str


class PathId(msgspec.Struct, frozen=True):
    """file, sharedfile, gluster (driver, path) and blockdev (`manual`, path)."""

    driver: str
    path: str


class ExtId(msgspec.Struct, frozen=True):
    """ext (provider, volume name) and rbd (driver, image name)."""

    provider: str
    name: str


def typed_id(dev_type: str, raw: list[Any]) -> PlainId | DrbdId | PathId | ExtId | None:
    """A logical id (Ganeti's list) as its type's Struct; DiskObjectError when it does not fit
    the type."""
    if dev_type == "diskless":
        return None
    if dev_type == "drbd":
        if len(raw) != 6:
            raise DiskObjectError(f"a drbd logical id has 6 items, got {len(raw)}")
        node_a, node_b, port, minor_a, minor_b, secret = raw
        if not all(isinstance(v, int) and not isinstance(v, bool)
                   for v in (port, minor_a, minor_b)):
            raise DiskObjectError("a drbd logical id needs an integer port and minors")
        if not all(isinstance(v, str) for v in (node_a, node_b, secret)):
            raise DiskObjectError("a drbd logical id needs node names and a secret as strings")
        return DrbdId(node_a, node_b, port, minor_a, minor_b, secret)
    if len(raw) != 2 or not all(isinstance(v, str) for v in raw):
        raise DiskObjectError(f"a {dev_type} logical id is two strings, got {raw!r}")
    if dev_type == "plain":
        return PlainId(raw[0], raw[1])
    if dev_type in ("ext", "rbd"):
        return ExtId(raw[0], raw[1])
    return PathId(raw[0], raw[1])


def logical_id(lid: model.LogicalId | None) -> list[Any]:
    """A config logical id as Ganeti's list."""
    if isinstance(lid, model.PlainId):
        return [lid.vg, lid.lv]
    if isinstance(lid, model.DrbdId):
        return [lid.nodes[0], lid.nodes[1], lid.port, lid.minors[0], lid.minors[1], lid.secret]
    if isinstance(lid, model.FileId):
        return [lid.driver, lid.path]
    if isinstance(lid, model.ExtId):
        return [lid.provider, lid.name]
    return []


# --- the disk object ---------------------------------------------------------------------------


class DrbdDynamicParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True,
                        omit_defaults=True):
    """Ganeti's per-node DRBD parameters: this node's and the peer's secondary IP and minor."""

    local_ip: str | None = msgspec.field(name="local-ip", default=None)
    remote_ip: str | None = msgspec.field(name="remote-ip", default=None)
    local_minor: int | None = msgspec.field(name="local-minor", default=None)
    remote_minor: int | None = msgspec.field(name="remote-minor", default=None)
    port: int | None = None  # Ganeti's DDP_PORT, unused by the node code


class Disk(msgspec.Struct, kw_only=True):
    """One Ganeti disk object (with its children), as a node is sent it."""

    dev_type: DevType
    logical_id: list[Any] = msgspec.field(default_factory=list)
    children: list[Disk] = msgspec.field(default_factory=list)
    size: int = 0  # MiB
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    iv_name: str | None = None
    name: str | None = None
    uuid: str | None = None
    mode: str = "rw"
    spindles: int | None = None
    dynamic_params: DrbdDynamicParams = msgspec.field(default_factory=DrbdDynamicParams)

    def __post_init__(self) -> None:
        if self.size < 0:
            raise DiskObjectError("a disk's size must not be negative")
        if self.size > MAX_DISK_MIB:
            raise DiskObjectError(f"disk {self.uuid}: size {self.size} out of range")
        if self.uuid is not None:
            paths.check_component(self.uuid, "disk id")
            if self.uuid.startswith("."):
                raise DiskObjectError(f"invalid disk id {self.uuid!r}")
        typed_id(self.dev_type, self.logical_id)

    @property
    def plain_id(self) -> PlainId:
        lid = typed_id(self.dev_type, self.logical_id)
        assert isinstance(lid, PlainId), self.dev_type
        return lid

    @property
    def drbd_id(self) -> DrbdId:
        lid = typed_id(self.dev_type, self.logical_id)
        assert isinstance(lid, DrbdId), self.dev_type
        return lid

    @property
    def path_id(self) -> PathId:
        lid = typed_id(self.dev_type, self.logical_id)
        assert isinstance(lid, PathId), self.dev_type
        return lid

    @property
    def ext_id(self) -> ExtId:
        lid = typed_id(self.dev_type, self.logical_id)
        assert isinstance(lid, ExtId), self.dev_type
        return lid

    @property
    def label(self) -> str:
        """How the operator knows the disk: its iv_name, else its type."""
        return self.iv_name or self.dev_type

    def static_dev_path(self) -> str | None:
        """The device path that does not depend on the device's state (Ganeti's
        StaticDevPath): plain and rbd `/dev/A/B`, blockdev its path."""
        if self.dev_type in ("plain", "rbd"):
            return f"/dev/{self.logical_id[0]}/{self.logical_id[1]}"
        if self.dev_type == "blockdev":
            return str(self.logical_id[1])
        return None

    def file_path(self) -> str | None:
        """The file a file, sharedfile or gluster disk is."""
        if self.dev_type in ("file", "sharedfile", "gluster"):
            return self.path_id.path
        return None

    def assemble_on_secondary(self) -> bool:
        return self.dev_type in ("drbd", "plain")

    def open_on_secondary(self) -> bool:
        return self.dev_type == "plain"

    def children_needed(self) -> int:
        """How many children must assemble (-1: all; DRBD can run diskless: 0)."""
        return 0 if self.dev_type == "drbd" else -1

    def with_logical_id(self, logical_id: list[Any]) -> Disk:
        return msgspec.structs.replace(self, logical_id=list(logical_id))


_DECODER = msgspec.json.Decoder(Disk)


def decode_disk(data: object) -> Disk:
    """A disk from Ganeti's RPC form (a dict, or JSON bytes/str); DiskObjectError (one line)
    when it is malformed."""
    try:
        if isinstance(data, bytes | str):
            return _DECODER.decode(data)
        return msgspec.convert(data, Disk)
    except (msgspec.ValidationError, msgspec.DecodeError) as err:
        raise DiskObjectError(f"invalid disk object: {err}") from None


def encode_disk(disk: Disk) -> dict[str, Any]:
    """The RPC form of a disk (what `decode_disk` reads)."""
    encoded: dict[str, Any] = msgspec.to_builtins(disk)
    return encoded


# --- what a node says about a device --------------------------------------------------------------


class LocalDiskStatus(IntEnum):
    """Ganeti's local-disk status (constants.LDS_*): the worse, the higher."""

    OKAY = 1
    SYNC = 2
    UNKNOWN = 3
    FAULTY = 4


class BlockDevStatus(msgspec.Struct, frozen=True, array_like=True):
    """Ganeti's BlockDevStatus, a list on the wire: the device path and numbers, the resync
    percent (None: not resynchronising), the estimated seconds left (None: unknown), whether
    the device lacks redundancy, and the state of the local disk."""

    dev_path: str | None
    major: int | None
    minor: int | None
    sync_percent: float | None
    estimated_time: int | None
    is_degraded: bool
    ldisk_status: LocalDiskStatus

    def to_ganeti(self) -> list[object]:
        """The list Ganeti's RPC sends (objects.BlockDevStatus fields)."""
        encoded: list[object] = msgspec.to_builtins(self)
        return encoded

    def as_dict(self) -> dict[str, object]:
        """Field name -> value, as Ganeti's instance query shows a status."""
        return dict(zip(self.__struct_fields__, self.to_ganeti(), strict=True))


# --- built from the config (the master) ----------------------------------------------------------


def ld_params(template: str, filled: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Ganeti's ComputeLDParams: one parameter dict per device of the template's disk tree,
    in order (drbd: the DRBD device, its data LV, its metadata LV)."""
    if template == "drbd":
        return [{ld: filled[dt] for ld, dt in _DRBD_LD.items()},
                {"stripes": filled["data-stripes"]}, {"stripes": filled["meta-stripes"]}]
    return [{key: filled[key] for key in _LD_KEYS.get(template, ()) if key in filled}]


def file_storage_dir(disk: model.Disk) -> str | None:
    """The instance's directory a file/sharedfile disk lives in (made by
    `file_storage_dir_create` before the disks, removed after them)."""
    if disk.dev_type in ("file", "sharedfile") and isinstance(disk.logical_id, model.FileId):
        return os.path.dirname(disk.logical_id.path)
    return None


def _secondary_ip(config: model.ConfigData, node_uuid: str) -> str:
    node = config.nodes.get(node_uuid)
    if node is None:
        return ""
    return node.secondary_ip or node.primary_ip


def _object(config: model.ConfigData, disk: model.Disk, params: dict[str, Any],
            node_uuid: str | None, children: list[Disk]) -> Disk:
    dynamic = DrbdDynamicParams()
    lid = disk.logical_id
    if isinstance(lid, model.DrbdId) and node_uuid in lid.nodes:
        here = lid.nodes.index(node_uuid)
        peer = 1 - here
        dynamic = DrbdDynamicParams(local_ip=_secondary_ip(config, lid.nodes[here]),
                                    remote_ip=_secondary_ip(config, lid.nodes[peer]),
                                    local_minor=lid.minors[here],
                                    remote_minor=lid.minors[peer])
    return Disk(dev_type=dev_type(disk.dev_type), logical_id=logical_id(disk.logical_id),
                children=children, size=disk.size, params=params,
                iv_name=disk.iv_name or None, name=disk.name, uuid=disk.uuid, mode=disk.mode,
                spindles=disk.spindles, dynamic_params=dynamic)


def disk_object(config: model.ConfigData, inst: model.Instance, disk: model.Disk,
                node_uuid: str | None = None) -> Disk:
    """One disk of `inst` as the node `node_uuid` (default: the primary) is sent it."""
    node_uuid = node_uuid or inst.primary_node
    filled = config.filled_diskparams(disk.dev_type, config.instance_group(inst))
    levels = ld_params(disk.dev_type, filled)
    children = [_object(config, child,
                        dict(levels[index + 1]) if index + 1 < len(levels) else {},
                        node_uuid, [])
                for index, child in enumerate(disk.children)]
    top_params = {**levels[0], **disk.params} if disk.dev_type != "drbd" else levels[0]
    return _object(config, disk, top_params, node_uuid, children)


def disk_objects(config: model.ConfigData, inst: model.Instance,
                 node_uuid: str | None = None) -> list[Disk]:
    """Every disk of `inst`, for the node `node_uuid` (default: the primary)."""
    return [disk_object(config, inst, disk, node_uuid) for disk in inst.disks]
