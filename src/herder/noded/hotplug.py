"""Hotplug on the node, as Ganeti 3.0's `hotplug_supported` and `hotplug_device` RPCs
(backend.HotplugDevice over hv_kvm's HotAddDevice/HotDelDevice), through libvirt's
attach/detach of one device of the running domain instead of QMP's `device_add`/`device_del`:

- **add** (a disk, assembled by the master before, or a NIC): the device's XML from the
  instance's payload as it is after the change (`kvm.domain.device_xml`, the same element the
  next start defines), attached live; a routed NIC's new tap is then configured as Ganeti's
  `kvm-ifup` does (`kvm.ifup.configure_nic`), and detached again when that fails.
- **remove**: the device with the disk's or NIC's alias (`kvm.domain.device_alias`) detached;
  the call returns once the guest released it.
- `instance_disk_resize` (herder's, for `grow-disk` on a running instance): QEMU is told the
  disk's new size (libvirt's blockResize, QMP's block_resize), so the guest sees it at once.

The domain's persistent definition is not touched: every start defines it anew from the
config, which already holds the change.
"""

from __future__ import annotations

from typing import Any

from herder.core.errors import HerderError
from herder.noded.hypervisor import Hypervisor, HypervisorError
from herder.noded.kvm.domain import DomainError, InstanceSpec, device_alias, device_xml


class HotplugFailure(HypervisorError):
    """A device could not be plugged or unplugged; one line."""


class HotplugRpcs:
    """The node's hotplug calls (mixed into noded's `NodeDaemon`)."""

    hv: Hypervisor

    def instance_spec(self, inst: dict[str, Any]) -> InstanceSpec:
        raise NotImplementedError

    def configure_routed_nic(self, spec: InstanceSpec, index: int) -> None:
        raise NotImplementedError

    def rpc_hotplug_supported(self, args: dict[str, Any]) -> None:
        """Ganeti's HotplugSupported: the instance runs here under QEMU."""
        name = str(args["name"])
        if not self.hv.runs_guests:
            raise HotplugFailure("libvirt's test driver runs no guests to hotplug into")
        if self.hv.state(name) not in ("running", "blocked", "paused"):
            raise HotplugFailure(f"Instance {name} is probably down")

    def rpc_hotplug_device(self, args: dict[str, Any]) -> None:
        inst = args["instance"]
        name, kind, index = str(inst["name"]), str(args["dev_type"]), int(args["index"])
        self.rpc_hotplug_supported({"name": name})
        alias = device_alias(kind, str(args["uuid"]))
        if args["action"] == "remove":
            self.hv.detach_device(name, alias)
            return
        spec = self.instance_spec(inst)
        devices = spec.disks if kind == "disk" else spec.nics
        if not 0 <= index < len(devices) or devices[index].uuid != args["uuid"]:
            raise HotplugFailure(f"instance {name}: {kind} {index} is not {args['uuid']}")
        if self.hv.has_device(name, alias):
            raise HotplugFailure(f"instance {name} has device {alias} already")
        try:
            xml = device_xml(spec, kind, index)
        except DomainError as err:
            raise HotplugFailure(str(err)) from None
        self.hv.attach_device(name, xml)
        if kind == "nic" and spec.nics[index].mode == "routed":
            try:
                self.configure_routed_nic(spec, index)
            except HerderError:
                self.hv.detach_device(name, alias)
                raise

    def rpc_instance_disk_resize(self, args: dict[str, Any]) -> None:
        name = str(args["name"])
        self.rpc_hotplug_supported({"name": name})
        self.hv.block_resize(name, device_alias("disk", str(args["uuid"])),
                             int(args["size"]) * 1024 * 1024)
