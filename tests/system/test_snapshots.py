"""Issue 30 item 4: snapshots of an instance, through the job path (the real job queue,
processor and LUs in this process) over two real node daemons whose ext disks are the
`sharedimg` provider's images on real loop devices (src/herder/sim/extstorage/sharedimg).

A pattern written to both disks of a running instance is snapshotted, overwritten, the
rollback refused while it runs, rolled back once stopped: the pattern is back; the snapshot
listed from the config and removed with its volumes. A failure part-way leaves what it found
(the snapshot of the first disk removed again; a rollback half done put back), other
templates and bad names are refused in one line, and removing the instance removes its
snapshots. (The routes and their users: tests/system/test_snapshot_rapi.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.core import model
from herder.core.store import FileStore
from herder.masterd.jobs import opcodes
from herder.masterd.jobs.queue import JobQueue
from tests.conftest import build_config
from tests.system.inprocess_master import EXTSTORAGE, master_over_nodes, sharedimg_hosts

ADDRESSES = {"node1.example.com": "127.0.0.191", "node2.example.com": "127.0.0.192"}
PATTERN = bytes(range(256)) * 16  # 4 KiB
LATER = b"\xa5" * len(PATTERN)
OFFSET = 1024 * 1024 + 512


@dataclass
class Cluster:
    store: FileStore
    queue: JobQueue
    images: Path  # the sharedimg provider's directory, shared by both nodes

    def run(self, op: dict[str, Any]) -> dict[str, Any]:
        """The job of `op`, finished: its status, result or error, and its log."""
        job_id = self.queue.submit([op])
        job = self.queue.wait(job_id, 300)
        return {"status": str(job.status), "result": job.ops[0].result,
                "log": [str(entry) for entry in job.ops[0].log]}

    def instance(self, name: str) -> model.Instance:
        return self.store.load().find_instance(name)

    def image(self, name: str, index: int) -> Path:
        logical_id = self.instance(name).disks[index].logical_id
        assert isinstance(logical_id, model.ExtId)
        return self.images / f"{logical_id.name}.img"

    def snapshot_files(self, name: str | None = None) -> list[str]:
        """The snapshot volumes' images (of the instance `name`'s disks only)."""
        mine = None if name is None else [self.image(name, i).stem
                                          for i in range(len(self.instance(name).disks))]
        return sorted(p.name for p in self.images.glob("*.snap-*")
                      if mine is None or any(p.name.startswith(m + ".") for m in mine))


def loops_of(image: Path) -> list[str]:
    out = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                         capture_output=True, text=True, check=False).stdout
    return out.split()


def write_at(path: Path | str, data: bytes) -> None:
    with open(path, "r+b") as device:
        device.seek(OFFSET)
        device.write(data)
        device.flush()
        os.fsync(device.fileno())


def read_at(path: Path | str) -> bytes:
    with open(path, "rb") as device:
        device.seek(OFFSET)
        return device.read(len(PATTERN))


def write_through_loop(cluster: Cluster, name: str, index: int, data: bytes) -> None:
    """`data` written to the disk through the loop device the running instance has."""
    (loop,) = loops_of(cluster.image(name, index))
    write_at(loop, data)


def error_of(job: dict[str, Any], kind: str = "OpPrereqError") -> str:
    assert job["status"] == "error", job
    got, args = job["result"]
    assert got == kind, job
    message = str(args[0])
    assert "\n" not in message
    return message


def provider_without(directory: Path, name: str, *scripts: str) -> None:
    """A copy of sharedimg called `name` lacking `scripts`."""
    shutil.copytree(EXTSTORAGE / "sharedimg", directory / name)
    for script in scripts:
        (directory / name / script).unlink()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    assert os.geteuid() == 0 and shutil.which("losetup"), \
        "ext disks on loop devices need root and losetup"
    directory = tmp_path_factory.mktemp("snapshots")
    hosts, providers = sharedimg_hosts(directory, ADDRESSES)
    images = directory / "images"
    provider_without(providers, "nosnap", "snapshot", "rollback")
    provider_without(providers, "noroll", "rollback")
    config = build_config(nodes=2, drbd_instances=0, plain_instances=1)
    config.cluster.enabled_disk_templates = ["ext", "plain", "diskless"]
    for node in config.nodes.values():
        node.primary_ip = ADDRESSES[node.name]
    (plain,) = config.instances.values()
    plain.name, plain.admin_state = "plain1.example.com", "down"
    try:
        with master_over_nodes(directory, config, ADDRESSES, hosts=hosts) as master:
            yield Cluster(master.store, master.queue, images)
    finally:
        for image in images.glob("*.img"):
            for loop in loops_of(image):
                subprocess.run(["losetup", "-d", loop], check=False)


def create(cluster: Cluster, name: str, *providers: str, start: bool = True) -> None:
    job = cluster.run({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "disk_template": "ext",
        "disks": [{"size": 4, "provider": provider} for provider in providers],
        "nics": [{}], "pnode": "node1.example.com", "name_check": False, "ip_check": False,
        "no_install": True, "start": start, "ignore_ipolicy": True})
    assert job["status"] == "success", job


def snapshot_op(verb: str, name: str, snapshot: str) -> dict[str, Any]:
    return {"OP_ID": f"OP_INSTANCE_SNAPSHOT_{verb}", "instance_name": name,
            "snapshot_name": snapshot}


def test_snapshot_write_more_rollback_and_the_data_is_back(cluster: Cluster) -> None:
    name = "web1.example.com"
    create(cluster, name, "sharedimg", "sharedimg")
    for index in (0, 1):
        write_through_loop(cluster, name, index, PATTERN)
    added = cluster.run(snapshot_op("ADD", name, "before-upgrade"))
    assert added["status"] == "success" and added["result"] == "before-upgrade", added
    (recorded,) = cluster.instance(name).snapshots
    inst = cluster.instance(name)
    assert recorded.name == "before-upgrade"
    assert [v.disk for v in recorded.volumes] == [d.uuid for d in inst.disks]
    assert cluster.snapshot_files() == sorted(
        f"{v.logical_id.name}.img" for v in recorded.volumes
        if isinstance(v.logical_id, model.ExtId))
    for index in (0, 1):  # written after the snapshot, still running
        write_through_loop(cluster, name, index, LATER)
    running = error_of(cluster.run(snapshot_op("ROLLBACK", name, "before-upgrade")))
    assert running == (f"instance {name} is running: stop it before rolling back to snapshot "
                       "before-upgrade")
    assert all(read_at(cluster.image(name, i)) == LATER for i in (0, 1))

    assert cluster.run({"OP_ID": "OP_INSTANCE_SHUTDOWN",
                        "instance_name": name})["status"] == "success"
    rolled = cluster.run(snapshot_op("ROLLBACK", name, "before-upgrade"))
    assert rolled["status"] == "success", rolled
    assert all(read_at(cluster.image(name, i)) == PATTERN for i in (0, 1))
    assert any("disk/1 rolled back to snapshot before-upgrade" in line
               for line in rolled["log"])
    # the content before the rollback was kept aside only while it ran; the snapshot stays
    assert cluster.snapshot_files() == sorted(
        f"{v.logical_id.name}.img" for v in recorded.volumes
        if isinstance(v.logical_id, model.ExtId))
    assert all(loops_of(cluster.image(name, i)) == [] for i in (0, 1))

    started = cluster.run({"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": name})
    assert started["status"] == "success", started
    (loop,) = loops_of(cluster.image(name, 1))
    assert read_at(loop) == PATTERN  # what the started instance's device reads

    twice = error_of(cluster.run(snapshot_op("ADD", name, "before-upgrade")))
    assert twice == f"instance {name} already has a snapshot before-upgrade"
    removed = cluster.run(snapshot_op("REMOVE", name, "before-upgrade"))
    assert removed["status"] == "success", removed
    assert cluster.instance(name).snapshots == [] and cluster.snapshot_files() == []
    gone = error_of(cluster.run(snapshot_op("REMOVE", name, "before-upgrade")),
                    "OpPrereqError")
    assert gone == f"instance {name} has no snapshot before-upgrade"


def test_a_stopped_instance_is_snapshotted_with_its_disks_released(cluster: Cluster) -> None:
    """Taking a snapshot attaches a volume on the node: the disks of a stopped instance are
    released again, or its rollback would be refused (attached)."""
    name = "stopped1.example.com"
    create(cluster, name, "sharedimg", start=False)
    write_at(cluster.image(name, 0), PATTERN)
    assert cluster.run(snapshot_op("ADD", name, "s1"))["status"] == "success"
    assert loops_of(cluster.image(name, 0)) == []
    write_at(cluster.image(name, 0), LATER)
    assert cluster.run(snapshot_op("ROLLBACK", name, "s1"))["status"] == "success"
    assert read_at(cluster.image(name, 0)) == PATTERN
    # a disk is not removed from under a snapshot; removing the instance removes them
    kept = error_of(cluster.run({"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": name,
                                 "disks": [["remove", -1, {}]]}))
    assert kept == f"instance {name} has snapshots (s1): remove them before removing a disk"
    assert cluster.snapshot_files() != []
    assert cluster.run({"OP_ID": "OP_INSTANCE_REMOVE",
                        "instance_name": name})["status"] == "success"
    assert cluster.snapshot_files() == []
    assert not any(p.name.startswith(str(name)) for p in cluster.images.iterdir())


def test_a_failure_part_way_leaves_what_it_found(cluster: Cluster) -> None:
    """disk/1's provider cannot snapshot: disk/0's snapshot is removed again, nothing is
    recorded. With a provider that snapshots but cannot roll back, disk/0's rollback is put
    back as it was before the job."""
    name = "mixed1.example.com"
    create(cluster, name, "sharedimg", "nosnap", start=False)
    before = cluster.store.load().serial_no
    failed = error_of(cluster.run(snapshot_op("ADD", name, "s1")), "OpExecError")
    assert failed.startswith(f"snapshot s1 of {name} failed: ")
    assert "nosnap cannot take snapshots" in failed
    assert failed.endswith("the snapshots taken were removed")
    assert cluster.snapshot_files() == [] and cluster.instance(name).snapshots == []
    assert cluster.store.load().serial_no == before
    assert loops_of(cluster.image(name, 0)) == []

    name = "mixed2.example.com"
    create(cluster, name, "sharedimg", "noroll", start=False)
    for index in (0, 1):
        write_at(cluster.image(name, index), PATTERN)
    assert cluster.run(snapshot_op("ADD", name, "s1"))["status"] == "success"
    kept = cluster.snapshot_files()
    for index in (0, 1):
        write_at(cluster.image(name, index), LATER)
    refused = error_of(cluster.run(snapshot_op("ROLLBACK", name, "s1")), "OpExecError")
    assert refused.startswith(f"rollback of {name} to s1 failed: disk/1: ")
    assert "noroll cannot roll back" in refused
    assert refused.endswith("the disks are as they were")
    assert all(read_at(cluster.image(name, i)) == LATER for i in (0, 1))
    assert cluster.snapshot_files() == kept  # the content kept aside is gone again
    for index in (0, 1):
        assert loops_of(cluster.image(name, index)) == []


def test_other_templates_and_bad_names_are_refused_in_one_line(cluster: Cluster) -> None:
    before = cluster.store.load().serial_no
    plain = error_of(cluster.run(snapshot_op("ADD", "plain1.example.com", "s1")))
    assert plain == ("instance plain1.example.com: plain disks cannot be snapshotted (rolling "
                     "an LVM volume back needs device-mapper, which herder's nodes do not "
                     "drive; use rbd or ext disks)")
    for verb in ("ROLLBACK", "REMOVE"):
        missing = error_of(cluster.run(snapshot_op(verb, "plain1.example.com", "s1")))
        assert "plain disks cannot be snapshotted" in missing or "has no snapshot s1" in missing
    for bad in ("", "-rf", ".hidden", "a/b", "a b", "x" * 65, "snap\n1"):
        with pytest.raises(opcodes.OpcodeError) as err:
            cluster.queue.submit([snapshot_op("ADD", "plain1.example.com", bad)])
        assert "invalid snapshot name" in str(err.value) and "\n" not in str(err.value)
    assert cluster.store.load().serial_no == before


def test_the_recovery_job_removes_the_volumes_of_an_unrecorded_snapshot(
        cluster: Cluster) -> None:
    """The master died after the volumes were taken, before the snapshot was recorded (made
    here by dropping the record): the job the queue's recovery submits for it removes them;
    for a recorded snapshot it changes nothing."""
    from herder.masterd import lu

    name = "died1.example.com"
    create(cluster, name, "sharedimg", "sharedimg", start=False)
    unit = lu.registry()["OP_INSTANCE_SNAPSHOT_ADD"]
    (recovery,) = unit.after_master_death(opcodes.parse(snapshot_op("ADD", name, "s1")))
    assert recovery == {**snapshot_op("ADD", name, "s1"), "cleanup": True}
    assert cluster.run(snapshot_op("ADD", name, "s1"))["status"] == "success"
    taken = cluster.snapshot_files(name)
    assert len(taken) == 2
    recorded = cluster.run(recovery)
    assert recorded["status"] == "success" and cluster.snapshot_files(name) == taken
    assert any("was recorded: nothing to clean up" in line for line in recorded["log"])
    with cluster.store.update() as config:
        config.find_instance(name).snapshots.clear()
    assert cluster.run(recovery)["status"] == "success"
    assert cluster.snapshot_files(name) == []
    assert all(loops_of(cluster.image(name, i)) == [] for i in (0, 1))
    assert cluster.run(recovery)["status"] == "success"  # nothing left: nothing to do


def test_the_recovery_job_of_a_rollback_puts_the_disks_back(cluster: Cluster) -> None:
    """The master died in a rollback of two disks, after disk/0 was rolled back (made here as
    the provider and the LU leave it: the disks' content copied aside as `.snap-_rollback`
    volumes and recorded, disk/0's image holding the snapshot's): the recovery job puts both
    back as they were before the job and removes the copies; when the master died while the
    copies were being taken (one of two, unrecorded), the copy is removed and the disks are
    untouched."""
    from herder.masterd import lu

    name = "died2.example.com"
    create(cluster, name, "sharedimg", "sharedimg", start=False)
    for index in (0, 1):
        write_at(cluster.image(name, index), PATTERN)
    assert cluster.run(snapshot_op("ADD", name, "s1"))["status"] == "success"
    for index in (0, 1):
        write_at(cluster.image(name, index), LATER)
    unit = lu.registry()["OP_INSTANCE_SNAPSHOT_ROLLBACK"]
    (recovery,) = unit.after_master_death(opcodes.parse(snapshot_op("ROLLBACK", name, "s1")))
    assert recovery == {**snapshot_op("ROLLBACK", name, "s1"), "cleanup": True}

    def aside(index: int) -> Path:
        image = cluster.image(name, index)
        return image.with_name(f"{image.stem}.snap-_rollback.img")

    for index in (0, 1):
        shutil.copyfile(cluster.image(name, index), aside(index))
    with cluster.store.update() as config:
        inst = config.find_instance(name)
        inst.rollback_aside = [model.SnapshotVolume(disk=disk.uuid, logical_id=model.ExtId(
            provider="sharedimg", name=aside(i).stem)) for i, disk in enumerate(inst.disks)]
    image0 = cluster.image(name, 0)
    shutil.copyfile(image0.with_name(f"{image0.stem}.snap-s1.img"), image0)
    refused = error_of(cluster.run(snapshot_op("ROLLBACK", name, "s1")))
    assert refused == (f"instance {name}: a rollback cut short kept the disks' earlier content "
                       "aside; run the rollback with cleanup first (it puts the disks back)")
    assert read_at(image0) == PATTERN  # disk/0 rolled back, disk/1 not yet
    recovered = cluster.run(recovery)
    assert recovered["status"] == "success", recovered
    assert any(f"the disks of {name} are back as they were before the rollback" in line
               for line in recovered["log"])
    assert all(read_at(cluster.image(name, i)) == LATER for i in (0, 1))
    assert not any(aside(i).exists() for i in (0, 1))
    assert cluster.instance(name).rollback_aside == []
    assert len(cluster.snapshot_files(name)) == 2  # s1's volumes stay
    assert all(loops_of(cluster.image(name, i)) == [] for i in (0, 1))

    shutil.copyfile(cluster.image(name, 0), aside(0))  # died while taking the copies
    write_at(aside(0), PATTERN)
    recovered = cluster.run(recovery)
    assert recovered["status"] == "success", recovered
    assert any("no rollback of" in line for line in recovered["log"])
    assert all(read_at(cluster.image(name, i)) == LATER for i in (0, 1))
    assert not aside(0).exists()
    # a rollback run after all this works and leaves no copy aside
    assert cluster.run(snapshot_op("ROLLBACK", name, "s1"))["status"] == "success"
    assert all(read_at(cluster.image(name, i)) == PATTERN for i in (0, 1))
    assert not any(aside(i).exists() for i in (0, 1))
    assert cluster.instance(name).rollback_aside == []
