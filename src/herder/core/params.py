"""Every parameter herder knows, declared once with its type, default and owner.

design-2.1 "Disk/Net parameters", "Global hypervisor parameters", "Non bridged instances":
parameters live at cluster level and may be overridden per group, node, instance, disk or NIC;
a "filled" view resolves them. Unknown parameters are refused; hypervisor parameters that only
make sense cluster-wide cannot be set on an instance. Names, types and defaults follow Ganeti 3.0
so that imported configs and Ganeti tools agree on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from herder.core import sizes
from herder.core.errors import ParameterError

Params = dict[str, Any]

# Kinds of values. "size" is MiB, accepting unit suffixes on input; "maybe-string" may be None.
KINDS = frozenset({"bool", "int", "float", "string", "maybe-string", "size"})


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One declared parameter."""

    name: str
    kind: str
    default: Any
    choices: frozenset[str] | None = None
    global_only: bool = False  # hypervisor parameter settable only at cluster level


@dataclass(frozen=True, slots=True)
class ParamFamily:
    """A named set of parameters with one owner, e.g. the kvm hypervisor or the drbd template."""

    owner: str
    specs: Mapping[str, ParamSpec]

    def defaults(self) -> Params:
        return {name: spec.default for name, spec in self.specs.items()}


# Hypervisor parameters that only exist cluster-wide (Ganeti's HVC_GLOBALS).
HV_GLOBAL_PARAMS = frozenset({"migration_bandwidth", "migration_mode", "migration_port", "xen_cmd"})

_HV_CHOICES: dict[str, frozenset[str]] = {
    "migration_mode": frozenset({"live", "non-live"}),
    "reboot_behavior": frozenset({"reboot", "exit"}),
    "xen_cmd": frozenset({"xm", "xl"}),
}

# hypervisor -> parameter -> (kind, default)
_HV_TABLE: dict[str, dict[str, tuple[str, Any]]] = {
    "kvm": {
        "acpi": ("bool", True),
        "boot_order": ("string", 'disk'),
        "cdrom2_image_path": ("string", ''),
        "cdrom_disk_type": ("string", ''),
        "cdrom_image_path": ("string", ''),
        "cpu_cores": ("int", 0),
        "cpu_mask": ("string", 'all'),
        "cpu_sockets": ("int", 0),
        "cpu_threads": ("int", 0),
        "cpu_type": ("string", ''),
        "disk_aio": ("string", 'threads'),
        "disk_cache": ("string", 'default'),
        "disk_discard": ("string", 'default'),
        "disk_type": ("string", 'paravirtual'),
        "floppy_image_path": ("string", ''),
        "initrd_path": ("string", ''),
        "kernel_args": ("string", 'ro'),
        "kernel_path": ("string", '/boot/vmlinuz-3-kvmU'),
        "keymap": ("string", ''),
        "kvm_extra": ("string", ''),
        "kvm_flag": ("string", ''),
        "kvm_path": ("string", '/usr/bin/kvm'),
        "kvm_pci_reservations": ("int", 12),
        "machine_version": ("string", ''),
        "mem_path": ("string", ''),
        "migration_bandwidth": ("int", 32),
        "migration_caps": ("string", ''),
        "migration_downtime": ("int", 30),
        "migration_mode": ("string", 'live'),
        "migration_port": ("int", 8102),
        "nic_type": ("string", 'paravirtual'),
        "reboot_behavior": ("string", 'reboot'),
        "root_path": ("maybe-string", '/dev/vda1'),
        "scsi_controller_type": ("string", 'lsi'),
        "security_domain": ("string", ''),
        "security_model": ("string", 'none'),
        "serial_console": ("bool", True),
        "serial_speed": ("int", 38400),
        "soundhw": ("string", ''),
        "spice_bind": ("string", ''),
        "spice_image_compression": ("string", ''),
        "spice_ip_version": ("int", 0),
        "spice_jpeg_wan_compression": ("string", ''),
        "spice_password_file": ("string", ''),
        "spice_playback_compression": ("bool", True),
        "spice_streaming_video": ("string", ''),
        "spice_tls_ciphers": ("string", 'HIGH:-DES:-3DES:-EXPORT:-DH'),
        "spice_use_tls": ("bool", False),
        "spice_use_vdagent": ("bool", True),
        "spice_zlib_glz_wan_compression": ("string", ''),
        "usb_devices": ("string", ''),
        "usb_mouse": ("string", ''),
        "use_chroot": ("bool", False),
        "use_guest_agent": ("bool", False),
        "use_localtime": ("bool", False),
        "user_shutdown": ("bool", False),
        "vga": ("string", ''),
        "vhost_net": ("bool", False),
        "virtio_net_queues": ("int", 1),
        "vnc_bind_address": ("string", ''),
        "vnc_password_file": ("string", ''),
        "vnc_tls": ("bool", False),
        "vnc_x509_path": ("string", ''),
        "vnc_x509_verify": ("bool", False),
        "vnet_hdr": ("bool", True),
    },
    "xen-pvm": {
        "blockdev_prefix": ("string", 'sd'),
        "bootloader_args": ("string", ''),
        "bootloader_path": ("string", ''),
        "cpu_cap": ("int", 0),
        "cpu_mask": ("string", 'all'),
        "cpu_weight": ("int", 256),
        "cpuid": ("string", ''),
        "initrd_path": ("string", ''),
        "kernel_args": ("string", 'ro'),
        "kernel_path": ("string", '/boot/vmlinuz-3-xenU'),
        "migration_mode": ("string", 'live'),
        "migration_port": ("int", 8002),
        "reboot_behavior": ("string", 'reboot'),
        "root_path": ("maybe-string", '/dev/xvda1'),
        "soundhw": ("string", ''),
        "use_bootloader": ("bool", False),
        "vif_script": ("string", ''),
        "xen_cmd": ("string", 'xm'),
    },
    "chroot": {
        "init_script": ("string", '/ganeti-chroot'),
    },
    "xen-hvm": {
        "acpi": ("bool", True),
        "blockdev_prefix": ("string", 'hd'),
        "boot_order": ("string", 'cd'),
        "cdrom_image_path": ("string", ''),
        "cpu_cap": ("int", 0),
        "cpu_mask": ("string", 'all'),
        "cpu_weight": ("int", 256),
        "cpuid": ("string", ''),
        "device_model": ("string", '/usr/lib/xen/bin/qemu-dm'),
        "disk_type": ("string", 'paravirtual'),
        "kernel_path": ("string", '/usr/lib/xen/boot/hvmloader'),
        "migration_mode": ("string", 'non-live'),
        "migration_port": ("int", 8002),
        "nic_type": ("string", 'rtl8139'),
        "pae": ("bool", True),
        "pci_pass": ("string", ''),
        "reboot_behavior": ("string", 'reboot'),
        "soundhw": ("string", ''),
        "use_localtime": ("bool", False),
        "vif_script": ("string", ''),
        "vif_type": ("string", 'ioemu'),
        "viridian": ("bool", False),
        "vnc_bind_address": ("string", '0.0.0.0'),
        "xen_cmd": ("string", 'xm'),
    },
    "lxc": {
        "cpu_mask": ("string", ''),
        "devices": (
            "string",
            "c 1:3 rw,c 1:5 rw,c 1:7 rw,c 1:8 rw,c 1:9 rw,c 1:10 rw,c 5:0 rw,c 5:1 rw,c 5:2 rw,"
            "c 136:* rw",
        ),
        "drop_capabilities": ("string", 'mac_override,sys_boot,sys_module,sys_time,sys_admin'),
        "extra_cgroups": ("string", ''),
        "extra_config": ("string", ''),
        "num_ttys": ("int", 6),
        "startup_timeout": ("int", 30),
    },
    "fake": {
        "migration_mode": ("string", 'live'),
        # herder: as kvm's (design-2.1 "VNC Console Password"), so simulated clusters can test
        # the redistribution of the password files.
        "vnc_password_file": ("string", ''),
    },
}

_BE_TABLE: dict[str, tuple[str, Any]] = {
    "always_failover": ("bool", False),
    "auto_balance": ("bool", True),
    "maxmem": ("size", 128),
    "minmem": ("size", 128),
    "spindle_use": ("int", 1),
    "vcpus": ("int", 1),
}

_ND_TABLE: dict[str, tuple[str, Any]] = {
    "cpu_speed": ("float", 1.0),
    "exclusive_storage": ("bool", False),
    "oob_program": ("string", ""),
    "ovs": ("bool", False),
    "ovs_link": ("maybe-string", ""),
    "ovs_name": ("maybe-string", "switch1"),
    "spindle_count": ("int", 1),
    "ssh_port": ("int", 22),
    # herder: the node's libvirt URI (noded's hypervisor connection)
    "libvirt_uri": ("string", "qemu:///system"),
}

NIC_MODES = frozenset({"bridged", "routed", "openvswitch", "pool"})
NIC_MODE_BRIDGED = "bridged"
NIC_MODE_ROUTED = "routed"

_NIC_TABLE: dict[str, tuple[str, Any]] = {
    "mode": ("string", NIC_MODE_BRIDGED),
    "link": ("string", "xen-br0"),
    "vlan": ("string", ""),
}

# disk template -> parameter -> (kind, default)
_DISK_TABLE: dict[str, dict[str, tuple[str, Any]]] = {
    "diskless": {},
    "file": {},
    "sharedfile": {},
    "blockdev": {},
    "plain": {"stripes": ("int", 1)},
    "drbd": {
        "c-delay-target": ("int", 1),
        "c-fill-target": ("int", 0),
        "c-max-rate": ("int", 61440),
        "c-min-rate": ("int", 4096),
        "c-plan-ahead": ("int", 20),
        "data-stripes": ("int", 1),
        "disk-barriers": ("string", "n"),
        "disk-custom": ("string", ""),
        "dynamic-resync": ("bool", False),
        "meta-barriers": ("bool", False),
        "meta-stripes": ("int", 1),
        "metavg": ("string", "xenvg"),
        "net-custom": ("string", ""),
        "protocol": ("string", "C"),
        "resync-rate": ("int", 61440),
    },
    "rbd": {"access": ("string", "kernelspace"), "pool": ("string", "rbd")},
    "ext": {"access": ("string", "kernelspace")},
    "gluster": {
        "access": ("string", "kernelspace"),
        "host": ("string", "127.0.0.1"),
        "port": ("int", 24007),
        "volume": ("string", "gv0"),
    },
}

_DISK_CHOICES: dict[str, frozenset[str]] = {
    "access": frozenset({"kernelspace", "userspace"}),
    "protocol": frozenset({"A", "B", "C"}),
}

HYPERVISORS = frozenset(_HV_TABLE)
DISK_TEMPLATES = frozenset(_DISK_TABLE)
# Templates whose data is mirrored on a second node by herder itself.
DTS_INT_MIRROR = frozenset({"drbd"})
# Templates whose storage is shared/external, so any node in the group can run the instance.
DTS_EXT_MIRROR = frozenset({"blockdev", "diskless", "ext", "gluster", "rbd", "sharedfile"})
DTS_LVM = frozenset({"drbd", "plain"})


def _family(
    owner: str,
    table: Mapping[str, tuple[str, Any]],
    choices: Mapping[str, frozenset[str]] | None = None,
    global_only: frozenset[str] = frozenset(),
) -> ParamFamily:
    choices = choices or {}
    specs = {
        name: ParamSpec(name, kind, default, choices.get(name), name in global_only)
        for name, (kind, default) in table.items()
    }
    return ParamFamily(owner, specs)


HV_FAMILIES: dict[str, ParamFamily] = {
    hv: _family(f"hypervisor {hv}", table, _HV_CHOICES, HV_GLOBAL_PARAMS)
    for hv, table in _HV_TABLE.items()
}
BE_FAMILY = _family("backend", _BE_TABLE)
ND_FAMILY = _family("node", _ND_TABLE)
NIC_FAMILY = _family("nic", _NIC_TABLE, {"mode": NIC_MODES})
DISK_FAMILIES: dict[str, ParamFamily] = {
    dt: _family(f"disk template {dt}", table, _DISK_CHOICES) for dt, table in _DISK_TABLE.items()
}


def hv_family(hypervisor: str) -> ParamFamily:
    try:
        return HV_FAMILIES[hypervisor]
    except KeyError:
        raise ParameterError(
            f"unknown hypervisor {hypervisor!r} (known: {', '.join(sorted(HYPERVISORS))})"
        ) from None


def disk_family(template: str) -> ParamFamily:
    try:
        return DISK_FAMILIES[template]
    except KeyError:
        raise ParameterError(
            f"unknown disk template {template!r} (known: {', '.join(sorted(DISK_TEMPLATES))})"
        ) from None


def parse_size(value: Any) -> int:
    """A size in whole MiB from an int or a string such as "512", "512M", "2G", "1.5T"
    (`herder.core.sizes`, the command line's convention); a non-zero size is at least 1."""
    if isinstance(value, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            mib = sizes.parse_size(value, "m")
        except ValueError:
            pass
        else:
            return round(mib) if mib >= 1 or mib == 0 else 1
    raise ValueError(f"not a size: {value!r} (use e.g. 512, 512M, 2G)")


_TRUE = {"true", "yes", "on", "1", "y"}
_FALSE = {"false", "no", "off", "0", "n"}


def coerce(spec: ParamSpec, value: Any) -> Any:
    """Check one value against its spec; strings (from the command line) are converted."""
    kind = spec.kind
    try:
        if kind == "bool":
            if isinstance(value, bool):
                result: Any = value
            elif isinstance(value, str) and value.lower() in _TRUE | _FALSE:
                result = value.lower() in _TRUE
            else:
                raise ValueError("expected a boolean (true/false)")
        elif kind == "int":
            whole = (
                (isinstance(value, int) and not isinstance(value, bool))
                or (isinstance(value, float) and value.is_integer())
                or (isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()) is not None)
            )
            if not whole:
                raise ValueError("expected an integer")
            result = int(value)
        elif kind == "float":
            if isinstance(value, bool):
                raise ValueError("expected a number")
            result = float(value)
        elif kind == "size":
            result = parse_size(value)
        elif kind == "maybe-string":
            if value is not None and not isinstance(value, str):
                raise ValueError("expected a string or null")
            result = value
        else:
            if not isinstance(value, str):
                raise ValueError("expected a string")
            result = value
    except (TypeError, ValueError) as err:
        raise ParameterError(f"parameter {spec.name!r}: {err}, got {value!r}") from None
    if spec.choices is not None and result not in spec.choices:
        raise ParameterError(
            f"parameter {spec.name!r}: {result!r} is not one of {', '.join(sorted(spec.choices))}"
        )
    return result


def validate(
    family: ParamFamily, params: Mapping[str, Any], *, instance_level: bool = False
) -> Params:
    """Check and coerce a set of overrides for `family`; returns a new dict.

    Refuses unknown names and, at instance level, cluster-wide-only hypervisor parameters.
    """
    result: Params = {}
    for name, value in params.items():
        spec = family.specs.get(name)
        if spec is None:
            known = ", ".join(sorted(family.specs)) or "none"
            raise ParameterError(f"unknown {family.owner} parameter {name!r} (known: {known})")
        if instance_level and spec.global_only:
            raise ParameterError(
                f"{family.owner} parameter {name!r} is cluster-wide only and cannot be set "
                "on an instance; set it with 'herder cluster modify'"
            )
        result[name] = coerce(spec, value)
    return result


def fill(base: Mapping[str, Any], *overrides: Mapping[str, Any] | None) -> Params:
    """Layer overrides on a base: later layers win; None layers are skipped."""
    result = dict(base)
    for layer in overrides:
        if layer:
            result.update(layer)
    return result


def drop_global_hv_params(hvparams: Mapping[str, Any]) -> Params:
    """What an older config's instance keeps of its hvparams after upgrade (design-2.1)."""
    return {k: v for k, v in hvparams.items() if k not in HV_GLOBAL_PARAMS}


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """Ganeti-style `key=value` lists (each item may hold several, comma-separated).

    `key=default` or `-key` resets an override (value None); `no_key` sets a boolean false.
    Values stay strings; `validate` converts them to the declared types.
    """
    result: dict[str, Any] = {}
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if "=" in part:
                key, value = (x.strip() for x in part.split("=", 1))
                if not key:
                    raise ParameterError(f"missing parameter name in {part!r}")
                result[key] = None if value == "default" else value
            elif part.startswith("-") and len(part) > 1:
                result[part[1:]] = None
            elif part.startswith("no_") and len(part) > 3:
                result[part[3:]] = "false"
            else:
                raise ParameterError(f"expected key=value, -key or no_key, got {part!r}")
    return result


def apply_overrides(
    family: ParamFamily,
    current: Mapping[str, Any],
    changes: Mapping[str, Any],
    *,
    instance_level: bool = False,
) -> Params:
    """New overrides after `changes` (None values reset a parameter to the inherited value)."""
    result = dict(current)
    for key, value in changes.items():
        if value is None:
            if key not in family.specs:
                validate(family, {key: ""})  # raises the unknown-parameter error
            result.pop(key, None)
    result.update(
        validate(
            family,
            {k: v for k, v in changes.items() if v is not None},
            instance_level=instance_level,
        )
    )
    return result
