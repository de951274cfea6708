"""The domain XML's pieces that no command-line comparison reaches: Open vSwitch VLANs, routed
taps, network disks, SPICE, balloon, security labels, and the refusals."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from herder.core import params
from herder.noded.kvm import domain
from herder.noded.kvm.domain import (
    DiskSpec,
    DomainError,
    InstanceSpec,
    NetworkSource,
    NicSpec,
    domain_xml,
)

UUID = "6f1c3a46-1f4b-4b7e-9b0a-1a2b3c4d5e6f"


def _spec(hv: dict[str, Any] | None = None, **fields: Any) -> InstanceSpec:
    hvparams = params.hv_family("kvm").defaults()
    hvparams.update(hv or {})
    base: dict[str, Any] = {"name": "inst1.example.com", "uuid": UUID, "maxmem": 512,
                            "vcpus": 2, "hvparams": hvparams}
    base.update(fields)
    return InstanceSpec(**base)


def _xml(spec: InstanceSpec) -> ET.Element:
    return ET.fromstring(domain_xml(spec))


def test_every_ganeti_kvm_hvparam_has_a_mapping() -> None:
    declared = set(params.hv_family("kvm").specs)
    assert declared == set(domain.HVPARAM_MAPPING)


def test_openvswitch_vlans() -> None:
    nics = (NicSpec("aa:00:00:00:00:01", "openvswitch", "ovsbr0", vlan=".100"),
            NicSpec("aa:00:00:00:00:02", "openvswitch", "ovsbr0", vlan=":100:200"),
            NicSpec("aa:00:00:00:00:03", "openvswitch", "ovsbr0", vlan=".10:20:30"))
    interfaces = _xml(_spec(nics=nics)).findall("devices/interface")
    assert [i.find("virtualport").get("type") for i in interfaces] == ["openvswitch"] * 3
    access, trunk, native = (i.find("vlan") for i in interfaces)
    assert access.get("trunk") is None and [t.get("id") for t in access] == ["100"]
    assert trunk.get("trunk") == "yes" and [t.get("id") for t in trunk] == ["100", "200"]
    assert [(t.get("id"), t.get("nativeMode")) for t in native] == [
        ("10", "untagged"), ("20", None), ("30", None)]
    # Ganeti's kvm-ifup takes a bare number as the access port too
    assert domain.parse_ovs_vlan("100") == domain.parse_ovs_vlan(".100") == ([100], False, None)
    with pytest.raises(DomainError, match="vlan"):
        domain_xml(_spec(nics=(NicSpec("aa:00:00:00:00:04", "openvswitch", "b", vlan="x"),)))
    with pytest.raises(DomainError, match="openvswitch"):
        domain_xml(_spec(nics=(NicSpec("aa:00:00:00:00:05", "bridged", "br0", vlan=".5"),)))


def test_routed_nic_is_a_tap_with_ganeti_variables() -> None:
    spec = _spec(nics=(NicSpec("aa:00:00:00:00:01", "bridged", "br0"),
                       NicSpec("aa:00:00:00:00:02", "routed", "100", ip="192.0.2.7")),
                 tags=("web",))
    routed = _xml(spec).findall("devices/interface")[1]
    assert routed.get("type") == "ethernet"
    tap = routed.find("target").get("dev")
    assert tap == domain.tap_name(UUID, 1) and len(tap) <= 15
    # no <script>: libvirt would run it for the incoming copy of a migration too; noded
    # configures the tap once the guest runs (kvm.ifup)
    assert routed.find("script") is None and routed.find("target").get("managed") == "yes"
    env = domain.ifup_environment(spec, 1)
    assert env["INTERFACE"] == tap and env["IP"] == "192.0.2.7" and env["MODE"] == "routed"
    assert env["LINK"] == "100" and env["INSTANCE"] == spec.name and env["TAGS"] == "web"


def test_disk_sources_by_template() -> None:
    disks = (DiskSpec("/dev/drbd0", "drbd"), DiskSpec("/srv/f/disk0", "file"),
             DiskSpec("/dev/xenvg/lv", "plain"),
             DiskSpec("", "rbd", network=NetworkSource("rbd", "rbd/vol1",
                                                       (("198.18.0.1", 6789),))))
    elements = _xml(_spec(disks=disks)).findall("devices/disk")
    assert [d.get("type") for d in elements] == ["block", "file", "block", "network"]
    assert elements[0].find("source").get("dev") == "/dev/drbd0"
    assert elements[1].find("source").get("file") == "/srv/f/disk0"
    rbd = elements[3].find("source")
    assert (rbd.get("protocol"), rbd.get("name")) == ("rbd", "rbd/vol1")
    assert rbd.find("host").attrib == {"name": "198.18.0.1", "port": "6789"}
    assert [d.find("target").get("dev") for d in elements] == ["vda", "vdb", "vdc", "vdd"]


def test_balloon_between_minmem_and_maxmem() -> None:
    root = _xml(_spec(minmem=256, start_memory=384))
    assert root.find("memory").text == "512" and root.find("currentMemory").text == "384"
    assert root.find("devices/memballoon").get("model") == "virtio"
    with pytest.raises(DomainError, match="below minmem"):
        domain_xml(_spec(minmem=256, start_memory=128))


def test_kvm_flag_follows_the_probe() -> None:
    assert _xml(_spec(kvm_usable=True)).get("type") == "kvm"
    assert _xml(_spec(kvm_usable=False)).get("type") == "qemu"
    assert _xml(_spec({"kvm_flag": "disabled"}, kvm_usable=True)).get("type") == "qemu"
    with pytest.raises(DomainError, match="hardware KVM does not work"):
        domain_xml(_spec({"kvm_flag": "enabled"}, kvm_usable=False))


def test_serial_console_log_and_lifecycle() -> None:
    root = _xml(_spec({"reboot_behavior": "exit"},
                      serial_log="/var/log/herder/instances/inst1.serial.log"))
    serial = root.find("devices/serial")
    assert serial.get("type") == "pty"
    assert serial.find("log").get("file") == "/var/log/herder/instances/inst1.serial.log"
    assert root.find("on_reboot").text == "destroy"
    assert root.find("on_poweroff").text == "destroy"
    assert _xml(_spec({"serial_console": False})).find("devices/serial") is None


def test_security_model_pool_runs_as_the_uid() -> None:
    label = _xml(_spec({"security_model": "pool"}, run_as=(2001, 2001))).find("seclabel")
    assert label.get("model") == "dac" and label.find("label").text == "+2001:+2001"
    with pytest.raises(DomainError, match="no uid"):
        domain_xml(_spec({"security_model": "user"}))


def test_spice_with_tls_and_agent() -> None:
    root = _xml(_spec({"spice_bind": "eth0", "spice_use_tls": True,
                       "spice_image_compression": "auto_glz",
                       "spice_playback_compression": False},
                      network_port=11020, interface_addresses={"eth0": "198.18.0.5"}))
    graphics = root.find("devices/graphics")
    assert graphics.get("type") == "spice" and graphics.get("tlsPort") == "11020"
    assert graphics.find("listen").get("address") == "198.18.0.5"
    assert graphics.find("image").get("compression") == "auto_glz"
    assert graphics.find("playback").get("compression") == "off"
    assert root.find("devices/channel/target").get("name") == "com.redhat.spice.0"
    assert root.find("devices/video/model").get("type") == "qxl"


def test_vnc_on_a_unix_socket_and_refusals() -> None:
    root = _xml(_spec({"vnc_bind_address": "/run/herder/vnc"}))
    assert root.find("devices/graphics/listen").get("socket") == \
        "/run/herder/vnc/inst1.example.com.vnc"
    with pytest.raises(DomainError, match="not a VNC display"):
        domain_xml(_spec({"vnc_bind_address": "127.0.0.1"}, network_port=5000))
    with pytest.raises(DomainError, match="no address known"):
        domain_xml(_spec({"vnc_bind_address": "eth9"}, network_port=11000))
    with pytest.raises(DomainError, match="disk_type='pflash'"):
        domain_xml(_spec({"disk_type": "pflash"}, disks=(DiskSpec("/dev/x", "plain"),)))


def test_cpu_pinning_topology_and_model() -> None:
    root = _xml(_spec({"cpu_mask": "0:1-2", "cpu_type": "qemu64,+ssse3,-svm",
                       "cpu_sockets": 1}, vcpus=2))
    pins = root.findall("cputune/vcpupin")
    assert [(p.get("vcpu"), p.get("cpuset")) for p in pins] == [("0", "0"), ("1", "1-2")]
    cpu = root.find("cpu")
    assert cpu.find("model").text == "qemu64"
    assert [(f.get("policy"), f.get("name")) for f in cpu.findall("feature")] == [
        ("require", "ssse3"), ("disable", "svm")]
    assert cpu.find("topology").attrib == {"sockets": "1", "dies": "1", "cores": "2",
                                           "threads": "1"}
    assert _xml(_spec({"cpu_mask": "3"})).find("vcpu").get("cpuset") == "3"
    with pytest.raises(DomainError, match="does not make"):
        domain_xml(_spec({"cpu_sockets": 2, "cpu_cores": 2}, vcpus=3))


def test_rename_and_changed_parameters_regenerate() -> None:
    first = _xml(_spec())
    second = _xml(_spec(name="renamed.example.com", maxmem=1024))
    assert first.find("uuid").text == second.find("uuid").text
    assert second.find("name").text == "renamed.example.com"
    assert second.find("memory").text == "1024"
