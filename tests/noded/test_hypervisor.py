"""The libvirt hypervisor driver against libvirt's test driver (in process)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from herder.noded.hypervisor import DomainSpec, Hypervisor, HypervisorError, domain_type_for


def spec(name: str = "i1", uid: int | None = None) -> DomainSpec:
    return DomainSpec(name=name, uuid="6f6c3b5e-2d43-4f7b-a9d1-8a0f0e1c2b3a", memory=256,
                      vcpus=2, disks=["/tmp/i1-disk0.img"],
                      nics=[{"mac": "aa:00:00:00:00:01", "mode": "bridged", "link": "br0"}],
                      uid=uid)


def test_domain_xml() -> None:
    root = ET.fromstring(spec().xml("kvm"))
    assert root.get("type") == "kvm"
    assert root.findtext("memory") == "256" and root.findtext("vcpu") == "2"
    assert root.find("devices/disk/source").get("file") == "/tmp/i1-disk0.img"
    assert root.find("devices/interface/source").get("bridge") == "br0"
    assert root.find("seclabel") is None


def test_uid_from_the_pool_becomes_a_dac_label() -> None:
    label = ET.fromstring(spec(uid=2042).xml("kvm")).find("seclabel")
    assert label is not None and label.get("model") == "dac"
    assert label.findtext("label") == "+2042:+2042"


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
