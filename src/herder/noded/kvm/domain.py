"""The libvirt domain XML of an instance, from Ganeti's KVM hypervisor parameters (pure).

`domain_xml(spec)` is regenerated at every start, so changed parameters apply and a renamed
instance starts under its new name. `HVPARAM_MAPPING` says what each of Ganeti 3.0's KVM
hvparams becomes; those libvirt cannot express per domain are listed in docs/compat.md.
Anything the node must look up (a VNC password file's content, the uid of a security domain,
a network interface's address, whether KVM works) is resolved by the caller and passed in the
spec, so this module reads nothing.
"""

from __future__ import annotations

import ipaddress
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from herder.core import paths
from herder.core.errors import HerderError

VNC_BASE_PORT = 5900  # Ganeti's constants.VNC_BASE_PORT: display = port - 5900
QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
GANETI_DEFAULT_KVM_PATH = "/usr/bin/kvm"

# Ganeti's dev_types, by the kind of node-local device blockdev_assemble hands out
BLOCK_DEV_TYPES = frozenset({"plain", "drbd", "blockdev", "ext", "rbd", "gluster"})
FILE_DEV_TYPES = frozenset({"file", "sharedfile"})
# Ganeti's DTS_EXT_MIRROR minus rbd: their cache is forced to none (shared storage)
FORCE_CACHE_NONE_DEV_TYPES = frozenset({"blockdev", "ext", "gluster", "sharedfile"})

# Each Ganeti KVM hvparam -> what the domain (or the node) makes of it.
HVPARAM_MAPPING: dict[str, str] = {
    "acpi": "<features><acpi/> when true (libvirt then omits -no-acpi)",
    "boot_order": "<os><boot dev=hd|cdrom|fd|network/> when no kernel_path",
    "cdrom2_image_path": "a second <disk device='cdrom'> (file, or network http/https)",
    "cdrom_disk_type": "the cdroms' bus (else disk_type's); ide when booting from cdrom",
    "cdrom_image_path": "<disk device='cdrom'> (file, or network http/https for a URL)",
    "cpu_cores": "<cpu><topology cores/>, missing counts derived as QEMU's -smp does",
    "cpu_mask": "<vcpu cpuset> (one mask) or <cputune><vcpupin> per vCPU (a:b:c)",
    "cpu_sockets": "<cpu><topology sockets/>",
    "cpu_threads": "<cpu><topology threads/>",
    "cpu_type": "<cpu mode='custom'><model> (+flag/-flag -> <feature>); host -> "
                "host-passthrough",
    "disk_aio": "<driver io='threads'|'native'> (native forces cache=none, as Ganeti)",
    "disk_cache": "<driver cache> (default: omitted; none for shared storage, as Ganeti)",
    "disk_discard": "<driver discard='ignore'|'unmap'> (default: omitted)",
    "disk_type": "<target bus>: paravirtual=virtio, ide, scsi/scsi-hd (disk), scsi-cd (cdrom), "
                 "scsi-block/scsi-generic (device='lun'); sd/mtd/pflash refused",
    "floppy_image_path": "<disk device='floppy'>",
    "initrd_path": "<os><initrd>",
    "kernel_args": "<os><cmdline> after root=<root_path>",
    "kernel_path": "<os><kernel> (empty: boot from disk/cdrom/floppy/network)",
    "keymap": "<graphics keymap>",
    "kvm_extra": "<qemu:commandline> arguments (libvirt marks the domain tainted)",
    "kvm_flag": "domain type: enabled=kvm, disabled=qemu, empty=what the node's KVM probe says",
    "kvm_path": "<emulator>",
    "kvm_pci_reservations": "not needed: libvirt assigns PCI addresses (compat.md)",
    "machine_version": "<os><type machine> (empty: libvirt's default, as QEMU's default)",
    "mem_path": "<memoryBacking><hugepages/> (the mount is qemu.conf's hugetlbfs_mount)",
    "migration_bandwidth": "migration: VIR_MIGRATE_PARAM_BANDWIDTH (MiB/s)",
    "migration_caps": "migration flags: xbzrle=COMPRESSED, auto-converge=AUTO_CONVERGE; "
                      "postcopy-ram refused (not with tunnelled migration, compat.md)",
    "migration_downtime": "migration: virDomainMigrateSetMaxDowntime (ms)",
    "migration_mode": "migration: live -> VIR_MIGRATE_LIVE, non-live -> paused",
    "migration_port": "unused: migration is tunnelled through libvirtd's TLS port (compat.md)",
    "nic_type": "<interface><model type> (paravirtual=virtio)",
    "reboot_behavior": "<on_reboot> restart (reboot) or destroy (exit, as -no-reboot)",
    "root_path": "root=<root_path> in <cmdline> (omitted when empty)",
    "scsi_controller_type": "<controller type='scsi' model>: lsi=lsilogic, megasas, "
                            "virtio-scsi-pci=virtio-scsi",
    "security_domain": "the user of security_model=user (resolved to uid:gid by noded)",
    "security_model": "<seclabel model='dac' type='static'> +uid:+gid for pool/user",
    "serial_console": "<serial type='pty'> with <log file> + <console>; console=ttyS0,<speed>",
    "serial_speed": "console=ttyS0,<speed> in <cmdline>",
    "soundhw": "<sound model>",
    "spice_bind": "<graphics type='spice' listen port=network_port>",
    "spice_image_compression": "<graphics><image compression>",
    "spice_ip_version": "which address of the spice_bind interface (resolved by noded)",
    "spice_jpeg_wan_compression": "<graphics><jpeg compression>",
    "spice_password_file": "<graphics passwd> (the file's first line, read by noded)",
    "spice_playback_compression": "<graphics><playback compression>",
    "spice_streaming_video": "<graphics><streaming mode>",
    "spice_tls_ciphers": "qemu.conf only (compat.md)",
    "spice_use_tls": "<graphics tlsPort=network_port defaultMode='secure'>",
    "spice_use_vdagent": "<channel type='spicevmc'> (com.redhat.spice.0)",
    "spice_zlib_glz_wan_compression": "<graphics><zlib compression>",
    "usb_devices": "tablet/mouse/keyboard -> <input bus='usb'>; other names refused",
    "usb_mouse": "<input type='mouse'|'tablet' bus='usb'>; tablet when VNC and unset",
    "use_chroot": "not per domain: libvirt runs QEMU in a private mount namespace (compat.md)",
    "use_guest_agent": "<channel type='unix'><target name='org.qemu.guest_agent.0'>",
    "use_localtime": "<clock offset='localtime'> (else utc)",
    "user_shutdown": "no XML: a guest-initiated poweroff is libvirt's shutoff reason "
                     "'shutdown', which noded reports as USER_down",
    "vga": "<video><model type> (std=vga); unset: vga (QEMU's default), qxl with spice",
    "vhost_net": "<interface><driver name='vhost'>",
    "virtio_net_queues": "<interface><driver queues>",
    "vnc_bind_address": "<graphics type='vnc' port=network_port listen> or a unix socket "
                        "<dir>/<name>.vnc for a path",
    "vnc_password_file": "<graphics passwd> (the file's first line, read by noded)",
    "vnc_tls": "qemu.conf vnc_tls (per host, compat.md)",
    "vnc_x509_path": "qemu.conf vnc_tls_x509_cert_dir (per host, compat.md)",
    "vnc_x509_verify": "qemu.conf vnc_tls_x509_verify (per host, compat.md)",
    "vnet_hdr": "automatic: libvirt enables it on virtio taps (compat.md)",
}

_NIC_MODELS = {"paravirtual": "virtio", "e1000": "e1000", "i82551": "i82551",
               "i82557b": "i82557b", "i82559er": "i82559er", "ne2k_isa": "ne2k_isa",
               "ne2k_pci": "ne2k_pci", "pcnet": "pcnet", "rtl8139": "rtl8139"}
_SCSI_MODELS = {"lsi": "lsilogic", "megasas": "megasas", "virtio-scsi-pci": "virtio-scsi"}
_BOOT_DEVICES = {"disk": "hd", "cdrom": "cdrom", "floppy": "fd", "network": "network"}
_VGA_MODELS = {"std": "vga", "cirrus": "cirrus", "vmware": "vmvga", "qxl": "qxl",
               "virtio": "virtio", "none": "none", "vga": "vga"}
_USB_INPUTS = {"tablet": "tablet", "mouse": "mouse", "keyboard": "keyboard"}


class DomainError(HerderError):
    """The instance cannot be expressed as a domain here (the message says which parameter)."""


@dataclass(frozen=True)
class NetworkSource:
    """A disk QEMU opens itself (userspace access): rbd or gluster."""

    protocol: str  # "rbd", "gluster", "http", "https"
    name: str  # rbd "pool/image", gluster "volume/path", http "/path"
    hosts: tuple[tuple[str, int | None], ...] = ()
    # rbd with cephx: the user (without "client.") and the UUID of the node's libvirt
    # secret holding its key (noded.ceph_secret)
    auth_username: str | None = None
    secret_uuid: str | None = None


@dataclass(frozen=True)
class DiskSpec:
    """One disk as the node assembled it: `path` is the node-local device or file."""

    path: str
    dev_type: str  # Ganeti's: plain, drbd, blockdev, ext, file, sharedfile, rbd, gluster
    uuid: str = ""
    read_only: bool = False
    network: NetworkSource | None = None  # userspace access (Ganeti's access=userspace)

    @property
    def source_kind(self) -> str:
        if self.network is not None:
            return "network"
        if self.dev_type in FILE_DEV_TYPES:
            return "file"
        if self.dev_type in BLOCK_DEV_TYPES:
            return "block"
        raise DomainError(f"disk {self.path}: unknown disk type {self.dev_type!r}")


@dataclass(frozen=True)
class NicSpec:
    """One NIC with its filled nicparams."""

    mac: str
    mode: str = "bridged"  # bridged, routed, openvswitch
    link: str = ""  # the bridge (bridged, openvswitch) or routing table (routed)
    vlan: str = ""  # openvswitch: ".100" access, ":100:200" trunk, ".100:200" native+trunk
    ip: str | None = None
    name: str | None = None
    uuid: str = ""
    network: str | None = None
    network_env: tuple[tuple[str, str], ...] = ()  # Ganeti's NETWORK_* hook variables


@dataclass(frozen=True)
class InstanceSpec:
    """Everything the domain of one instance is made from."""

    name: str
    uuid: str
    maxmem: int  # MiB
    vcpus: int
    hvparams: Mapping[str, Any]  # filled KVM hvparams (core.params defaults + overrides)
    disks: tuple[DiskSpec, ...] = ()
    nics: tuple[NicSpec, ...] = ()
    minmem: int | None = None
    start_memory: int | None = None  # ballooned to at start (Ganeti's startup memory)
    network_port: int | None = None  # the cluster's port pool (VNC/SPICE)
    serial_log: str | None = None  # e.g. /var/log/herder/instances/<name>.serial.log
    kvm_usable: bool = True  # the node's KVM probe (kvmprobe)
    run_as: tuple[int, int] | None = None  # uid, gid for security_model pool/user
    vnc_password: str | None = None  # vnc_password_file's first line
    spice_password: str | None = None  # spice_password_file's first line
    interface_addresses: Mapping[str, str] = field(default_factory=dict)  # for *_bind names
    tags: tuple[str, ...] = ()


# --- small pure helpers ---------------------------------------------------------------------

def domain_type(hvparams: Mapping[str, Any], kvm_usable: bool) -> str:
    """'kvm' or 'qemu' from kvm_flag and the node's probe; a clear error when they clash."""
    flag = hvparams.get("kvm_flag", "")
    if flag == "enabled":
        if not kvm_usable:
            raise DomainError("kvm_flag=enabled but hardware KVM does not work on this node "
                              "(see the node's KVM probe); unset kvm_flag to emulate")
        return "kvm"
    if flag == "disabled":
        return "qemu"
    if flag:
        raise DomainError(f"kvm_flag={flag!r}: expected enabled, disabled or empty")
    return "kvm" if kvm_usable else "qemu"


def display_of(network_port: int | None) -> int | None:
    """The VNC display of a port, as Ganeti: port - 5900, none below."""
    if network_port is None or network_port <= VNC_BASE_PORT:
        return None
    return network_port - VNC_BASE_PORT


def tap_name(instance_uuid: str, index: int) -> str:
    """A stable host-side tap name for a routed NIC (15 characters at most)."""
    return f"htap{index}{instance_uuid.replace('-', '')[:8]}"


def kernel_cmdline(hvparams: Mapping[str, Any]) -> str:
    """Ganeti's -append: root=<root_path> <kernel_args> [console=ttyS0,<speed>]."""
    parts = []
    root_path = hvparams.get("root_path")
    if root_path:
        parts.append(f"root={root_path}")
    if hvparams.get("kernel_args"):
        parts.append(str(hvparams["kernel_args"]))
    if hvparams.get("serial_console", True):
        parts.append(f"console=ttyS0,{hvparams.get('serial_speed', 38400)}")
    return " ".join(parts)


def cpu_topology(vcpus: int, sockets: int, cores: int, threads: int
                 ) -> tuple[int, int, int] | None:
    """(sockets, cores, threads) as QEMU derives them from -smp; None when none is set."""
    if not (sockets or cores or threads):
        return None
    threads = threads or 1
    if sockets and cores:
        pass
    elif sockets:
        cores = max(1, vcpus // (sockets * threads))
    elif cores:
        sockets = max(1, vcpus // (cores * threads))
    else:
        sockets, cores = max(1, vcpus // threads), 1
    if sockets * cores * threads != vcpus:
        raise DomainError(f"cpu_sockets={sockets} x cpu_cores={cores} x cpu_threads={threads}"
                          f" does not make {vcpus} vCPUs")
    return sockets, cores, threads


def parse_cpu_mask(mask: str, vcpus: int) -> tuple[str | None, list[str | None]]:
    """Ganeti's cpu_mask: "all", one cpuset ("0-2,4"), or one per vCPU ("0:1-2:all").
    Returns (cpuset for the whole domain, per-vCPU cpusets)."""
    mask = mask.strip()
    if not mask or mask == "all":
        return None, []
    parts = mask.split(":")
    if len(parts) == 1:
        return parts[0], []
    if len(parts) != vcpus:
        raise DomainError(f"cpu_mask {mask!r} has {len(parts)} entries for {vcpus} vCPUs")
    return None, [None if part == "all" else part for part in parts]


def parse_ovs_vlan(vlan: str) -> tuple[list[int], bool, int | None]:
    """Ganeti's openvswitch vlan: ".100" or "100" (access), ":100:200" (trunk), ".100:200"
    (untagged native 100 + trunk 200). Returns (tags, trunk, native tag)."""
    if not vlan:
        return [], False, None
    if vlan.isdigit():  # Ganeti's kvm-ifup: a bare number is the access port too
        vlan = "." + vlan
    match = re.fullmatch(r"(\.(\d+))?((:\d+)*)", vlan)
    if not match or (match.group(1) is None and not match.group(3)):
        raise DomainError(f"vlan {vlan!r}: expected .N, :N[:M...] or .N:M[...]")
    native = int(match.group(2)) if match.group(2) else None
    trunk_tags = [int(tag) for tag in match.group(3).split(":") if tag]
    if native is not None and not trunk_tags:
        return [native], False, None
    tags = ([native] if native is not None else []) + trunk_tags
    return tags, True, native


def ifup_environment(spec: InstanceSpec, index: int) -> dict[str, str]:
    """The variables Ganeti's kvm-ifup receives (hv_base.ConfigureNIC), for a routed NIC's
    configuration on the node (`kvm.ifup`) and the operator's hook."""
    nic = spec.nics[index]
    env = {"INSTANCE": spec.name, "INTERFACE": tap_name(spec.uuid, index),
           "INTERFACE_INDEX": str(index), "MAC": nic.mac, "MODE": nic.mode, "LINK": nic.link,
           "TAGS": " ".join(spec.tags)}
    if nic.ip:
        env["IP"] = nic.ip
    if nic.vlan:
        env["VLAN"] = nic.vlan
    if nic.name:
        env["INTERFACE_NAME"] = nic.name
    if nic.uuid:
        env["INTERFACE_UUID"] = nic.uuid
    if nic.network:
        env["NETWORK_NAME"] = nic.network
    env.update(nic.network_env)
    return env


# --- the XML --------------------------------------------------------------------------------

def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, {k.rstrip("_"): v for k, v in attrs.items()})
    if text is not None:
        element.text = text
    return element


def _disk_target(disk_type: str, index: int) -> tuple[str, str, str]:
    """(device, bus, target dev) for Ganeti's disk_type."""
    letter = chr(ord("a") + index)
    if disk_type == "paravirtual":
        return "disk", "virtio", f"vd{letter}"
    if disk_type == "ide":
        return "disk", "ide", f"hd{letter}"
    if disk_type in ("scsi", "scsi-hd"):
        return "disk", "scsi", f"sd{letter}"
    if disk_type == "scsi-cd":
        return "cdrom", "scsi", f"sd{letter}"
    if disk_type in ("scsi-block", "scsi-generic"):
        return "lun", "scsi", f"sd{letter}"
    raise DomainError(f"disk_type={disk_type!r} has no libvirt equivalent (use paravirtual, "
                      "ide or a scsi type)")


def _drive_driver(hvparams: Mapping[str, Any], dev_type: str) -> dict[str, str]:
    """Ganeti's aio/cache/discard rules for one drive (_GenerateDiskAioCacheParameters)."""
    cache = hvparams.get("disk_cache", "default")
    if dev_type in FORCE_CACHE_NONE_DEV_TYPES:
        cache = "none"  # shared storage: no host cache, or a migration corrupts it
    aio = hvparams.get("disk_aio") or "threads"
    attrs = {"name": "qemu", "type": "raw", "io": aio}
    if aio == "native":
        attrs["cache"] = "none"
    elif cache != "default":
        attrs["cache"] = cache
    discard = hvparams.get("disk_discard", "default")
    if discard != "default":
        attrs["discard"] = discard
    return attrs


def _source(disk_el: ET.Element, kind: str, path: str, network: NetworkSource | None) -> None:
    if kind == "network":
        assert network is not None
        source = _sub(disk_el, "source", protocol=network.protocol, name=network.name)
        for host, port in network.hosts:
            attrs = {"name": host}
            if port is not None:
                attrs["port"] = str(port)
            _sub(source, "host", **attrs)
        if network.auth_username and network.secret_uuid:
            auth = _sub(disk_el, "auth", username=network.auth_username)
            _sub(auth, "secret", type="ceph", uuid=network.secret_uuid)
    elif kind == "block":
        _sub(disk_el, "source", dev=path)
    else:
        _sub(disk_el, "source", file=path)


def _image_source(image: str) -> tuple[str, str, NetworkSource | None]:
    """A cdrom/floppy image: a file, or an http(s) URL QEMU reads itself."""
    match = re.fullmatch(r"(https?)://([^/:]+)(?::(\d+))?(/.*)", image)
    if match:
        port = int(match.group(3)) if match.group(3) else None
        return "network", image, NetworkSource(match.group(1), match.group(4),
                                               ((match.group(2), port),))
    return "file", image, None


def device_alias(kind: str, uuid: str) -> str:
    """The libvirt alias of a disk's or NIC's device: Ganeti's QEMU device id (`disk-` or
    `nic-` and the UUID up to its third dash) behind libvirt's `ua-`; hotplug finds devices by
    it."""
    return f"ua-{kind}-{uuid.rsplit('-', 2)[0]}"


def _disk_element(devices: ET.Element, disk: DiskSpec, index: int, hvp: Mapping[str, Any], *,
                  boot: bool) -> ET.Element:
    device, bus, target = _disk_target(hvp.get("disk_type", "paravirtual"), index)
    kind = disk.source_kind
    disk_el = _sub(devices, "disk", type=kind, device=device)
    _sub(disk_el, "driver", **_drive_driver(hvp, disk.dev_type))
    _source(disk_el, kind, disk.path, disk.network)
    _sub(disk_el, "target", dev=target, bus=bus)
    if boot:
        _sub(disk_el, "boot", order="1")
    if disk.read_only:
        _sub(disk_el, "readonly")
    if disk.uuid:
        _sub(disk_el, "alias", name=device_alias("disk", disk.uuid))
    return disk_el


def _add_disks(devices: ET.Element, spec: InstanceSpec, hvp: Mapping[str, Any],
               boot_from: str | None) -> None:
    disk_type = hvp.get("disk_type", "paravirtual")
    if disk_type in ("scsi", "scsi-hd", "scsi-cd", "scsi-block", "scsi-generic"):
        model = hvp.get("scsi_controller_type", "lsi")
        if model not in _SCSI_MODELS:
            raise DomainError(f"scsi_controller_type={model!r} is unknown")
        _sub(devices, "controller", type="scsi", index="0", model=_SCSI_MODELS[model])
    for index, disk in enumerate(spec.disks):
        _disk_element(devices, disk, index, hvp, boot=boot_from == "hd" and index == 0)
    cdrom_type = hvp.get("cdrom_disk_type") or disk_type
    cdrom_bus = {"paravirtual": "virtio", "ide": "ide"}.get(cdrom_type, "scsi")
    for number, key in enumerate(("cdrom_image_path", "cdrom2_image_path")):
        image = hvp.get(key) or ""
        if not image:
            continue
        booting = boot_from == "cdrom" and number == 0
        bus = "ide" if booting else cdrom_bus  # Ganeti boots cdroms from IDE
        prefix = {"ide": "hd", "virtio": "vd", "scsi": "sd"}[bus]
        # IDE cdroms after the IDE disks; others on letters of their own
        letter = chr(ord("c") + number) if bus == "ide" else chr(ord("w") + number)
        kind, path, network = _image_source(image)
        disk_el = _sub(devices, "disk", type=kind, device="cdrom")
        _sub(disk_el, "driver", name="qemu", type="raw")
        _source(disk_el, kind, path, network)
        _sub(disk_el, "target", dev=f"{prefix}{letter}", bus=bus)
        _sub(disk_el, "readonly")
        if booting:
            _sub(disk_el, "boot", order="1")
    floppy = hvp.get("floppy_image_path") or ""
    if floppy:
        disk_el = _sub(devices, "disk", type="file", device="floppy")
        _sub(disk_el, "driver", name="qemu", type="raw")
        _sub(disk_el, "source", file=floppy)
        _sub(disk_el, "target", dev="fda", bus="fdc")
        if boot_from == "fd":
            _sub(disk_el, "boot", order="1")


def _add_nics(devices: ET.Element, spec: InstanceSpec, hvp: Mapping[str, Any],
              boot_from: str | None) -> None:
    for index in range(len(spec.nics)):
        _nic_element(devices, spec, index, hvp, boot=boot_from == "network" and index == 0)


def _nic_element(devices: ET.Element, spec: InstanceSpec, index: int, hvp: Mapping[str, Any],
                 *, boot: bool) -> ET.Element:
    nic_type = hvp.get("nic_type", "paravirtual")
    if nic_type not in _NIC_MODELS:
        raise DomainError(f"nic_type={nic_type!r} is unknown")
    model = _NIC_MODELS[nic_type]
    nic = spec.nics[index]
    if nic.mode == "routed":
        iface = _sub(devices, "interface", type="ethernet")
        # libvirt makes the tap; noded configures it once the guest runs here
        # (kvm.ifup: Ganeti's kvm-ifup, not at the incoming side of a migration)
        _sub(iface, "target", dev=tap_name(spec.uuid, index), managed="yes")
    elif nic.mode in ("bridged", "openvswitch"):
        if not nic.link:
            raise DomainError(f"NIC {index} ({nic.mac}): {nic.mode} without a link")
        iface = _sub(devices, "interface", type="bridge")
        _sub(iface, "source", bridge=nic.link)
        if nic.mode == "openvswitch":
            _sub(iface, "virtualport", type="openvswitch")
            tags, trunk, native = parse_ovs_vlan(nic.vlan)
            if tags:
                vlan = _sub(iface, "vlan", **({"trunk": "yes"} if trunk else {}))
                for tag in tags:
                    attrs = {"id": str(tag)}
                    if tag == native:
                        attrs["nativeMode"] = "untagged"
                    _sub(vlan, "tag", **attrs)
        elif nic.vlan:
            raise DomainError(f"NIC {index} ({nic.mac}): a vlan needs mode openvswitch")
    else:
        raise DomainError(f"NIC {index} ({nic.mac}): unknown mode {nic.mode!r}")
    _sub(iface, "mac", address=nic.mac)
    _sub(iface, "model", type=model)
    if model == "virtio":
        driver: dict[str, str] = {"name": "vhost" if hvp.get("vhost_net") else "qemu"}
        queues = int(hvp.get("virtio_net_queues", 1) or 1)
        if queues > 1:
            if not hvp.get("vhost_net"):
                raise DomainError("virtio_net_queues > 1 needs vhost_net (as Ganeti)")
            driver["queues"] = str(queues)
        _sub(iface, "driver", **driver)
    if boot:
        _sub(iface, "boot", order="1")
    if nic.uuid:
        _sub(iface, "alias", name=device_alias("nic", nic.uuid))
    return iface


def device_xml(spec: InstanceSpec, kind: str, index: int) -> str:
    """The XML of one disk or NIC of `spec` (`kind` "disk" or "nic"), to hotplug it."""
    holder = ET.Element("devices")
    hvp = spec.hvparams
    if kind == "disk":
        element = _disk_element(holder, spec.disks[index], index, hvp, boot=False)
    else:
        element = _nic_element(holder, spec, index, hvp, boot=False)
    return ET.tostring(element, encoding="unicode")


def _listen_address(value: str, addresses: Mapping[str, str], param: str) -> str:
    """An IP address as is; an interface name through what noded resolved."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if value in addresses:
        return addresses[value]
    raise DomainError(f"{param}={value!r}: no address known for this interface on the node")


def _add_graphics(devices: ET.Element, spec: InstanceSpec, hvp: Mapping[str, Any]) -> str:
    """VNC or SPICE; returns which ("vnc", "spice" or "")."""
    vnc_bind = hvp.get("vnc_bind_address") or ""
    spice_bind = hvp.get("spice_bind") or ""
    keymap = hvp.get("keymap") or ""
    if vnc_bind:
        graphics = _sub(devices, "graphics", type="vnc")
        if vnc_bind.startswith("/"):
            try:
                socket = paths.child(vnc_bind, spec.name, suffix=".vnc", what="instance name")
            except paths.UnsafeName as err:
                raise DomainError(str(err)) from None
            _sub(graphics, "listen", type="socket", socket=str(socket))
        else:
            if display_of(spec.network_port) is None:
                raise DomainError(f"network_port {spec.network_port} is not a VNC display "
                                  f"(must be above {VNC_BASE_PORT})")
            graphics.set("port", str(spec.network_port))
            graphics.set("autoport", "no")
            address = _listen_address(vnc_bind, spec.interface_addresses, "vnc_bind_address")
            _sub(graphics, "listen", type="address", address=address)
        if keymap:
            graphics.set("keymap", keymap)
        if hvp.get("vnc_password_file"):
            if spec.vnc_password is None:
                raise DomainError("vnc_password_file is set but its password was not read")
            graphics.set("passwd", spec.vnc_password)
        return "vnc"
    if spice_bind:
        if spec.network_port is None:
            raise DomainError("spice_bind is set but the instance has no network_port")
        graphics = _sub(devices, "graphics", type="spice", autoport="no")
        if hvp.get("spice_use_tls"):
            graphics.set("tlsPort", str(spec.network_port))
            graphics.set("defaultMode", "secure")
        else:
            graphics.set("port", str(spec.network_port))
        address = _listen_address(spice_bind, spec.interface_addresses, "spice_bind")
        _sub(graphics, "listen", type="address", address=address)
        if keymap:
            graphics.set("keymap", keymap)
        if hvp.get("spice_password_file"):
            if spec.spice_password is None:
                raise DomainError("spice_password_file is set but its password was not read")
            graphics.set("passwd", spec.spice_password)
        for key, tag in (("spice_image_compression", "image"),
                         ("spice_jpeg_wan_compression", "jpeg"),
                         ("spice_zlib_glz_wan_compression", "zlib")):
            if hvp.get(key):
                _sub(graphics, tag, compression=str(hvp[key]))
        if not hvp.get("spice_playback_compression", True):
            _sub(graphics, "playback", compression="off")
        if hvp.get("spice_streaming_video"):
            _sub(graphics, "streaming", mode=str(hvp["spice_streaming_video"]))
        if hvp.get("spice_use_vdagent", True):
            channel = _sub(devices, "channel", type="spicevmc")
            _sub(channel, "target", type="virtio", name="com.redhat.spice.0")
        else:
            _sub(graphics, "mouse", mode="server")
        return "spice"
    return ""


def _add_inputs(devices: ET.Element, hvp: Mapping[str, Any], graphics: str) -> None:
    mouse = hvp.get("usb_mouse") or ""
    if mouse:
        if mouse not in ("mouse", "tablet"):
            raise DomainError(f"usb_mouse={mouse!r}: expected mouse or tablet")
        _sub(devices, "input", type=mouse, bus="usb")
    elif graphics == "vnc":
        _sub(devices, "input", type="tablet", bus="usb")  # Ganeti's default with VNC
    for name in filter(None, (hvp.get("usb_devices") or "").split(",")):
        if name not in _USB_INPUTS:
            raise DomainError(f"usb_devices: {name!r} has no libvirt equivalent "
                              "(tablet, mouse and keyboard do)")
        _sub(devices, "input", type=_USB_INPUTS[name], bus="usb")


def _add_cpu(root: ET.Element, spec: InstanceSpec, hvp: Mapping[str, Any]) -> None:
    cpuset, per_vcpu = parse_cpu_mask(str(hvp.get("cpu_mask") or "all"), spec.vcpus)
    vcpu = _sub(root, "vcpu", str(spec.vcpus), placement="static")
    if cpuset:
        vcpu.set("cpuset", cpuset)
    if any(per_vcpu):
        cputune = _sub(root, "cputune")
        for index, mask in enumerate(per_vcpu):
            if mask:
                _sub(cputune, "vcpupin", vcpu=str(index), cpuset=mask)
    topology = cpu_topology(spec.vcpus, int(hvp.get("cpu_sockets") or 0),
                            int(hvp.get("cpu_cores") or 0), int(hvp.get("cpu_threads") or 0))
    cpu_type = str(hvp.get("cpu_type") or "")
    if not cpu_type and topology is None:
        return
    cpu = _sub(root, "cpu")
    if cpu_type:
        model, *flags = cpu_type.split(",")
        if model == "host":
            cpu.set("mode", "host-passthrough")
        else:
            cpu.set("mode", "custom")
            cpu.set("match", "exact")
            cpu.set("check", "none")
            _sub(cpu, "model", model, fallback="forbid")
        for flag in flags:
            if flag[:1] in "+-" and flag[1:]:
                _sub(cpu, "feature", policy="require" if flag[0] == "+" else "disable",
                     name=flag[1:])
            else:
                raise DomainError(f"cpu_type {cpu_type!r}: {flag!r} is not +flag or -flag")
    if topology is not None:
        sockets, cores, threads = topology
        _sub(cpu, "topology", sockets=str(sockets), dies="1", cores=str(cores),
             threads=str(threads))


def domain_xml(spec: InstanceSpec) -> str:
    """The domain definition of an instance (a string for defineXML/createXML)."""
    hvp = spec.hvparams
    root = ET.Element("domain", type=domain_type(hvp, spec.kvm_usable))
    _sub(root, "name", spec.name)
    _sub(root, "uuid", spec.uuid)
    _sub(root, "memory", str(spec.maxmem), unit="MiB")
    start_memory = spec.start_memory or spec.maxmem
    if spec.minmem is not None and start_memory < spec.minmem:
        raise DomainError(f"start memory {start_memory} MiB is below minmem {spec.minmem} MiB")
    _sub(root, "currentMemory", str(min(start_memory, spec.maxmem)), unit="MiB")
    if hvp.get("mem_path"):
        backing = _sub(root, "memoryBacking")
        _sub(backing, "hugepages")
    _add_cpu(root, spec, hvp)

    os_el = _sub(root, "os")
    os_type = _sub(os_el, "type", "hvm", arch="x86_64")
    if hvp.get("machine_version"):
        os_type.set("machine", str(hvp["machine_version"]))
    boot_from: str | None = None
    if hvp.get("kernel_path"):
        _sub(os_el, "kernel", str(hvp["kernel_path"]))
        if hvp.get("initrd_path"):
            _sub(os_el, "initrd", str(hvp["initrd_path"]))
        _sub(os_el, "cmdline", kernel_cmdline(hvp))
    else:
        order = hvp.get("boot_order", "disk")
        if order not in _BOOT_DEVICES:
            raise DomainError(f"boot_order={order!r}: expected disk, cdrom, floppy or network")
        boot_from = _BOOT_DEVICES[order]

    features = _sub(root, "features")
    if hvp.get("acpi", True):
        _sub(features, "acpi")
    _sub(root, "clock", offset="localtime" if hvp.get("use_localtime") else "utc")
    _sub(root, "on_poweroff", "destroy")
    reboot = hvp.get("reboot_behavior", "reboot")
    if reboot not in ("reboot", "exit"):
        raise DomainError(f"reboot_behavior={reboot!r}: expected reboot or exit")
    _sub(root, "on_reboot", "restart" if reboot == "reboot" else "destroy")
    _sub(root, "on_crash", "destroy")

    devices = _sub(root, "devices")
    kvm_path = str(hvp.get("kvm_path") or "")
    if kvm_path:
        _sub(devices, "emulator", kvm_path)
    _add_disks(devices, spec, hvp, boot_from)
    _add_nics(devices, spec, hvp, boot_from)
    if hvp.get("serial_console", True):
        serial = _sub(devices, "serial", type="pty")
        if spec.serial_log:
            _sub(serial, "log", file=spec.serial_log, append="on")
        _sub(serial, "target", port="0")
        console = _sub(devices, "console", type="pty")
        _sub(console, "target", type="serial", port="0")
    if hvp.get("use_guest_agent"):
        channel = _sub(devices, "channel", type="unix")
        _sub(channel, "target", type="virtio", name="org.qemu.guest_agent.0")
    graphics = _add_graphics(devices, spec, hvp)
    _add_inputs(devices, hvp, graphics)
    # Unset: QEMU's default adapter (std VGA) as under Ganeti, qxl with SPICE (as Ganeti).
    vga = str(hvp.get("vga") or ("qxl" if graphics == "spice" else "std"))
    if vga:
        if vga not in _VGA_MODELS:
            raise DomainError(f"vga={vga!r} has no libvirt equivalent")
        video = _sub(devices, "video")
        _sub(video, "model", type=_VGA_MODELS[vga])
    if hvp.get("soundhw"):
        for model in str(hvp["soundhw"]).split(","):
            _sub(devices, "sound", model=model)
    _sub(devices, "memballoon", model="virtio")

    security_model = hvp.get("security_model", "none")
    if security_model in ("pool", "user"):
        if spec.run_as is None:
            raise DomainError(f"security_model={security_model} but no uid was assigned")
        uid, gid = spec.run_as
        label = _sub(root, "seclabel", type="static", model="dac", relabel="yes")
        _sub(label, "label", f"+{uid}:+{gid}")
    elif security_model != "none":
        raise DomainError(f"security_model={security_model!r}: expected none, pool or user")

    extra = str(hvp.get("kvm_extra") or "").split()
    if extra:
        ET.register_namespace("qemu", QEMU_NS)
        commandline = ET.SubElement(root, f"{{{QEMU_NS}}}commandline")
        for argument in extra:
            ET.SubElement(commandline, f"{{{QEMU_NS}}}arg", value=argument)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")
