"""Every parameter herder knows, declared once with its type, default and owner.

design-2.1 "Disk/Net parameters", "Global hypervisor parameters", "Non bridged instances":
parameters live at cluster level and may be overridden per group, node, instance, disk or NIC;
a "filled" view resolves them. Unknown parameters are refused; hypervisor parameters that only
make sense cluster-wide cannot be set on an instance. Names, types and defaults follow Ganeti 3.0
so that imported configs and Ganeti tools agree on them.

Each parameter also carries Ganeti 3.0's value check (a port's range, an enum's values, an
absolute normalised path, a CPU mask's syntax: hv_base's `*_CHECK`s and the hypervisors'
`PARAMETERS`), and each family the relations Ganeti checks between its parameters (kvm's
CheckParameterSyntax, minmem <= maxmem, a bridged NIC's link). Every edge that takes parameters
(an opcode at submission, hence RAPI and the CLI alike; a config document when decoded) checks
them here, and an error names the parameter.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from herder.core import sizes
from herder.core.errors import ParameterError

Params = dict[str, Any]

# Kinds of values. "size" is MiB, accepting unit suffixes on input; "maybe-string" may be None.
KINDS = frozenset({"bool", "int", "float", "string", "maybe-string", "size"})


@dataclass(frozen=True, slots=True)
class Check:
    """What a value must be beyond its kind: one of Ganeti's parameter check functions
    (hv_base's `*_CHECK`s, `ParamInSet`). `problem` is the error's text, `{value!r}` filled in.
    An optional parameter may be left unspecified ("" or None) whatever the test says, as
    Ganeti's `_IsParamValueUnspecified`."""

    test: Callable[[Any], bool]
    problem: str
    optional: bool = False

    def passes(self, value: Any) -> bool:
        if self.optional and (value is None or value == ""):
            return True
        try:
            return bool(self.test(value))
        except (TypeError, ValueError):
            return False


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One declared parameter."""

    name: str
    kind: str
    default: Any
    check: Check | None = None
    global_only: bool = False  # hypervisor parameter settable only at cluster level


# A relation between parameters of one family (Ganeti's CheckParameterSyntax beyond single
# values), over the filled parameters: the names it reads, and the problem it finds (or None).
@dataclass(frozen=True, slots=True)
class Relation:
    names: frozenset[str]
    problem: Callable[[Mapping[str, Any]], str | None]


@dataclass(frozen=True, slots=True)
class ParamFamily:
    """A named set of parameters with one owner, e.g. the kvm hypervisor or the drbd template."""

    owner: str
    specs: Mapping[str, ParamSpec]
    relations: tuple[Relation, ...] = ()

    def defaults(self) -> Params:
        return {name: spec.default for name, spec in self.specs.items()}


# --- checks (Ganeti 3.0's, by the names hv_base gives them) -----------------------------------


def one_of(values: Iterable[Any], *, optional: bool = False) -> Check:
    """Ganeti's ParamInSet."""
    allowed = frozenset(values)
    listed = ", ".join(sorted(str(v) for v in allowed))
    return Check(lambda v: v in allowed, f"{{value!r}} is not one of {listed}", optional)


def is_norm_abs_path(value: Any) -> bool:
    """Ganeti's utils.IsNormAbsPath: absolute and normalised (no `..`, `//`, trailing `/`)."""
    return (isinstance(value, str) and "\0" not in value and os.path.isabs(value)
            and os.path.normpath(value) == value)


def is_url(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"(https?|ftps?)://[^\s\0]+", value) is not None


def abs_path(*, optional: bool = True) -> Check:
    """OPT_FILE_CHECK / OPT_DIR_CHECK / REQ_FILE_CHECK, the part the master checks."""
    return Check(is_norm_abs_path, "must be an absolute normalized path, got {value!r}",
                 optional)


def abs_path_or_url(*, optional: bool = True) -> Check:
    return Check(lambda v: is_norm_abs_path(v) or is_url(v),
                 "must be an absolute normalized path or a URL, got {value!r}", optional)


def at_least(lowest: float, *, optional: bool = False) -> Check:
    return Check(lambda v: v >= lowest,
                 "cannot be negative, got {value!r}" if lowest == 0
                 else f"must be at least {lowest:g}, got {{value!r}}", optional)


def between(lowest: float, highest: float, what: str = "", *, optional: bool = False) -> Check:
    text = what or f"must be between {lowest:g} and {highest:g}"
    return Check(lambda v: lowest <= v <= highest, f"{text}, got {{value!r}}", optional)


# Ganeti's _NET_PORT_CHECK: 0 < port < 65535
NET_PORT = between(1, 65534, "invalid port number (1-65534)")


# The highest CPU number a mask may name: libvirt's cpuset limit (VIR_DOMAIN_CPUMASK_LEN,
# 16384 CPUs; Linux's NR_CPUS is at most 8192). A mask is checked range by range and never
# expanded, so `0-15000000` costs what `0-3` does (issue 35).
MAX_CPU = 16383


def cpu_mask_ranges(mask: str) -> list[tuple[int, int]]:
    """Ganeti's utils.ParseCpuMask, as ranges: "0-2,5" -> [(0, 2), (5, 5)]; ValueError when
    malformed or naming a CPU above MAX_CPU."""
    ranges: list[tuple[int, int]] = []
    for part in mask.split(","):
        bounds = part.split("-")
        if len(bounds) > 2 or not all(b.isascii() and b.isdigit() for b in bounds):
            raise ValueError(f"invalid CPU range {part!r}")
        lower, upper = int(bounds[0]), int(bounds[-1])
        if lower > upper:
            raise ValueError(f"invalid CPU range {part!r}")
        if upper > MAX_CPU:
            raise ValueError(f"CPU range {part!r}: CPU numbers go up to {MAX_CPU}")
        ranges.append((lower, upper))
    return ranges


def _cpu_mask_well_formed(mask: Any) -> bool:
    return isinstance(mask, str) and len(cpu_mask_ranges(mask)) > 0


def _multi_cpu_mask_well_formed(mask: Any) -> bool:
    """Ganeti's ParseMultiCpuMask: cpu masks separated by ":", each may be "all"."""
    return isinstance(mask, str) and all(
        part == "all" or _cpu_mask_well_formed(part) for part in mask.split(":"))


CPU_MASK = Check(_cpu_mask_well_formed, "CPU mask definition is not well-formed (CPU numbers "
                 f"go up to {MAX_CPU}): {{value!r}}", optional=True)
MULTI_CPU_MASK = Check(_multi_cpu_mask_well_formed,
                       "Multiple CPU mask definition is not well-formed (CPU numbers go up to "
                       f"{MAX_CPU}): {{value!r}}", optional=True)


def _ip_address(value: Any) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def is_interface_name(value: Any) -> bool:
    """A network interface's name as Linux allows it (IFNAMSIZ, no `/`, no blanks)."""
    return isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_.:@+-]{1,15}", value) is not None


# kvm's vnc_bind_address / spice_bind: an address, an interface, or (vnc) a socket directory
BIND_ADDRESS = Check(lambda v: _ip_address(v) or is_interface_name(v) or is_norm_abs_path(v),
                     "must be an IP address, an interface name or an absolute path, got "
                     "{value!r}", optional=True)
SPICE_BIND = Check(lambda v: _ip_address(v) or is_interface_name(v),
                   "must be an IP address or an interface name, got {value!r}", optional=True)
IP4_ADDRESS = Check(lambda v: isinstance(v, str) and _ip_address(v) and "." in v,
                    "VNC bind address is not a valid IP address: {value!r}", optional=True)
# Ganeti's xen-hvm boot order: one or more of a, c, d, n
XEN_BOOT_ORDER = Check(lambda v: isinstance(v, str) and v != "" and not v.strip("acdn"),
                       "Invalid boot order specified, must be one or more of [acdn], got "
                       "{value!r}")
# an LVM volume group name (metavg): what lvm(8) allows
VG_NAME = Check(lambda v: isinstance(v, str)
                and re.fullmatch(r"[A-Za-z0-9+_][A-Za-z0-9+_.-]{0,126}", v) is not None
                and v not in (".", ".."), "is not a valid volume group name: {value!r}",
                optional=True)
# DRBD's disk-barriers: "n" or a combination of b (barrier), f (flush), d (drain)
DRBD_BARRIERS = Check(lambda v: v == "n" or (v != "" and not v.strip("bfd")
                                              and len(set(v)) == len(v)),
                      "must be n or a combination of b, f and d, got {value!r}")


def is_vlan(value: Any) -> bool:
    """Ganeti's VLAN syntax: N (an access port), .N, :N[:M...] (trunk), .N:M[...]."""
    return isinstance(value, str) and (
        value == "" or re.fullmatch(r"\d+|\.\d+(:\d+)*|(:\d+)+", value) is not None)


VLAN = Check(is_vlan, "Specified VLAN parameter is invalid: {value!r}", optional=True)

# --- Ganeti 3.0's value sets (constants) ------------------------------------------------------

MIGRATION_MODES = frozenset({"live", "non-live"})
REBOOT_BEHAVIORS = frozenset({"reboot", "exit"})
KNOWN_XEN_COMMANDS = frozenset({"xm", "xl"})
KVM_BOOT_ORDERS = frozenset({"floppy", "cdrom", "disk", "network"})
KVM_NIC_TYPES = frozenset({"rtl8139", "ne2k_pci", "ne2k_isa", "paravirtual", "i82551",
                           "i82557b", "i82559er", "pcnet", "e1000"})
KVM_DISK_TYPES = frozenset({"ide", "scsi", "sd", "mtd", "pflash", "paravirtual", "scsi-block",
                            "scsi-generic", "scsi-hd", "scsi-cd"})
KVM_SCSI_CONTROLLER_TYPES = frozenset({"lsi", "megasas", "virtio-scsi-pci"})
DISCARD_TYPES = frozenset({"default", "ignore", "unmap"})
KVM_MOUSE_TYPES = frozenset({"mouse", "tablet"})
CACHE_TYPES = frozenset({"default", "none", "writethrough", "writeback"})
KVM_AIO_TYPES = frozenset({"threads", "native"})
KVM_SECURITY_MODELS = frozenset({"none", "user", "pool"})
KVM_FLAG_VALUES = frozenset({"enabled", "disabled"})
SPICE_LOSSLESS_COMPRESSIONS = frozenset({"auto_glz", "auto_lz", "glz", "lz", "off", "quic"})
SPICE_LOSSY_COMPRESSIONS = frozenset({"always", "auto", "never"})
SPICE_VIDEO_DETECTIONS = frozenset({"all", "filter", "off"})
SPICE_IP_VERSIONS = frozenset({0, 4, 6})  # 0: IFACE_NO_IP_VERSION_SPECIFIED
SERIAL_SPEEDS = frozenset({75, 110, 300, 600, 1200, 1800, 2400, 4800, 9600, 14400, 19200,
                           28800, 38400, 57600, 115200, 230400, 345600, 460800})
QEMU_PCI_SLOTS = 32
HVM_NIC_TYPES = frozenset({"rtl8139", "ne2k_pci", "ne2k_isa", "paravirtual", "e1000"})
HVM_DISK_TYPES = frozenset({"paravirtual", "ioemu"})
HVM_VIF_TYPES = frozenset({"ioemu", "vif"})
DISK_ACCESS_MODES = frozenset({"kernelspace", "userspace"})
DRBD_PROTOCOLS = frozenset({"A", "B", "C"})

# Hypervisor parameters that only exist cluster-wide (Ganeti's HVC_GLOBALS).
HV_GLOBAL_PARAMS = frozenset({"migration_bandwidth", "migration_mode", "migration_port", "xen_cmd"})

Row = tuple[str, Any] | tuple[str, Any, Check]

# hypervisor -> parameter -> (kind, default[, check]); the checks are Ganeti 3.0's PARAMETERS
_HV_TABLE: dict[str, dict[str, Row]] = {
    "kvm": {
        "acpi": ("bool", True),
        "boot_order": ("string", 'disk', one_of(KVM_BOOT_ORDERS)),
        "cdrom2_image_path": ("string", '', abs_path_or_url()),
        "cdrom_disk_type": ("string", '', one_of(KVM_DISK_TYPES, optional=True)),
        "cdrom_image_path": ("string", '', abs_path_or_url()),
        "cpu_cores": ("int", 0, at_least(0)),
        "cpu_mask": ("string", 'all', MULTI_CPU_MASK),
        "cpu_sockets": ("int", 0, at_least(0)),
        "cpu_threads": ("int", 0, at_least(0)),
        "cpu_type": ("string", ''),
        "disk_aio": ("string", 'threads', one_of(KVM_AIO_TYPES, optional=True)),
        "disk_cache": ("string", 'default', one_of(CACHE_TYPES)),
        "disk_discard": ("string", 'default', one_of(DISCARD_TYPES, optional=True)),
        "disk_type": ("string", 'paravirtual', one_of(KVM_DISK_TYPES)),
        "floppy_image_path": ("string", '', abs_path()),
        "initrd_path": ("string", '', abs_path()),
        "kernel_args": ("string", 'ro'),
        "kernel_path": ("string", '/boot/vmlinuz-3-kvmU', abs_path()),
        "keymap": ("string", ''),
        "kvm_extra": ("string", ''),
        "kvm_flag": ("string", '', one_of(KVM_FLAG_VALUES, optional=True)),
        "kvm_path": ("string", '/usr/bin/kvm', abs_path(optional=False)),
        "kvm_pci_reservations": ("int", 12, between(0, QEMU_PCI_SLOTS,
                                                    "The number of PCI slots managed by QEMU "
                                                    f"(max: {QEMU_PCI_SLOTS})")),
        "machine_version": ("string", ''),
        "mem_path": ("string", '', abs_path()),
        "migration_bandwidth": ("int", 32, at_least(0)),
        "migration_caps": ("string", ''),
        "migration_downtime": ("int", 30, at_least(0)),
        "migration_mode": ("string", 'live', one_of(MIGRATION_MODES)),
        "migration_port": ("int", 8102, NET_PORT),
        "nic_type": ("string", 'paravirtual', one_of(KVM_NIC_TYPES)),
        "reboot_behavior": ("string", 'reboot', one_of(REBOOT_BEHAVIORS)),
        "root_path": ("maybe-string", '/dev/vda1'),
        "scsi_controller_type": ("string", 'lsi', one_of(KVM_SCSI_CONTROLLER_TYPES)),
        "security_domain": ("string", ''),
        "security_model": ("string", 'none', one_of(KVM_SECURITY_MODELS)),
        "serial_console": ("bool", True),
        "serial_speed": ("int", 38400),
        "soundhw": ("string", ''),
        "spice_bind": ("string", '', SPICE_BIND),
        "spice_image_compression": ("string", '',
                                    one_of(SPICE_LOSSLESS_COMPRESSIONS, optional=True)),
        "spice_ip_version": ("int", 0, Check(lambda v: v in SPICE_IP_VERSIONS,
                                             "The SPICE IP version should be 4 or 6, got "
                                             "{value!r}")),
        "spice_jpeg_wan_compression": ("string", '',
                                       one_of(SPICE_LOSSY_COMPRESSIONS, optional=True)),
        "spice_password_file": ("string", '', abs_path()),
        "spice_playback_compression": ("bool", True),
        "spice_streaming_video": ("string", '', one_of(SPICE_VIDEO_DETECTIONS, optional=True)),
        "spice_tls_ciphers": ("string", 'HIGH:-DES:-3DES:-EXPORT:-DH'),
        "spice_use_tls": ("bool", False),
        "spice_use_vdagent": ("bool", True),
        "spice_zlib_glz_wan_compression": ("string", '',
                                           one_of(SPICE_LOSSY_COMPRESSIONS, optional=True)),
        "usb_devices": ("string", ''),
        "usb_mouse": ("string", '', one_of(KVM_MOUSE_TYPES, optional=True)),
        "use_chroot": ("bool", False),
        "use_guest_agent": ("bool", False),
        "use_localtime": ("bool", False),
        "user_shutdown": ("bool", False),
        "vga": ("string", ''),
        "vhost_net": ("bool", False),
        "virtio_net_queues": ("int", 1, between(1, 8, "invalid number of queues (1-8)")),
        "vnc_bind_address": ("string", '', BIND_ADDRESS),
        "vnc_password_file": ("string", '', abs_path()),
        "vnc_tls": ("bool", False),
        "vnc_x509_path": ("string", '', abs_path()),
        "vnc_x509_verify": ("bool", False),
        "vnet_hdr": ("bool", True),
    },
    "xen-pvm": {
        "blockdev_prefix": ("string", 'sd'),
        "bootloader_args": ("string", ''),
        "bootloader_path": ("string", '', abs_path()),
        "cpu_cap": ("int", 0, at_least(0)),
        "cpu_mask": ("string", 'all', MULTI_CPU_MASK),
        "cpu_weight": ("int", 256, between(1, 65535, "invalid weight (1-65535)")),
        "cpuid": ("string", ''),
        "initrd_path": ("string", '', abs_path()),
        "kernel_args": ("string", 'ro'),
        "kernel_path": ("string", '/boot/vmlinuz-3-xenU', abs_path(optional=False)),
        "migration_mode": ("string", 'live', one_of(MIGRATION_MODES)),
        "migration_port": ("int", 8002, NET_PORT),
        "reboot_behavior": ("string", 'reboot', one_of(REBOOT_BEHAVIORS)),
        "root_path": ("maybe-string", '/dev/xvda1'),
        "soundhw": ("string", ''),
        "use_bootloader": ("bool", False),
        "vif_script": ("string", '', abs_path()),
        "xen_cmd": ("string", 'xm', one_of(KNOWN_XEN_COMMANDS)),
    },
    "chroot": {
        "init_script": ("string", '/ganeti-chroot', abs_path(optional=False)),
    },
    "xen-hvm": {
        "acpi": ("bool", True),
        "blockdev_prefix": ("string", 'hd'),
        "boot_order": ("string", 'cd', XEN_BOOT_ORDER),
        "cdrom_image_path": ("string", '', abs_path()),
        "cpu_cap": ("int", 0),
        "cpu_mask": ("string", 'all', MULTI_CPU_MASK),
        "cpu_weight": ("int", 256, between(1, 65534, "invalid weight (1-65534)")),
        "cpuid": ("string", ''),
        "device_model": ("string", '/usr/lib/xen/bin/qemu-dm', abs_path(optional=False)),
        "disk_type": ("string", 'paravirtual', one_of(HVM_DISK_TYPES)),
        "kernel_path": ("string", '/usr/lib/xen/boot/hvmloader', abs_path(optional=False)),
        "migration_mode": ("string", 'non-live', one_of(MIGRATION_MODES)),
        "migration_port": ("int", 8002, NET_PORT),
        "nic_type": ("string", 'rtl8139', one_of(HVM_NIC_TYPES)),
        "pae": ("bool", True),
        "pci_pass": ("string", ''),
        "reboot_behavior": ("string", 'reboot', one_of(REBOOT_BEHAVIORS)),
        "soundhw": ("string", ''),
        "use_localtime": ("bool", False),
        "vif_script": ("string", '', abs_path()),
        "vif_type": ("string", 'ioemu', one_of(HVM_VIF_TYPES, optional=True)),
        "viridian": ("bool", False),
        "vnc_bind_address": ("string", '0.0.0.0', IP4_ADDRESS),
        "xen_cmd": ("string", 'xm', one_of(KNOWN_XEN_COMMANDS)),
    },
    "lxc": {
        "cpu_mask": ("string", '', CPU_MASK),
        "devices": (
            "string",
            "c 1:3 rw,c 1:5 rw,c 1:7 rw,c 1:8 rw,c 1:9 rw,c 1:10 rw,c 5:0 rw,c 5:1 rw,c 5:2 rw,"
            "c 136:* rw",
        ),
        "drop_capabilities": ("string", 'mac_override,sys_boot,sys_module,sys_time,sys_admin'),
        "extra_cgroups": ("string", ''),
        "extra_config": ("string", ''),
        "num_ttys": ("int", 6, at_least(0)),
        "startup_timeout": ("int", 30, at_least(0)),
    },
    "fake": {
        "migration_mode": ("string", 'live', one_of(MIGRATION_MODES)),
        # herder: as kvm's (design-2.1 "VNC Console Password"), so simulated clusters can test
        # the redistribution of the password files.
        "vnc_password_file": ("string", '', abs_path()),
    },
}


# --- kvm's relations (hv_kvm/validation.py's check_* functions) -------------------------------

_SPICE_ADDITIONAL = ("spice_ip_version", "spice_password_file", "spice_image_compression",
                     "spice_jpeg_wan_compression", "spice_zlib_glz_wan_compression",
                     "spice_streaming_video", "spice_use_tls")


def _kvm_boot(hv: Mapping[str, Any]) -> str | None:
    if hv["boot_order"] == "cdrom" and not hv["cdrom_image_path"]:
        return "Cannot boot from cdrom without an ISO path (cdrom_image_path)"
    if hv["kernel_path"] and not hv["root_path"]:
        return "Need a root partition for the instance (root_path), if a kernel is defined"
    return None


def _kvm_security(hv: Mapping[str, Any]) -> str | None:
    if hv["security_model"] == "user" and not hv["security_domain"]:
        return "A security domain (user to run kvm as) must be specified (security_domain)"
    if hv["security_model"] in ("none", "pool") and hv["security_domain"]:
        return "Cannot have a security domain when the security model is 'none' or 'pool'"
    return None


def _kvm_console(hv: Mapping[str, Any]) -> str | None:
    if hv["serial_console"] and hv["serial_speed"] not in SERIAL_SPEEDS:
        return ("Invalid serial console speed (serial_speed), must be one of: "
                + ", ".join(str(s) for s in sorted(SERIAL_SPEEDS)))
    return None


def _kvm_vnc(hv: Mapping[str, Any]) -> str | None:
    if hv["vnc_x509_verify"] and not hv["vnc_x509_path"]:
        return "vnc_x509_path must be defined, if vnc_x509_verify is"
    return None


def _kvm_spice(hv: Mapping[str, Any]) -> str | None:
    bind, version = hv["spice_bind"], hv["spice_ip_version"]
    if bind:
        if version and _ip_address(bind):
            actual = ipaddress.ip_address(bind).version
            if actual != version:
                return (f"SPICE: Got an IPv{actual} address ({bind}), but the specified IP "
                        f"version is {version}")
        return None
    for name in _SPICE_ADDITIONAL:
        if hv[name]:
            return f"SPICE: {name} requires spice_bind to be set"
    return None


def _kvm_disk_cache(hv: Mapping[str, Any]) -> str | None:
    if hv["disk_aio"] == "native" and hv["disk_cache"] != "none":
        return "When 'disk_aio' is set to 'native', the only supported value for 'disk_cache' " \
               "is 'none'."
    return None


_HV_RELATIONS: dict[str, tuple[Relation, ...]] = {
    "kvm": (
        Relation(frozenset({"boot_order", "cdrom_image_path", "kernel_path", "root_path"}),
                 _kvm_boot),
        Relation(frozenset({"security_model", "security_domain"}), _kvm_security),
        Relation(frozenset({"serial_console", "serial_speed"}), _kvm_console),
        Relation(frozenset({"vnc_x509_verify", "vnc_x509_path"}), _kvm_vnc),
        Relation(frozenset({"spice_bind", *_SPICE_ADDITIONAL}), _kvm_spice),
        Relation(frozenset({"disk_aio", "disk_cache"}), _kvm_disk_cache),
    ),
}

# herder: memory and CPUs a VM cannot run without (Ganeti: any non-negative size; its
# instance policy's minimum refuses less at creation)
_BE_TABLE: dict[str, Row] = {
    "always_failover": ("bool", False),
    "auto_balance": ("bool", True),
    # herder: node-failure recovery (docs/ha.md): opt out, and the order (higher first)
    "auto_recover": ("bool", True),
    "ha_priority": ("int", 0, Check(lambda v: -100 <= v <= 100,
                                    "must be between -100 and 100, got {value!r}")),
    "maxmem": ("size", 128, at_least(1)),
    "minmem": ("size", 128, at_least(1)),
    "spindle_use": ("int", 1, at_least(0)),
    "vcpus": ("int", 1, at_least(1)),
}


def _be_memory(be: Mapping[str, Any]) -> str | None:
    if be["minmem"] > be["maxmem"]:
        return f"minmem ({be['minmem']}) must not exceed maxmem ({be['maxmem']})"
    return None


_BE_RELATIONS = (Relation(frozenset({"minmem", "maxmem"}), _be_memory),)

_ND_TABLE: dict[str, Row] = {
    "cpu_speed": ("float", 1.0, Check(lambda v: v > 0, "must be positive, got {value!r}")),
    "exclusive_storage": ("bool", False),
    "oob_program": ("string", "", abs_path()),
    "ovs": ("bool", False),
    "ovs_link": ("maybe-string", ""),
    "ovs_name": ("maybe-string", "switch1"),
    "spindle_count": ("int", 1, at_least(1)),
    "ssh_port": ("int", 22, NET_PORT),
    # herder: the node's libvirt URI (noded's hypervisor connection)
    "libvirt_uri": ("string", "qemu:///system",
                    Check(lambda v: re.fullmatch(r"[a-z0-9+]+:[^\s\0]*", v) is not None,
                          "must be a libvirt URI, got {value!r}")),
    # herder: the watchdog noded pets while it holds its liveness lease (docs/ha.md); "": none
    "watchdog_device": ("string", "/dev/watchdog", abs_path()),
    "watchdog_timeout": ("int", 10, Check(lambda v: 2 <= v <= 600,
                                          "must be between 2 and 600 seconds, got {value!r}")),
}

NIC_MODES = frozenset({"bridged", "routed", "openvswitch", "pool"})
NIC_MODE_BRIDGED = "bridged"
NIC_MODE_ROUTED = "routed"

_NIC_TABLE: dict[str, Row] = {
    "mode": ("string", NIC_MODE_BRIDGED, one_of(NIC_MODES)),
    "link": ("string", "xen-br0"),
    "vlan": ("string", "", VLAN),
}


def _nic_link(nic: Mapping[str, Any]) -> str | None:
    if nic["mode"] == NIC_MODE_BRIDGED and not nic["link"]:
        return "Missing bridged NIC link"
    return None


_NIC_RELATIONS = (Relation(frozenset({"mode", "link"}), _nic_link),)

# disk template -> parameter -> (kind, default[, check])
_DISK_TABLE: dict[str, dict[str, Row]] = {
    "diskless": {},
    "file": {},
    "sharedfile": {},
    "blockdev": {},
    "plain": {"stripes": ("int", 1, at_least(1))},
    "drbd": {
        "c-delay-target": ("int", 1, at_least(0)),
        "c-fill-target": ("int", 0, at_least(0)),
        "c-max-rate": ("int", 61440, at_least(0)),
        "c-min-rate": ("int", 4096, at_least(0)),
        "c-plan-ahead": ("int", 20, at_least(0)),
        "data-stripes": ("int", 1, at_least(1)),
        "disk-barriers": ("string", "n", DRBD_BARRIERS),
        "disk-custom": ("string", ""),
        "dynamic-resync": ("bool", False),
        "meta-barriers": ("bool", False),
        "meta-stripes": ("int", 1, at_least(1)),
        "metavg": ("string", "xenvg", VG_NAME),
        "net-custom": ("string", ""),
        "protocol": ("string", "C", one_of(DRBD_PROTOCOLS)),
        "resync-rate": ("int", 61440, at_least(0)),
    },
    "rbd": {"access": ("string", "kernelspace", one_of(DISK_ACCESS_MODES)),
            "pool": ("string", "rbd")},
    "ext": {"access": ("string", "kernelspace", one_of(DISK_ACCESS_MODES))},
    "gluster": {
        "access": ("string", "kernelspace", one_of(DISK_ACCESS_MODES)),
        "host": ("string", "127.0.0.1"),
        "port": ("int", 24007, NET_PORT),
        "volume": ("string", "gv0"),
    },
}

HYPERVISORS = frozenset(_HV_TABLE)
DISK_TEMPLATES = frozenset(_DISK_TABLE)
# The hypervisors herder's nodes run: noded defines every domain through the node's libvirt
# (QEMU/KVM, or libvirt's test driver on simulated `fake` nodes). The others' parameters stay
# known because Ganeti's configs and iallocator requests carry them (import, merge, hail), but
# an instance of theirs would silently become a KVM domain: enabling or creating one is refused.
RUNNABLE_HYPERVISORS = frozenset({"kvm", "fake"})


def check_runnable_hypervisor(hypervisor: str) -> None:
    """ValueError (one line) for a hypervisor herder knows but its nodes cannot run."""
    if hypervisor in HYPERVISORS and hypervisor not in RUNNABLE_HYPERVISORS:
        raise ValueError(f"hypervisor {hypervisor} is not supported: herder's nodes run "
                         f"{' and '.join(sorted(RUNNABLE_HYPERVISORS))} instances only")


# Templates whose data is mirrored on a second node by herder itself.
DTS_INT_MIRROR = frozenset({"drbd"})
# Templates whose storage is shared/external, so any node in the group can run the instance.
DTS_EXT_MIRROR = frozenset({"blockdev", "diskless", "ext", "gluster", "rbd", "sharedfile"})
DTS_LVM = frozenset({"drbd", "plain"})


def _family(owner: str, table: Mapping[str, Row], relations: tuple[Relation, ...] = (),
            global_only: frozenset[str] = frozenset()) -> ParamFamily:
    specs = {}
    for name, row in table.items():
        kind, default = row[0], row[1]
        check = row[2] if len(row) > 2 else None
        specs[name] = ParamSpec(name, kind, default, check, name in global_only)
    return ParamFamily(owner, specs, relations)


HV_FAMILIES: dict[str, ParamFamily] = {
    hv: _family(f"hypervisor {hv}", table, _HV_RELATIONS.get(hv, ()), HV_GLOBAL_PARAMS)
    for hv, table in _HV_TABLE.items()
}
BE_FAMILY = _family("backend", _BE_TABLE, _BE_RELATIONS)
ND_FAMILY = _family("node", _ND_TABLE)
NIC_FAMILY = _family("nic", _NIC_TABLE, _NIC_RELATIONS)
DISK_FAMILIES: dict[str, ParamFamily] = {
    dt: _family(f"disk template {dt}", table) for dt, table in _DISK_TABLE.items()
}


def hv_family(hypervisor: str) -> ParamFamily:
    try:
        return HV_FAMILIES[hypervisor]
    except (KeyError, TypeError):
        raise ParameterError(
            f"unknown hypervisor {hypervisor!r} (known: {', '.join(sorted(HYPERVISORS))})"
        ) from None


def disk_family(template: str) -> ParamFamily:
    try:
        return DISK_FAMILIES[template]
    except (KeyError, TypeError):
        raise ParameterError(
            f"unknown disk template {template!r} (known: {', '.join(sorted(DISK_TEMPLATES))})"
        ) from None


def parse_size(value: Any) -> int:
    """A size in whole MiB from an int or a string such as "512", "512M", "2G", "1.5T"
    (`herder.core.sizes`, the command line's convention); a non-zero size is at least 1.
    Negative sizes are refused (Ganeti's ParseUnit has no sign either)."""
    if isinstance(value, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and not value.strip().startswith("-"):
        try:
            mib = sizes.parse_size(value, "m")
        except ValueError:
            pass
        else:
            if math.isfinite(mib) and mib >= 0:
                return round(mib) if mib >= 1 or mib == 0 else 1
    raise ValueError(f"not a size: {value!r} (use e.g. 512, 512M, 2G)")


_TRUE = {"true", "yes", "on", "1", "y"}
_FALSE = {"false", "no", "off", "0", "n"}
# Larger numbers than these are refused whatever the parameter: they only come from mistakes
# or from someone probing, and some consumers (C libraries, JSON peers) cannot hold them.
_INT_LIMIT = 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]{1,19}")


def _typed(kind: str, value: Any) -> Any:
    """`value` as `kind`; ValueError/TypeError saying what was expected."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ValueError("expected a boolean (true/false)")
    if kind == "int":
        whole = (
            (isinstance(value, int) and not isinstance(value, bool))
            or (isinstance(value, float) and value.is_integer())
            or (isinstance(value, str) and _INTEGER.fullmatch(value.strip()) is not None)
        )
        if not whole or abs(int(value)) > _INT_LIMIT:
            raise ValueError("expected an integer")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError("expected a number")
        result = float(value)
        if not math.isfinite(result):
            raise ValueError("expected a finite number")
        return result
    if kind == "size":
        result = parse_size(value)
        if result > _INT_LIMIT:
            raise ValueError("the size is too large")
        return result
    if kind == "maybe-string":
        if value is not None and not isinstance(value, str):
            raise ValueError("expected a string or null")
    elif not isinstance(value, str):
        raise ValueError("expected a string")
    if value is not None and "\0" in value:
        raise ValueError("a NUL character is not allowed")
    return value


def coerce(spec: ParamSpec, value: Any) -> Any:
    """Check one value against its spec; strings (from the command line) are converted."""
    try:
        result = _typed(spec.kind, value)
    except (TypeError, ValueError, OverflowError) as err:
        raise ParameterError(f"parameter {spec.name!r}: {err}, got {_shown(value)}") from None
    if spec.check is not None and not spec.check.passes(result):
        raise ParameterError(
            f"parameter {spec.name!r}: {spec.check.problem.format(value=result)}")
    return result


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def validate(
    family: ParamFamily, params: Mapping[str, Any], *, instance_level: bool = False
) -> Params:
    """Check and coerce a set of overrides for `family`; returns a new dict.

    Refuses unknown names and, at instance level, cluster-wide-only hypervisor parameters.
    The relations between parameters given together are checked too (`check_relations` checks
    them on the filled set, where the change meets what is inherited).
    """
    if not isinstance(params, Mapping):
        raise ParameterError(f"{family.owner} parameters must be an object, got "
                             f"{_shown(params)}")
    result: Params = {}
    for name, value in params.items():
        spec = family.specs.get(name) if isinstance(name, str) else None
        if spec is None:
            known = ", ".join(sorted(family.specs)) or "none"
            raise ParameterError(
                f"unknown {family.owner} parameter {_shown(name)} (known: {known})")
        if instance_level and spec.global_only:
            raise ParameterError(
                f"{family.owner} parameter {name!r} is cluster-wide only and cannot be set "
                "on an instance; set it with 'herder cluster modify'"
            )
        result[name] = coerce(spec, value)
    _relations(family, result, partial=True)
    return result


def _relations(family: ParamFamily, values: Mapping[str, Any], *, partial: bool) -> None:
    for relation in family.relations:
        if partial and not relation.names <= values.keys():
            continue
        problem = relation.problem(values)
        if problem:
            raise ParameterError(f"{family.owner} parameters: {problem}")


def check_relations(family: ParamFamily, filled: Mapping[str, Any]) -> None:
    """Ganeti's CheckParameterSyntax relations (minmem <= maxmem, a kvm security domain with
    the user model, ...) on a filled parameter set: what an object will run with."""
    _relations(family, fill(family.defaults(), filled), partial=False)


VALUE_DEFAULT = "default"  # Ganeti's "reset this parameter to the inherited value"


def upgrade_be_params(changes: Any) -> None:
    """Ganeti's `objects.UpgradeBeParams`, in place: the old backend parameter `memory` (still
    accepted by gnt-instance add/modify/start and gnt-cluster init/modify: `-B memory=512`)
    becomes maxmem and minmem of that value."""
    if isinstance(changes, dict) and "memory" in changes:
        memory = changes.pop("memory")
        changes["maxmem"] = changes["minmem"] = memory


def check_changes(family: ParamFamily, changes: Any, *, instance_level: bool = False) -> None:
    """The edge's check of a change set (an opcode's): every value that is not a reset (None
    or "default") is valid for `family`; ParameterError (a ValueError) otherwise."""
    if changes is None:
        return
    if not isinstance(changes, Mapping):
        raise ParameterError(f"{family.owner} parameters must be an object, got "
                             f"{_shown(changes)}")
    for name in changes:
        if name not in family.specs:
            validate(family, {name: None})  # the unknown-parameter error
    validate(family, {k: v for k, v in changes.items()
                      if v is not None and v != VALUE_DEFAULT},
             instance_level=instance_level)


def check_hv_changes(changes: Any, hypervisor: str | None = None, *,
                     instance_level: bool = True) -> None:
    """hvparams of an instance-level change whose hypervisor the edge may not know yet: with
    `hypervisor`, that family's check; without, each parameter must be valid for some
    hypervisor that has it (Ganeti's HVS_PARAMETER_TYPES; the LU then checks the instance's
    own hypervisor)."""
    if hypervisor is not None:
        check_changes(hv_family(hypervisor), changes, instance_level=instance_level)
        return
    if changes is None:
        return
    if not isinstance(changes, Mapping):
        raise ParameterError(f"hypervisor parameters must be an object, got {_shown(changes)}")
    for name, value in changes.items():
        owners = [f for hv, f in sorted(HV_FAMILIES.items()) if name in f.specs]
        if not owners:
            known = ", ".join(sorted({n for f in HV_FAMILIES.values() for n in f.specs}))
            raise ParameterError(f"unknown hypervisor parameter {_shown(name)} (known: {known})")
        if value is None or value == VALUE_DEFAULT:
            continue
        first: ParameterError | None = None
        for owner in sorted(owners, key=lambda f: f.owner != "hypervisor kvm"):
            try:
                validate(owner, {name: value}, instance_level=instance_level)
                break
            except ParameterError as err:
                first = first or err
        else:
            assert first is not None
            raise first


# OS parameters: free-form names declared by each OS (the node checks them against the OS's
# parameters.list); they become the OS scripts' OSP_<NAME> variables, so only names that make
# such a variable, and scalar values.
_OSPARAM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")


def check_osparams(osparams: Any) -> dict[str, str | None]:
    """OS parameters as the config keeps them (strings); ParameterError for a bad name or a
    value that is not a scalar (None is a reset and kept)."""
    if osparams is None:
        return {}
    if not isinstance(osparams, Mapping):
        raise ParameterError(f"OS parameters must be an object, got {_shown(osparams)}")
    result: dict[str, str | None] = {}
    for name, value in osparams.items():
        if not isinstance(name, str) or not _OSPARAM_NAME.fullmatch(name):
            raise ParameterError(
                f"OS parameter name {_shown(name)}: letters, digits, '_' and '-' (1-64)")
        if value is None:
            result[name] = None
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, str | int | float):
            raise ParameterError(f"OS parameter {name!r}: expected a string, got "
                                 f"{_shown(value)}")
        text = str(value)
        if "\0" in text:
            raise ParameterError(f"OS parameter {name!r}: a NUL character is not allowed")
        result[name] = text
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
