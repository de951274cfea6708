"""Hotplug into an instance running on its primary (Ganeti 3.0's `hotplug_supported` and
`hotplug_device`), and herder's `instance_disk_resize`: a running QEMU told that a disk grew
(`noded.rpc.hotplug` handles them)."""

from __future__ import annotations

from typing import Literal

from herder.core import diskobjects, paths
from herder.core.rpcdefs.instance_calls import Named, WithPayload

MAX_DEVICES = 64  # a device's index: below this


class HotplugSupported(Named[None], kw_only=True):
    """Ganeti's HotplugSupported: the instance runs here under QEMU (else the one-line
    reason)."""

    METHOD = "hotplug_supported"
    TIMEOUT = 30.0


class HotplugDevice(WithPayload[None], kw_only=True):
    """One disk or NIC plugged into or out of the running instance; `instance`: as the config
    holds it after the change, `index` and `uuid` name the device there."""

    METHOD = "hotplug_device"
    SERIAL = True
    TIMEOUT = 120.0  # a guest has 30 s to release a device on the node; the call gets more
    action: Literal["add", "remove"]
    dev_type: Literal["disk", "nic"]
    index: int
    uuid: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.index < MAX_DEVICES:
            raise ValueError(f"index {self.index} out of range (0-{MAX_DEVICES - 1})")
        paths.check_component(self.uuid, "device id")


class InstanceDiskResize(Named[None], kw_only=True):
    """Tell the running instance's QEMU that the disk `uuid` has `size` MiB now."""

    METHOD = "instance_disk_resize"
    SERIAL = True
    TIMEOUT = 60.0
    uuid: str
    size: int  # MiB: the disk's new size

    def __post_init__(self) -> None:
        super().__post_init__()
        paths.check_component(self.uuid, "disk id")
        if not 1 <= self.size <= diskobjects.MAX_DISK_MIB:
            raise ValueError(f"size {self.size} MiB out of range")
