"""The two jobs of a move between clusters failing on real node daemons in this process (the
real job queue, processor and LUs; noded's server on libvirt's test driver, file disks), whose
nodes have no node certificate, so no stream can be made: the target's remote-import fails in
one line and removes its partial instance (config entry and disk file); the source's remote
export fails in one line and leaves the instance as it was. (The streams themselves:
tests/noded/test_remote_import.py; the whole move: tests/system/test_move_cluster_sim.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.core import node_certs, remote_export
from herder.core.cluster_secrets import DOMAIN_SECRET_FILE, self_signed_certificate
from herder.core.store import FileStore
from herder.masterd.jobs.queue import JobQueue
from herder.sim import guest
from tests.conftest import build_config
from tests.noded.test_disk_transfer import allow
from tests.system.inprocess_master import master_over_nodes

ADDRESSES = {"node1.example.com": "127.0.0.173"}
CDS = "0123456789abcdef0123456789abcdef"


@dataclass
class Cluster:
    store: FileStore
    queue: JobQueue
    storage: Path

    def run(self, op: dict[str, Any]) -> tuple[str, Any, list[Any]]:
        job = self.queue.wait(self.queue.submit([op]), 120)
        return str(job.status), job.ops[0].result, job.ops[0].log


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("remote-streams")
    storage = directory / "file-storage"
    storage.mkdir()
    (directory / DOMAIN_SECRET_FILE).write_text(CDS + "\n")
    config = build_config(nodes=1, drbd_instances=0, plain_instances=0)
    config.cluster.enabled_disk_templates = ["file", "diskless"]
    config.cluster.file_storage_dir = str(storage)
    node = config.find_node("node1")
    node.primary_ip = ADDRESSES[node.name]
    config.cluster.node_certs[node.uuid] = "ab" * 32
    os_dir = guest.install_os_definition(directory / "os")
    allow(directory / node.name / "root", storage)
    with master_over_nodes(directory, config, ADDRESSES, os_path=(os_dir.parent,)) as master:
        yield Cluster(master.store, master.queue, storage)


def signed_ca(name: str) -> str:
    return remote_export.sign_certificate(
        CDS, node_certs.certificate_pem(self_signed_certificate(name)).decode())


def test_a_remote_import_that_cannot_listen_removes_its_instance(cluster: Cluster) -> None:
    status, result, log = cluster.run({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": "moved.example.com",
        "mode": "remote-import", "disk_template": "file", "disks": [{"size": 4}],
        "nics": [{}], "os_type": guest.OS_NAME, "pnode": "node1.example.com",
        "name_check": False, "ip_check": False, "start": False, "ignore_ipolicy": True,
        "source_handshake": list(remote_export.compute_handshake(CDS)),
        "source_x509_ca": signed_ca("source-cluster"),
        "source_instance_name": "web1.example.com"})
    assert status == "error", result
    kind, (message, *_) = result
    assert kind == "OpExecError" and "\n" not in message
    assert message.startswith("remote import of moved.example.com failed: ") and \
        "no node certificate" in message, message
    assert all(entry[2] != "remote-import" for entry in log)  # nothing announced
    assert "moved.example.com" not in {i.name for i in cluster.store.load().instances.values()}
    assert not list(cluster.storage.rglob("*")), "the partial instance's disk is left"


def test_a_remote_export_that_cannot_send_leaves_the_instance(cluster: Cluster) -> None:
    created = cluster.run({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": "web1.example.com",
        "disk_template": "file", "disks": [{"size": 4}], "nics": [{}], "no_install": True,
        "pnode": "node1.example.com", "name_check": False, "ip_check": False,
        "start": False, "os_type": guest.OS_NAME, "ignore_ipolicy": True})
    assert created[0] == "success", created
    before = cluster.store.load()
    inst = before.find_instance("web1.example.com")
    key = list(remote_export.sign_key_name(CDS, before.cluster.node_certs[inst.primary_node]))
    status, result, _ = cluster.run({
        "OP_ID": "OP_BACKUP_EXPORT", "instance_name": "web1.example.com", "mode": "remote",
        "target_node": [list(remote_export.compute_disk_info(CDS, "s1", 0, "127.0.0.250",
                                                             40000, "magic-token"))],
        "x509_key_name": key, "destination_x509_ca": signed_ca("target-cluster")})
    assert status == "error", result
    kind, (message, *_) = result
    assert kind == "OpExecError" and "\n" not in message
    assert message.startswith("remote export of web1.example.com failed: ") and \
        "no node certificate" in message, message
    after = cluster.store.load().find_instance("web1.example.com")
    assert (after.admin_state, after.serial_no) == (inst.admin_state, inst.serial_no)
    assert list(cluster.storage.rglob("disk*")), "its disk is gone"
