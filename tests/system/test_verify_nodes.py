"""Issue 34 items 5 and 9 over real node daemons (noded's server over HTTPS, libvirt's test
driver, in this process; masterd's real job queue and processor): `cluster verify` on hosts that
can run nothing reports each missing prerequisite with Ganeti's code and message, and Ganeti's
`-H kvm:kernel_path=...` creates an instance with those parameters."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.cli.instance import hv_option
from herder.core.store import FileStore
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.rapi.instances import create_opcode
from tests.conftest import build_config
from tests.system.inprocess_master import master_over_nodes

ADDRESSES = {"node1.example.com": "127.0.0.181", "node2.example.com": "127.0.0.182"}


@dataclass
class Cluster:
    store: FileStore
    queue: JobQueue
    storage: Path

    def run(self, op: dict[str, Any]) -> dict[str, Any]:
        job = self.queue.wait(self.queue.submit([op]), 120)
        return {"status": str(job.status), "result": job.ops[0].result}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("verify")
    storage = directory / "file-storage"
    storage.mkdir()
    config = build_config(nodes=2, drbd_instances=0, plain_instances=0)
    config.cluster.enabled_disk_templates = ["file", "diskless"]
    config.cluster.file_storage_dir = str(storage)
    for node in config.nodes.values():
        node.primary_ip = ADDRESSES[node.name]
    with master_over_nodes(directory, config, ADDRESSES) as master:
        yield Cluster(master.store, master.queue, storage)


def test_hosts_that_can_run_nothing_do_not_verify_clean(cluster: Cluster) -> None:
    """The node daemons' hosts (this machine) have no bridge br0 (the cluster's NIC link), no
    kernel at Ganeti's default kernel_path, no allowed-paths file and no OS definition: each
    node says so."""
    job = cluster.run({"OP_ID": "OP_CLUSTER_VERIFY_GROUP", "group_name": "default"})
    assert job["status"] == "success", job
    found = {(f["severity"], f["code"], f["object"], f["message"]) for f in job["result"]}
    for name in ADDRESSES:
        node = f"node {name}"
        assert ("error", "ENODENET", node, "missing bridges: br0") in found
        assert ("error", "ENODEHV", node, "hypervisor kvm parameter verify failure (source "
                "cluster): Parameter 'kernel_path' fails validation: not found or not a file "
                "(current value: '/boot/vmlinuz-3-kvmU')") in found
        assert ("error", "ENODEOS", node, "no valid OS definition found on the node") in found
        unusable = [m for _, code, obj, m in found
                    if code == "ENODEFILESTORAGEPATHUNUSABLE" and obj == node]
        assert len(unusable) == 1 and unusable[0].startswith(
            "The configured file storage path is unusable: No paths are valid or path file ")
    assert not [f for f in found if f[1] in ("ENODETIME", "ENODERPC", "ECLUSTERCERT")], found


def test_ganetis_hypervisor_option_on_instance_add(cluster: Cluster, tmp_path: Path) -> None:
    """`gnt-instance add -H kvm:kernel_path=/x,initrd_path=/y` as the CLI sends it (RAPI's
    create body, its version taken by the route) becomes the instance's hypervisor and
    parameters."""
    kernel, initrd = tmp_path / "vmlinuz", tmp_path / "initrd"
    hypervisor, hvparams = hv_option((f"kvm:kernel_path={kernel},initrd_path={initrd}",))
    body: dict[str, object] = {
        "name": "hv.example.com", "disk_template": "diskless",
        "os_type": "none", "disks": [], "nics": [], "pnode": "node1.example.com",
        "hypervisor": hypervisor, "hvparams": hvparams, "start": False, "no_install": True,
        "ignore_ipolicy": True,
        "name_check": False, "ip_check": False}
    op = create_opcode(body, "instance create")
    job = cluster.run(op)
    assert job["status"] == "success", job
    inst = cluster.store.load().find_instance("hv.example.com")
    assert inst.hypervisor == "kvm"
    assert inst.hvparams == {"kernel_path": str(kernel), "initrd_path": str(initrd)}
