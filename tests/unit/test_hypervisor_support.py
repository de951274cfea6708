"""herder's nodes run only kvm (and libvirt's test driver: `fake`) domains; Ganeti's other
hypervisors are known (imports, merges, hail's requests carry them) but enabling one, or
creating an instance of one, is refused in one line instead of silently defining a KVM domain
(compat row D26)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.core import params
from herder.core.errors import HerderError
from herder.core.store import FileStore
from herder.masterd import cluster_init
from herder.masterd.jobs import opcodes
from tests.unit.test_jobs import Master

NOT_RUN = sorted(params.HYPERVISORS - params.RUNNABLE_HYPERVISORS)


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path)
    yield m
    m.queue.stop()


def test_the_runnable_hypervisors_are_known_ones() -> None:
    assert params.RUNNABLE_HYPERVISORS == {"kvm", "fake"} <= params.HYPERVISORS
    assert NOT_RUN == ["chroot", "lxc", "xen-hvm", "xen-pvm"]


@pytest.mark.parametrize("hypervisor", NOT_RUN)
def test_enabling_a_hypervisor_herder_cannot_run_is_refused(master: Master,
                                                            hypervisor: str) -> None:
    with pytest.raises(opcodes.OpcodeError) as err:
        opcodes.parse({"OP_ID": "OP_CLUSTER_SET_PARAMS",
                       "enabled_hypervisors": ["kvm", hypervisor]})
    assert f"hypervisor {hypervisor} is not supported" in str(err.value)
    assert "\n" not in str(err.value)
    before = master.store.load().cluster.enabled_hypervisors
    with pytest.raises(opcodes.OpcodeError):
        master.queue.submit([{"OP_ID": "OP_CLUSTER_SET_PARAMS",
                              "enabled_hypervisors": [hypervisor]}])
    assert master.store.load().cluster.enabled_hypervisors == before
    ok = master.run({"OP_ID": "OP_CLUSTER_SET_PARAMS", "enabled_hypervisors": ["kvm", "fake"]})
    assert ok["status"] == "success", ok
    assert master.store.load().cluster.enabled_hypervisors == ["kvm", "fake"]


def test_cluster_init_refuses_it_and_writes_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "config.json")
    settings = cluster_init.InitSettings(
        name="c.example.com", master_node="n1.example.com", primary_ip="192.0.2.10",
        enabled_hypervisors=("kvm", "xen-pvm"), force=True)
    with pytest.raises(HerderError, match="hypervisor xen-pvm is not supported"):
        cluster_init.init_cluster(store, settings)
    assert not store.exists() and list(tmp_path.iterdir()) == []


def test_an_instance_of_an_imported_clusters_xen_is_not_created(master: Master) -> None:
    """A cluster imported from Ganeti may still list xen-pvm as enabled."""
    with master.store.update() as config:
        config.cluster.enabled_hypervisors = ["xen-pvm", "kvm"]
    info = master.run({"OP_ID": "OP_INSTANCE_CREATE", "instance_name": "x.example.com",
                       "disk_template": "diskless", "disks": [], "nics": [],
                       "pnode": "node2.example.com", "hypervisor": "xen-pvm",
                       "no_install": True, "name_check": False, "ip_check": False})
    assert info["status"] == "error"
    assert "hypervisor xen-pvm is not supported" in str(info["opresult"])
    assert all(i.name != "x.example.com" for i in master.store.load().instances.values())
