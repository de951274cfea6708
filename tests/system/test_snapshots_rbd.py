"""Issue 30 item 4 for rbd: snapshots of an instance whose disks are images on a real Ceph
(herder.sim.ceph: one monitor and one OSD on 127.0.0.38, the restricted user client.herder;
the Ceph tests/noded/bdev/test_rbd_ceph.py uses too, started once for both: tests/cephshare.py),
through the job path (the real job queue, processor and LUs in this process) over two real
node daemons whose `rbd` tool runs as the nodes' user.

A pattern written to both images is snapshotted (`rbd snap create`), overwritten, rolled back
(`rbd snap rollback`): the pattern is back; a rollback while a client has an image open is
refused and puts back what it changed; the snapshot's `rbd snap`s are removed with it, and with
the instance; the queue's recovery job removes the snapshots of one the master never recorded.
An export of a running instance (`shutdown` false, issue 30 item 1) reads each disk's snapshot
(`rbd export IMAGE@SNAP -` into the OS export script) and removes it, also when the export
fails.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.core import exportconf, model
from herder.core.store import FileStore
from herder.masterd.jobs import opcodes
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.lu.backup import EXPORT_SNAPSHOT
from herder.noded.bdev.base import Host, SubprocessRunner
from herder.sim import ceph, guest
from tests import cephshare
from tests.conftest import build_config
from tests.noded.bdev.test_rbd_ceph import OFFSET, PATTERN, snapshots_of, write_image
from tests.system.inprocess_master import master_over_nodes
from tests.system.test_snapshots import error_of, snapshot_op

ADDRESSES = {"node1.example.com": "127.0.0.193", "node2.example.com": "127.0.0.194"}
LATER = b"\xa5" * len(PATTERN)
SIZE = 4  # MiB: one RADOS object (the size matters to none of these tests; OFFSET is in it)


@dataclass
class Cluster:
    store: FileStore
    queue: JobQueue
    ceph: ceph.CephCluster
    directory: Path

    def run(self, op: dict[str, Any]) -> dict[str, Any]:
        job_id = self.queue.submit([op])
        job = self.queue.wait(job_id, 300)
        return {"status": str(job.status), "result": job.ops[0].result,
                "log": [str(entry) for entry in job.ops[0].log]}

    def images(self, name: str) -> list[str]:
        return [disk.logical_id.name for disk in self.store.load().find_instance(name).disks
                if isinstance(disk.logical_id, model.ExtId)]

    def read(self, image: str) -> bytes:
        return self.ceph.read_image(image, OFFSET + len(PATTERN))[OFFSET:]

    def snapshots(self, name: str) -> list[list[str]]:
        return [snapshots_of(self.ceph, image) for image in self.images(name)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    assert os.geteuid() == 0, "the Ceph daemons run as root here"
    directory = tmp_path_factory.mktemp("snapshots-rbd")
    started = cephshare.shared(tmp_path_factory, skip_without=False)  # CephError: fails
    config = build_config(nodes=2, drbd_instances=0, plain_instances=0)
    config.cluster.enabled_disk_templates = ["rbd", "diskless"]
    config.cluster.diskparams["rbd"] = {"pool": started.pool, "access": "userspace"}
    for node in config.nodes.values():
        node.primary_ip = ADDRESSES[node.name]
    hosts = {name: Host(runner=SubprocessRunner(extra_env=started.client_env))
             for name in ADDRESSES}
    os_dir = guest.install_os_definition(directory / "os")
    with master_over_nodes(directory, config, ADDRESSES, hosts=hosts,
                           os_path=(os_dir.parent,)) as master:
        yield Cluster(master.store, master.queue, started, directory)


def create(cluster: Cluster, name: str, disks: int = 2, **extra: Any) -> None:
    job = cluster.run({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "disk_template": "rbd",
        "disks": [{"size": SIZE}] * disks, "nics": [{}], "pnode": "node1.example.com",
        "name_check": False, "ip_check": False, "no_install": True, "start": False,
        "ignore_ipolicy": True, **extra})
    assert job["status"] == "success", job


def test_snapshot_write_more_rollback_and_the_data_is_back(cluster: Cluster) -> None:
    name = "rbd1.example.com"
    create(cluster, name)
    images = cluster.images(name)
    for image in images:
        write_image(cluster.ceph, image, PATTERN, SIZE)
    added = cluster.run(snapshot_op("ADD", name, "before-upgrade"))
    assert added["status"] == "success", added
    (recorded,) = cluster.store.load().find_instance(name).snapshots
    assert [v.logical_id for v in recorded.volumes] == [
        model.ExtId(provider="rbd", name=f"{image}@snap-before-upgrade") for image in images]
    assert cluster.snapshots(name) == [["snap-before-upgrade"]] * 2
    for image in images:
        write_image(cluster.ceph, image, LATER, SIZE)

    rolled = cluster.run(snapshot_op("ROLLBACK", name, "before-upgrade"))
    assert rolled["status"] == "success", rolled
    assert [cluster.read(image) for image in images] == [PATTERN] * 2
    assert any("disk/1 rolled back to snapshot before-upgrade" in line
               for line in rolled["log"])
    # the content kept aside while it ran is gone; the snapshot stays
    assert cluster.snapshots(name) == [["snap-before-upgrade"]] * 2

    removed = cluster.run(snapshot_op("REMOVE", name, "before-upgrade"))
    assert removed["status"] == "success", removed
    assert cluster.snapshots(name) == [[], []]
    assert cluster.store.load().find_instance(name).snapshots == []


def snapshotted_then_written(cluster: Cluster, name: str) -> list[str]:
    """A stopped two-disk instance `name` whose images hold PATTERN in its snapshot s1 and
    LATER now; its images."""
    create(cluster, name)
    images = cluster.images(name)
    for image in images:
        write_image(cluster.ceph, image, PATTERN, SIZE)
    assert cluster.run(snapshot_op("ADD", name, "s1"))["status"] == "success"
    for image in images:
        write_image(cluster.ceph, image, LATER, SIZE)
    return images


def test_a_rollback_under_an_open_image_is_refused_and_put_back(cluster: Cluster) -> None:
    """disk/1 is open by a client (as a QEMU elsewhere would have it): disk/0, rolled back
    already, is put back; both keep what they had, and the snapshot kept aside is gone."""
    name = "rbd2.example.com"
    images = snapshotted_then_written(cluster, name)
    watcher = subprocess.Popen([*cluster.ceph.prefix(), "rbd", "watch", "-p",
                                cluster.ceph.pool, images[1]], env=cluster.ceph.admin_env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    try:
        assert watcher.stdout is not None and watcher.stdin is not None
        watcher.stdout.readline()  # the watch is registered
        refused = error_of(cluster.run(snapshot_op("ROLLBACK", name, "s1")), "OpExecError")
        watcher.stdin.write(b"\n")
        watcher.stdin.close()
        watcher.wait(60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert refused.startswith(f"rollback of {name} to s1 failed: disk/1: node "
                              "node1.example.com: blockdev_snapshot_rollback failed: rbd image "
                              f"{cluster.ceph.pool}/{images[1]} is open by ")
    assert "it can be rolled back only while no node uses it" in refused
    assert refused.endswith("the disks are as they were")
    assert [cluster.read(image) for image in images] == [LATER] * 2
    assert cluster.snapshots(name) == [["snap-s1"]] * 2

    # removing the instance removes its snapshots (rbd refuses to remove an image with any)
    assert cluster.run({"OP_ID": "OP_INSTANCE_REMOVE",
                        "instance_name": name})["status"] == "success"
    assert not set(images) & set(cluster.ceph.images())


def test_the_recovery_job_removes_the_snapshots_of_an_unrecorded_one(cluster: Cluster) -> None:
    from herder.masterd import lu

    name = "rbd3.example.com"
    create(cluster, name, disks=1)
    unit = lu.registry()["OP_INSTANCE_SNAPSHOT_ADD"]
    (recovery,) = unit.after_master_death(opcodes.parse(snapshot_op("ADD", name, "s1")))
    assert cluster.run(snapshot_op("ADD", name, "s1"))["status"] == "success"
    with cluster.store.update() as config:
        config.find_instance(name).snapshots.clear()
    assert cluster.run(recovery)["status"] == "success"
    assert cluster.snapshots(name) == [[]]


def test_the_recovery_job_of_a_rollback_puts_the_images_back(cluster: Cluster) -> None:
    """The master died in a rollback after disk/0 was rolled back (made here as the LU
    leaves it: each image's content kept as the snapshot `snap-_rollback` and recorded,
    disk/0 rolled back to s1): the recovery job puts both back and removes the copies."""
    from herder.masterd import lu

    name = "rbd4.example.com"
    images = snapshotted_then_written(cluster, name)
    for image in images:
        cluster.ceph.run(["rbd", "snap", "create", f"{cluster.ceph.pool}/{image}@snap-_rollback"],
                         what="rbd snap create")
    with cluster.store.update() as config:
        inst = config.find_instance(name)
        inst.rollback_aside = [model.SnapshotVolume(disk=disk.uuid, logical_id=model.ExtId(
            provider="rbd", name=f"{image}@snap-_rollback"))
            for disk, image in zip(inst.disks, images, strict=True)]
    cluster.ceph.run(["rbd", "snap", "rollback", "--no-progress",
                      f"{cluster.ceph.pool}/{images[0]}@snap-s1"], what="rbd snap rollback")
    assert cluster.read(images[0]) == PATTERN
    unit = lu.registry()["OP_INSTANCE_SNAPSHOT_ROLLBACK"]
    (recovery,) = unit.after_master_death(opcodes.parse(snapshot_op("ROLLBACK", name, "s1")))
    recovered = cluster.run(recovery)
    assert recovered["status"] == "success", recovered
    assert [cluster.read(image) for image in images] == [LATER] * 2
    assert cluster.snapshots(name) == [["snap-s1"]] * 2
    assert cluster.store.load().find_instance(name).rollback_aside == []


# --- an export of a running instance (issue 30 item 1) -----------------------------------------


def running_with_pattern(cluster: Cluster, name: str) -> list[str]:
    """A two-disk instance `name` (the herder-guest OS) holding PATTERN, admin up (libvirt's
    test driver runs no rbd domain: the export takes the path of a running instance by its
    admin state, as the LU decides by it); its images."""
    create(cluster, name, os_type=guest.OS_NAME)
    images = cluster.images(name)
    for image in images:
        write_image(cluster.ceph, image, PATTERN, SIZE)
    with cluster.store.update() as config:
        config.find_instance(name).admin_state = "up"
    return images


def export_running(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.run({"OP_ID": "OP_BACKUP_EXPORT", "instance_name": name,
                        "target_node": "node2.example.com", "shutdown": False})


def test_a_running_instance_exports_its_snapshots(cluster: Cluster) -> None:
    name = "rbdlive1.example.com"
    images = running_with_pattern(cluster, name)
    job = export_running(cluster, name)
    assert job["status"] == "success", job
    assert not any("shutting down" in line for line in job["log"]), job["log"]
    for index in range(2):
        assert any(f"snapshot {EXPORT_SNAPSHOT} of disk/{index} taken" in line
                   for line in job["log"]), job["log"]
    export = cluster.directory / "node2.example.com" / "root" / \
        exportconf.EXPORT_DIR.lstrip("/") / name
    for disk, image in zip(cluster.store.load().find_instance(name).disks, images,
                           strict=True):
        dumped = (export / disk.uuid).read_bytes()
        assert len(dumped) == SIZE * 2**20
        assert hashlib.sha256(dumped).digest() == \
            hashlib.sha256(cluster.ceph.read_image(image, SIZE * 2**20)).digest()
        assert dumped[OFFSET:OFFSET + len(PATTERN)] == PATTERN
    assert "[instance]" in (export / exportconf.CONF_FILE).read_text()
    assert cluster.snapshots(name) == [[], []]
    assert cluster.store.load().find_instance(name).admin_state == "up"


def test_a_failing_export_leaves_no_snapshot(cluster: Cluster) -> None:
    """The OS export script fails part-way through disk/0 (the snapshot being read by `rbd
    export` into it): one line, the partial export and both snapshots removed."""
    name = "rbdlive2.example.com"
    running_with_pattern(cluster, name)
    script = cluster.directory / "os" / guest.OS_NAME / "export"
    kept = script.read_text()
    script.write_text('#!/bin/sh\nhead -c 100000 "$EXPORT_DEVICE"\nexit 3\n')
    try:
        job = export_running(cluster, name)
    finally:
        script.write_text(kept)
    message = error_of(job, "OpExecError")
    assert "OS export script failed" in message and "the partial export was removed" in message
    assert any(f"snapshot {EXPORT_SNAPSHOT} of disk/1 taken" in line for line in job["log"])
    assert cluster.snapshots(name) == [[], []]
    assert not (cluster.directory / "node2.example.com" / "root" /
                exportconf.EXPORT_DIR.lstrip("/") / name).exists()


def test_the_recovery_job_of_an_export_removes_its_snapshots(cluster: Cluster) -> None:
    """The master died in an export of the running instance after snapshotting: the job the
    queue's recovery submits removes the snapshots."""
    from herder.masterd import lu

    name = "rbdlive3.example.com"
    images = running_with_pattern(cluster, name)
    for image in images:
        cluster.ceph.run(["rbd", "snap", "create",
                          f"{cluster.ceph.pool}/{image}@snap-{EXPORT_SNAPSHOT}"],
                         what="rbd snap create")
    unit = lu.registry()["OP_BACKUP_EXPORT"]
    (recovery,) = unit.after_master_death(opcodes.parse({
        "OP_ID": "OP_BACKUP_EXPORT", "instance_name": name,
        "target_node": "node2.example.com", "shutdown": False}))
    with cluster.store.update() as config:  # no domain to start again: it stays admin down
        config.find_instance(name).admin_state = "down"
    recovered = cluster.run(recovery)
    assert recovered["status"] == "success", recovered
    assert cluster.snapshots(name) == [[], []]
