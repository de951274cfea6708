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

from herder.core.errors import HerderError
from herder.core.rpcdefs import hotplug_calls
from herder.noded import domains
from herder.noded.kvm import ifup
from herder.noded.kvm.domain import DomainError, device_alias, device_xml
from herder.noded.node import Node, RpcFailure


def _check_running(node: Node, name: str) -> None:
    if not node.hv.runs_guests:
        raise RpcFailure("libvirt's test driver runs no guests to hotplug into")
    if node.hv.state(name) not in domains.RUNNING_STATES:
        raise RpcFailure(f"Instance {name} is probably down")


def hotplug_supported(node: Node, call: hotplug_calls.HotplugSupported) -> None:
    """Ganeti's HotplugSupported: the instance runs here under QEMU."""
    _check_running(node, call.name)


def hotplug_device(node: Node, call: hotplug_calls.HotplugDevice) -> None:
    inst, kind, index = call.instance, call.dev_type, call.index
    _check_running(node, inst.name)
    alias = device_alias(kind, call.uuid)
    if call.action == "remove":
        node.hv.detach_device(inst.name, alias)
        return
    spec = domains.spec(node, inst)
    devices = spec.disks if kind == "disk" else spec.nics
    if not 0 <= index < len(devices) or devices[index].uuid != call.uuid:
        raise RpcFailure(f"instance {inst.name}: {kind} {index} is not {call.uuid}")
    if node.hv.has_device(inst.name, alias):
        raise RpcFailure(f"instance {inst.name} has device {alias} already")
    try:
        xml = device_xml(spec, kind, index)
    except DomainError as err:
        raise RpcFailure(str(err)) from None
    node.hv.attach_device(inst.name, xml)
    if kind == "nic" and spec.nics[index].mode == "routed":
        try:
            ifup.configure_nic(spec, index, hook=node.local(ifup.HOOK))
        except HerderError as err:  # ifup.IfupError among them
            node.hv.detach_device(inst.name, alias)
            raise RpcFailure(str(err)) from None


def instance_disk_resize(node: Node, call: hotplug_calls.InstanceDiskResize) -> None:
    _check_running(node, call.name)
    node.hv.block_resize(call.name, device_alias("disk", call.uuid), call.size * 1024 * 1024)
