"""The libvirt hypervisor driver against libvirt's test driver (in process)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from herder.core import params
from herder.noded.hypervisor import Hypervisor, HypervisorError, domain_type_for
from herder.noded.kvm.domain import DiskSpec, InstanceSpec, NicSpec

UUID = "6f6c3b5e-2d43-4f7b-a9d1-8a0f0e1c2b3a"


def spec(name: str = "i1", memory: int = 256) -> InstanceSpec:
    return InstanceSpec(name, UUID, memory, 2, params.hv_family("kvm").defaults(),
                        disks=(DiskSpec("/tmp/i1-disk0.img", "file"),),
                        nics=(NicSpec("aa:00:00:00:00:01", "bridged", "br0"),))


def test_the_test_driver_gets_the_instance_domain_as_type_test(tmp_path: Path) -> None:
    hv = Hypervisor("test:///default", tmp_path)
    root = ET.fromstring(hv.render(spec()))
    assert root.get("type") == "test" and not hv.runs_guests
    assert root.find("memory").text == "256" and root.findtext("vcpu") == "2"
    assert root.find("devices/disk/source").get("file") == "/tmp/i1-disk0.img"
    assert root.find("devices/interface/source").get("bridge") == "br0"
    assert hv.kvm_probe().usable  # nothing probed on the test driver


def test_a_changed_spec_and_a_rename_replace_the_definition(tmp_path: Path) -> None:
    hv = Hypervisor("test:///default", tmp_path)
    try:
        assert hv.define(spec("old.example.com")) is None
        assert hv.define(spec("old.example.com", memory=512)) is None
        assert hv.domains_info()["old.example.com"].memory == 512
        assert hv.define(spec("new.example.com")) == "old.example.com"
        assert "old.example.com" not in hv.list_domains()
        assert hv.recorded() == ["new.example.com"]
        hv.start("new.example.com")
        with pytest.raises(HypervisorError, match="still runs here under its old name"):
            hv.define(spec("third.example.com"))
    finally:
        hv.close()


def test_domain_types() -> None:
    assert domain_type_for("test:///default") == "test"
    assert domain_type_for("test+unix:///default?socket=/x") == "test"
    assert domain_type_for("qemu:///system") == "kvm"


def test_lifecycle_on_the_test_driver(tmp_path: Path) -> None:
    hv = Hypervisor("test:///default", tmp_path)
    try:
        hv.define(spec("lifecycle"))
        assert hv.state("lifecycle") == "shutoff" and hv.recorded() == ["lifecycle"]
        before = hv.host_info()
        hv.start("lifecycle")
        assert hv.state("lifecycle") == "running"
        domain = hv.domains_info()["lifecycle"]
        assert (domain.state, domain.memory, domain.vcpus) == ("running", 256, 2)
        running = hv.host_info()
        assert running.domains_memory == before.domains_memory + 256
        # libvirt's test driver: 16 CPUs in 2 NUMA cells of 2 sockets each, 3 GiB
        assert (running.cpu_total, running.cpu_nodes, running.cpu_sockets,
                running.memory_total) == (16, 2, 4, 3072)
        hv.reboot("lifecycle", hard=True)
        assert hv.state("lifecycle") == "running"
        hv.shutdown("lifecycle", timeout=2)
        assert hv.state("lifecycle") in ("shutoff", "shutdown")
        hv.undefine("lifecycle")
        assert hv.state("lifecycle") is None and hv.recorded() == []
        with pytest.raises(HypervisorError, match="no domain"):
            hv.start("lifecycle")
    finally:
        hv.close()


def test_unreachable_libvirt_is_a_clear_error(tmp_path: Path) -> None:
    hv = Hypervisor("test+unix:///default?socket=/nonexistent/sock", tmp_path)
    with pytest.raises(HypervisorError, match="libvirt unreachable at"):
        hv.list_domains()
