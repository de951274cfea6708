"""Ganeti 3.0's disk objects as its node RPCs send them, decoded once into typed structures.

A disk is `dev_type`, `logical_id` (a list whose shape depends on the type), `children`, `size`
(MiB, an integer), `params` (the filled disk parameters of its type), `iv_name`, `name`,
`uuid`, `mode`, `spindles` and, for DRBD, `dynamic_params` (`local-ip`, `remote-ip`,
`local-minor`, `remote-minor`: Ganeti's `UpdateDynamicDiskParams` for the receiving node).
Other keys Ganeti sends (`nodes`, `serial_no`, `ctime`, ...) are ignored.

`decode_disk` checks every logical id's shape for its type, so the device types read typed
ids (`plain_id`, `drbd_id`, `path_id`, `ext_id`) and never index lists.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from herder.noded.bdev.base import BlockDevError

DevType = Literal["plain", "drbd", "file", "sharedfile", "blockdev", "ext", "rbd", "gluster",
                  "diskless"]


class DrbdDynamicParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Ganeti's per-node DRBD parameters: this node's and the peer's secondary IP and minor."""

    local_ip: str | None = msgspec.field(name="local-ip", default=None)
    remote_ip: str | None = msgspec.field(name="remote-ip", default=None)
    local_minor: int | None = msgspec.field(name="local-minor", default=None)
    remote_minor: int | None = msgspec.field(name="remote-minor", default=None)
    port: int | None = None  # Ganeti's DDP_PORT, unused by the node code


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


def _typed_id(dev_type: str, raw: list[Any]) -> PlainId | DrbdId | PathId | ExtId | None:
    if dev_type == "diskless":
        return None
    if dev_type == "drbd":
        if len(raw) != 6:
            raise ValueError(f"a drbd logical id has 6 items, got {len(raw)}")
        node_a, node_b, port, minor_a, minor_b, secret = raw
        if not all(isinstance(v, int) and not isinstance(v, bool)
                   for v in (port, minor_a, minor_b)):
            raise ValueError("a drbd logical id needs an integer port and minors")
        if not all(isinstance(v, str) for v in (node_a, node_b, secret)):
            raise ValueError("a drbd logical id needs node names and a secret as strings")
        return DrbdId(node_a, node_b, port, minor_a, minor_b, secret)
    if len(raw) != 2 or not all(isinstance(v, str) for v in raw):
        raise ValueError(f"a {dev_type} logical id is two strings, got {raw!r}")
    if dev_type == "plain":
        return PlainId(raw[0], raw[1])
    if dev_type in ("ext", "rbd"):
        return ExtId(raw[0], raw[1])
    return PathId(raw[0], raw[1])


class Disk(msgspec.Struct, kw_only=True):
    """One Ganeti disk object (with its children), as sent to this node."""

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
            raise ValueError("a disk's size must not be negative")
        _typed_id(self.dev_type, self.logical_id)

    @property
    def plain_id(self) -> PlainId:
        lid = _typed_id(self.dev_type, self.logical_id)
        assert isinstance(lid, PlainId), self.dev_type
        return lid

    @property
    def drbd_id(self) -> DrbdId:
        lid = _typed_id(self.dev_type, self.logical_id)
        assert isinstance(lid, DrbdId), self.dev_type
        return lid

    @property
    def path_id(self) -> PathId:
        lid = _typed_id(self.dev_type, self.logical_id)
        assert isinstance(lid, PathId), self.dev_type
        return lid

    @property
    def ext_id(self) -> ExtId:
        lid = _typed_id(self.dev_type, self.logical_id)
        assert isinstance(lid, ExtId), self.dev_type
        return lid

    def static_dev_path(self) -> str | None:
        """The device path that does not depend on the device's state (Ganeti's
        StaticDevPath): plain and rbd `/dev/A/B`, blockdev its path."""
        if self.dev_type in ("plain", "rbd"):
            return f"/dev/{self.logical_id[0]}/{self.logical_id[1]}"
        if self.dev_type == "blockdev":
            return str(self.logical_id[1])
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


def decode_disk(data: Any) -> Disk:
    """A disk from Ganeti's RPC form (a dict, or JSON bytes/str); one clear line on error."""
    try:
        if isinstance(data, bytes | str):
            return _DECODER.decode(data)
        return msgspec.convert(data, Disk)
    except msgspec.ValidationError as err:
        raise BlockDevError(f"invalid disk object: {err}") from None
    except msgspec.DecodeError as err:
        raise BlockDevError(f"invalid disk object: {err}") from None


def encode_disk(disk: Disk) -> dict[str, Any]:
    """The RPC form of a disk (what `decode_disk` reads)."""
    return msgspec.to_builtins(disk)
