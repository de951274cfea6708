"""The node's checks before a domain is defined (herder.noded.kvm.preflight) and the spec noded
builds from the master's payload (herder.noded.instance_spec)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import msgspec
import pytest

from herder.core import params, qemu_procs
from herder.core.rpcdefs.payload import InstancePayload
from herder.noded import instance_spec
from herder.noded.kvm import preflight
from herder.noded.kvm.domain import DiskSpec, InstanceSpec, NicSpec

UUID = "0c7d1b52-8f1e-4a8e-9d54-3f0e9f3b1a11"


def _spec(tmp_path: Path, **hv: object) -> InstanceSpec:
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"k")
    hvparams = {**params.hv_family("kvm").defaults(), "kernel_path": str(kernel),
                "initrd_path": "", **hv}
    return InstanceSpec("web1.example.com", UUID, 128, 1, hvparams,
                        nics=(NicSpec("aa:00:00:00:00:01", "bridged", "br0"),),
                        network_port=11000)


def test_a_node_with_what_the_domain_needs_has_no_problems(tmp_path: Path) -> None:
    facts = preflight.NodeFacts(bridges={"br0"}, port_in_use=lambda address, port: False)
    assert preflight.problems(_spec(tmp_path), facts) == []


def test_missing_bridge_bad_kernel_and_occupied_port_are_one_line(tmp_path: Path) -> None:
    facts = preflight.NodeFacts(bridges={"br1"}, port_in_use=lambda address, port: True)
    spec = _spec(tmp_path, kernel_path="/nonexistent/vmlinuz", vnc_bind_address="0.0.0.0")
    with pytest.raises(preflight.PreflightError) as caught:
        preflight.check(spec, facts)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("cannot start web1.example.com: ")
    assert "bridge br0 does not exist on this node" in message
    assert "kernel_path /nonexistent/vmlinuz does not exist on this node" in message
    assert "port 11000 on 0.0.0.0 (the console of web1.example.com) is already in use" \
        in message


def test_port_in_use_sees_a_real_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert preflight.port_in_use("127.0.0.1", port)
    assert not preflight.port_in_use("127.0.0.1", port)


def test_spec_from_the_payload() -> None:
    hvparams = params.hv_family("kvm").defaults()
    payload = msgspec.convert({
        "name": "web1.example.com", "uuid": UUID, "memory": 512, "vcpus": 2,
        "hvparams": hvparams, "beparams": {"maxmem": 512, "minmem": 256, "vcpus": 2},
        "nics": [{"mac": "aa:00:00:00:00:01", "ip": None, "mode": "openvswitch",
                  "link": "ovs0", "vlan": ".100"}], "tags": ["a"]}, InstancePayload)
    disks = [DiskSpec("/dev/xenvg/disk0", "plain")]
    spec = instance_spec.from_payload(payload, disks, kvm_usable=False,
                                      serial_log="/var/log/x.log")
    assert (spec.maxmem, spec.minmem, spec.vcpus, spec.kvm_usable) == (512, 256, 2, False)
    assert spec.nics == (NicSpec("aa:00:00:00:00:01", "openvswitch", "ovs0", ".100"),)
    assert spec.disks == tuple(disks) and spec.tags == ("a",)
    assert instance_spec.bind_interfaces({"vnc_bind_address": "eth0",
                                          "spice_bind": "10.0.0.1"}) == ["eth0"]
    assert instance_spec.password_files({"vnc_bind_address": "0.0.0.0",
                                         "vnc_password_file": "/etc/pw"}) == {"vnc": "/etc/pw"}


def test_openvswitch_links_are_open_vswitch_bridges() -> None:
    nics = (NicSpec("aa:00:00:00:00:01", "bridged", "br0"),
            NicSpec("aa:00:00:00:00:02", "openvswitch", "ovsbr0", ".100"),
            NicSpec("aa:00:00:00:00:03", "routed", "100", ip="192.0.2.7"))
    # a Linux bridge of the same name is not an Open vSwitch bridge, nor the reverse
    assert preflight.missing_links(nics, {"br0", "ovsbr0"}, {"br0"}) == [
        "openvswitch bridge ovsbr0 does not exist on this node"]
    assert preflight.missing_links(nics, {"ovsbr0"}, {"br0", "ovsbr0"}) == [
        "bridge br0 does not exist on this node"]
    assert preflight.missing_links(nics, {"br0"}, None) == [
        "openvswitch NICs (ovsbr0) but Open vSwitch does not run on this node "
        "(ovs-vsctl list-br)"]
    assert preflight.missing_links(nics, {"br0"}, {"ovsbr0"}) == []


def _qemu(tmp_path: Path, *name: str) -> subprocess.Popen[bytes]:
    """A real QEMU (stopped, no devices) named as given."""
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        pytest.fail("needs qemu-system-x86_64 (scripts/sysdeps.sh)")
    return subprocess.Popen([qemu, *name, "-machine", "none", "-S", "-nodefaults",
                             "-no-user-config", "-display", "none", "-monitor", "none"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=tmp_path)


def test_a_guest_running_outside_libvirt_is_never_started_twice(tmp_path: Path) -> None:
    """After import-ganeti, a guest Ganeti started runs on in Ganeti's own QEMU (hv_kvm's
    command line names it `-name NAME`); libvirt does not know it, so a start (the watcher's
    restart of an instance it sees down, an operator's) must be refused, not run a second QEMU
    on its disks. libvirt's own QEMU (`-name guest=NAME,...`) is not such a process."""
    name = "web1.example.com"
    ganetis = _qemu(tmp_path, "-name", name)
    libvirts = _qemu(tmp_path, "-name", "guest=web2.example.com,debug-threads=on")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not qemu_procs.foreign_qemu(name):
            time.sleep(0.1)
        assert qemu_procs.foreign_qemu(name) == [ganetis.pid]
        assert qemu_procs.foreign_qemu("web2.example.com") == []
        facts = preflight.NodeFacts(bridges={"br0"}, port_in_use=lambda address, port: False)
        with pytest.raises(preflight.PreflightError) as caught:
            preflight.check(_spec(tmp_path), facts)
        assert str(caught.value) == (
            f"cannot start {name}: a QEMU that libvirt does not manage already runs {name} "
            f"(pid {ganetis.pid}; a guest Ganeti started?): stop it, or leave the instance as "
            "it runs, before starting it here")
    finally:
        for proc in (ganetis, libvirts):
            proc.kill()
            proc.wait(30)
    # once Ganeti's QEMU is gone, the instance may start
    assert qemu_procs.foreign_qemu(name) == []
    facts = preflight.NodeFacts(bridges={"br0"}, port_in_use=lambda address, port: False)
    assert preflight.problems(_spec(tmp_path), facts) == []
