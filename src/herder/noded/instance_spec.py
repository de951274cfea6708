"""An instance's `InstanceSpec` (what its domain is made from) from the master's RPC payload
(`core.rpcdefs.payload.InstancePayload`: filled hvparams and beparams, NICs with filled
nicparams) and
what only this node knows: the disks as assembled here, whether KVM works, the uid of the
instance's processes, the VNC/SPICE password files' contents, the addresses of interfaces named
by `vnc_bind_address`/`spice_bind`.

`from_payload` is pure; noded resolves the node-local facts and passes them in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from herder.core.rpcdefs.payload import InstancePayload, NicPayload
from herder.noded.kvm.domain import DiskSpec, InstanceSpec, NicSpec

# Parameters naming an interface whose address the node looks up.
BIND_PARAMS = ("vnc_bind_address", "spice_bind")


def nic_specs(nics: Sequence[NicPayload]) -> tuple[NicSpec, ...]:
    """The payload's NICs (MAC, IP, filled nicparams mode/link/vlan, name, uuid, network)."""
    return tuple(NicSpec(mac=nic.mac, mode=nic.mode or "bridged", link=nic.link or "",
                         vlan=nic.vlan or "", ip=nic.ip or None, name=nic.name or None,
                         uuid=nic.uuid or "", network=nic.network or None,
                         network_env=tuple(sorted(nic.network_env.items())))
                 for nic in nics)


def network_spec(inst: InstancePayload) -> InstanceSpec:
    """The part of the spec a NIC's configuration needs (name, UUID, NICs, tags): for the
    routed NICs' ifup (`kvm.ifup`), where no disk is assembled."""
    return InstanceSpec(name=inst.name, uuid=inst.uuid, maxmem=0, vcpus=0, hvparams={},
                        nics=nic_specs(inst.nics), tags=tuple(inst.tags))


def password_files(hvparams: Mapping[str, object]) -> dict[str, str]:
    """Which password files the domain needs read: {"vnc"|"spice": path}."""
    wanted = {}
    if hvparams.get("vnc_bind_address") and hvparams.get("vnc_password_file"):
        wanted["vnc"] = str(hvparams["vnc_password_file"])
    if hvparams.get("spice_bind") and hvparams.get("spice_password_file"):
        wanted["spice"] = str(hvparams["spice_password_file"])
    return wanted


def bind_interfaces(hvparams: Mapping[str, object]) -> list[str]:
    """Interface names (not addresses, not socket directories) the bind parameters name."""
    import ipaddress

    found = []
    for key in BIND_PARAMS:
        value = str(hvparams.get(key) or "")
        if not value or value.startswith("/"):
            continue
        try:
            ipaddress.ip_address(value)
        except ValueError:
            found.append(value)
    return found


def from_payload(inst: InstancePayload, disks: Sequence[DiskSpec], *, kvm_usable: bool,
                 serial_log: str | None = None, run_as: tuple[int, int] | None = None,
                 passwords: Mapping[str, str] | None = None,
                 interface_addresses: Mapping[str, str] | None = None) -> InstanceSpec:
    beparams = inst.beparams
    maxmem = int(beparams.get("maxmem") or inst.memory)
    minmem = beparams.get("minmem")
    passwords = passwords or {}
    return InstanceSpec(
        name=inst.name, uuid=inst.uuid, maxmem=maxmem,
        vcpus=int(beparams.get("vcpus") or inst.vcpus),
        hvparams=dict(inst.hvparams), disks=tuple(disks), nics=nic_specs(inst.nics),
        minmem=int(minmem) if minmem is not None else None,
        network_port=inst.network_port, serial_log=serial_log,
        kvm_usable=kvm_usable, run_as=run_as, vnc_password=passwords.get("vnc"),
        spice_password=passwords.get("spice"),
        interface_addresses=dict(interface_addresses or {}), tags=tuple(inst.tags))
