"""herder's domain XML, turned into a QEMU command line by libvirt itself (domainXMLToNative on
an embedded QEMU driver), against the command line Ganeti 3.0.2's KVM hypervisor builds for
the same instance: the same guest devices. Differences that remain are in docs/compat.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core import params
from herder.instmon.libvirt_source import start_event_loop
from herder.noded.kvm.domain import DiskSpec, InstanceSpec, NicSpec, domain_xml
from tests.noded.kvm.qemu_argv import summarize_ganeti, summarize_libvirt

GROOT = Path(os.environ.get("GROOT", "/tmp/groot"))
GANETI_TREE = GROOT / "usr/share/ganeti/3.0"
DEBIAN_PYTHON = Path("/usr/bin/python3")
QEMU = "/usr/bin/qemu-system-x86_64"
RUNNER = Path(__file__).with_name("ganeti_kvm_argv.py")
# Placeholders for files Ganeti checks exist (empty files: nothing is started)
KERNEL, INITRD, ISO, VNC_PASSWORD = "@vmlinuz", "@initrd.img", "@debian.iso", "@vnc-password"


@pytest.fixture(scope="module")
def embedded_qemu() -> Iterator[Any]:
    libvirt = pytest.importorskip("libvirt")
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("qemu-system-x86 is not installed (scripts/sysdeps.sh)")
    # qemu:///embed needs an event loop implementation, and it must run: a registered loop
    # makes every later connection of this process answer libvirtd's keepalives, and one
    # nobody runs lets libvirtd drop an idle connection after ~30 s (other modules' fixtures
    # on the same pytest worker wait that long for a guest's boot on a loaded machine)
    start_event_loop()
    root = tempfile.mkdtemp(prefix="hkvm-embed-")
    conn = libvirt.open(f"qemu:///embed?root={root}")
    try:
        yield conn
    finally:
        conn.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def images() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="hkvm-images-"))
    for name in (KERNEL, INITRD, ISO):
        (directory / name[1:]).write_bytes(b"")
    (directory / VNC_PASSWORD[1:]).write_text("sesame\n")
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def ganeti_root() -> Iterator[Path]:
    if not (GANETI_TREE / "ganeti/hypervisor/hv_kvm/__init__.py").exists():
        pytest.skip("Ganeti 3.0's tree is absent (bash ../shared/peers/setup.sh)")
    if not DEBIAN_PYTHON.exists():
        pytest.skip("Debian's /usr/bin/python3 is absent")
    base = Path(tempfile.mkdtemp(prefix="hkvm-ganeti-"))
    root = base / "node1.example.com"  # vcluster: the root's last component is the host name
    root.mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _ganeti_argv(root: Path, spec: InstanceSpec, hvparams: dict[str, Any]) -> list[str]:
    request = {
        "name": spec.name, "uuid": spec.uuid, "network_port": spec.network_port,
        "beparams": {"maxmem": spec.maxmem, "minmem": spec.minmem or spec.maxmem,
                     "vcpus": spec.vcpus, "auto_balance": True, "always_failover": False,
                     "spindle_use": 1},
        "disks": [{"dev_type": disk.dev_type, "uuid": disk.uuid, "path": disk.path}
                  for disk in spec.disks],
        "nics": [{"mac": nic.mac, "uuid": nic.uuid, "mode": nic.mode, "link": nic.link}
                 for nic in spec.nics],
        "hvparams": hvparams,
    }
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(GANETI_TREE),
           "GANETI_ROOTDIR": str(root), "GANETI_HOSTNAME": root.name, "LC_ALL": "C"}
    done = subprocess.run([str(DEBIAN_PYTHON), str(RUNNER)], input=json.dumps(request),
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    argv = json.loads(done.stdout)["argv"]
    assert argv, "Ganeti ran no QEMU command"
    return argv


def _hvparams(images: Path, **overrides: Any) -> dict[str, Any]:
    hvparams = params.hv_family("kvm").defaults()
    hvparams.update(kvm_path=QEMU, kernel_path=KERNEL)
    hvparams.update(overrides)
    return {key: str(images / value[1:]) if isinstance(value, str) and value[:1] == "@"
            else value for key, value in hvparams.items()}


def _disk(path: str, dev_type: str, number: int) -> DiskSpec:
    return DiskSpec(path, dev_type, uuid=f"932df160-7a22-40{number:02d}-a566-7e0ca8386133")


def _nic(mac: str, number: int, mode: str = "bridged", link: str = "br0") -> NicSpec:
    return NicSpec(mac, mode, link, uuid=f"5c0a1b2c-3d4e-4f{number:02d}-8a9b-0c1d2e3f4a5b")


SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (hvparams overrides, instance fields)
    "kernel-virtio-vnc": (
        {"initrd_path": INITRD, "vnc_bind_address": "127.0.0.1",
         "vnc_password_file": VNC_PASSWORD, "keymap": "de"},
        {"maxmem": 256, "vcpus": 2, "disks": ("/dev/loop7:plain",), "nics": ("br0",)}),
    "ide-e1000-topology": (
        {"kernel_path": "", "boot_order": "disk", "disk_type": "ide", "nic_type": "e1000",
         "disk_cache": "writethrough", "disk_discard": "unmap", "cpu_sockets": 2,
         "cpu_cores": 2, "cpu_threads": 1, "use_localtime": True, "acpi": False,
         "reboot_behavior": "exit", "cpu_type": "qemu64", "vga": "cirrus",
         "cdrom_image_path": ISO, "machine_version": "pc-i440fx-7.2"},
        {"maxmem": 512, "vcpus": 4, "disks": ("/dev/loop6:plain", "/dev/loop5:blockdev"),
         "nics": ("br0", "br1")}),
    "files-aio-native-vhost-agent": (
        {"disk_aio": "native", "vhost_net": True, "use_guest_agent": True,
         "serial_console": False, "vnc_bind_address": "0.0.0.0", "usb_mouse": "mouse",
         "kernel_args": "ro quiet", "root_path": "/dev/vda2"},
        {"maxmem": 128, "vcpus": 1,
         "disks": ("/srv/herder/file-storage/i3/disk0:file",
                   "/srv/herder/shared-file-storage/i3/disk1:sharedfile"),
         "nics": ("br0",)}),
}


def _spec(name: str, hvparams: dict[str, Any], fields: dict[str, Any]) -> InstanceSpec:
    disks = tuple(_disk(*item.split(":"), number)
                  for number, item in enumerate(fields["disks"]))
    nics = tuple(_nic(f"aa:00:00:35:{number:02x}:0{index}", index, link=link)
                 for index, link in enumerate(fields["nics"])
                 for number in [len(name)])
    return InstanceSpec(f"{name}.example.com", "6f1c3a46-1f4b-4b7e-9b0a-1a2b3c4d5e6f",
                        fields["maxmem"], fields["vcpus"], hvparams, disks=disks, nics=nics,
                        network_port=11017, kvm_usable=False,
                        vnc_password="sesame" if hvparams["vnc_password_file"] else None)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_same_devices_as_ganeti(scenario: str, embedded_qemu: Any, ganeti_root: Path,
                                images: Path) -> None:
    overrides, fields = SCENARIOS[scenario]
    hvparams = _hvparams(images, **overrides)
    spec = _spec(scenario, hvparams, fields)
    xml = domain_xml(spec)
    herder = summarize_libvirt(embedded_qemu.domainXMLToNative("qemu-argv", xml))
    ganeti = summarize_ganeti(_ganeti_argv(ganeti_root, spec, hvparams))

    # Not in a converted command line, by libvirt's design (docs/compat.md): vhost fds are
    # opened only at a real start, and on_reboot=destroy is done by libvirt on QEMU's reset
    # event instead of -no-reboot. Both are checked in the XML.
    for nic in ganeti["nics"]:
        if nic.pop("vhost"):
            assert "<driver name=\"vhost\"" in xml
    for nic in herder["nics"]:
        nic.pop("vhost")
    if ganeti.pop("no_reboot"):
        assert "<on_reboot>destroy</on_reboot>" in xml
    herder.pop("no_reboot")

    # Ganeti writes only the topology counts it was given; QEMU derives the rest.
    assert herder["smp"]["cpus"] == ganeti["smp"]["cpus"] == spec.vcpus
    for key, value in ganeti["smp"].items():
        assert herder["smp"][key] == value, key
    for key in ("memory", "kernel", "initrd", "append", "accel", "disks", "cdroms", "nics",
                "vnc", "serials", "usb_inputs", "uuid", "acpi", "rtc", "cpu",
                "vga", "balloon", "guest_agent", "keymap"):
        assert herder[key] == ganeti[key], key
    # Ganeti asks QEMU for its default machine; libvirt expands its default the same way.
    assert herder["machine"] == ganeti["machine"]


def test_scenarios_cover_the_devices(embedded_qemu: Any, images: Path) -> None:
    """The comparison above looks at real devices (a parser that found nothing compares
    equal too)."""
    hvparams = _hvparams(images, **SCENARIOS["ide-e1000-topology"][0])
    spec = _spec("ide-e1000-topology", hvparams, SCENARIOS["ide-e1000-topology"][1])
    herder = summarize_libvirt(embedded_qemu.domainXMLToNative("qemu-argv", domain_xml(spec)))
    assert [disk["driver"] for disk in herder["disks"]] == ["ide-hd", "ide-hd"]
    assert {disk["cache"] for disk in herder["disks"]} == {"writethrough", "none"}
    assert [nic["driver"] for nic in herder["nics"]] == ["e1000", "e1000"]
    assert herder["cdroms"] == [{"file": str(images / "debian.iso"), "bus": "ide"}]
    assert herder["smp"] == {"cpus": 4, "sockets": 2, "cores": 2, "threads": 1}
    assert herder["acpi"] is False
    assert herder["rtc"] == "localtime" and herder["memory"] == 512


def test_vnc_display_password_and_keymap(embedded_qemu: Any, images: Path) -> None:
    hvparams = _hvparams(images, **SCENARIOS["kernel-virtio-vnc"][0])
    spec = _spec("kernel-virtio-vnc", hvparams, SCENARIOS["kernel-virtio-vnc"][1])
    herder = summarize_libvirt(embedded_qemu.domainXMLToNative("qemu-argv", domain_xml(spec)))
    assert herder["vnc"] == {"address": "127.0.0.1:5117", "password": True}  # 11017 - 5900
    assert herder["keymap"] == "de"
    assert herder["usb_inputs"] == ["tablet"] and herder["serials"] == 1
