"""Issue 30 item 6 on real disks: a real maintd (`Maintd`, the clock driven by the test) over
the job path in this process (the real job queue, processor and LUs) and two real node
daemons whose ext disks are the `sharedimg` provider's images on real loop devices. When the
schedule's time comes, maintd's export job writes the instance's disk into the target node's
export directory (the same bytes, Ganeti's config.ini beside them), the instance runs again
afterwards, and the run is recorded as a success. (The schedule's routes, commands and its
pause, failover and crash handling: tests/maintd/test_backup_schedules.py.)"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.core import backupsched, exportconf, model
from herder.core.backupsched import BackupSchedule
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance, Node
from herder.maintd.state import FileState
from herder.masterd.jobs.queue import JobQueue
from herder.sim import guest
from tests.conftest import build_config
from tests.system.inprocess_master import InProcessMaster, master_over_nodes, sharedimg_hosts

ADDRESSES = {"node1.example.com": "127.0.0.193", "node2.example.com": "127.0.0.194"}
NAME = "web1.example.com"
PATTERN = os.urandom(1 << 20)


@dataclass
class QueueCluster:
    """maintd's view of the cluster (RapiCluster's calls) answered by the in-process master."""

    master: InProcessMaster

    @property
    def queue(self) -> JobQueue:
        return self.master.queue

    def nodes(self) -> list[Node]:
        config = self.master.store.load()
        return [Node(name=n.name, uuid=n.uuid, ip=n.primary_ip, offline=n.offline,
                     master=n.uuid == config.cluster.master_node)
                for n in config.nodes.values()]

    def instances(self) -> list[Instance]:
        config = self.master.store.load()
        return [Instance(name=i.name, pnode=config.nodes[i.primary_node].name, uuid=i.uuid,
                         disk_template=i.disk_template, tags=tuple(i.tags),
                         admin_state=i.admin_state) for i in config.instances.values()]

    def submit(self, ops: list[dict[str, Any]]) -> int:
        return self.queue.submit(ops)

    def job_status(self, job_id: int) -> str | None:
        return self.queue.status_of(job_id)

    def maintd_jobs(self) -> dict[int, set[str]]:
        return {}

    def policy_tags(self) -> tuple[list[str], dict[str, list[str]]]:
        return [], {}

    def maintenance(self) -> dict[str, Any]:
        return dict(model.to_builtins(self.master.store.load().maintenance))


def loops_of(image: Path) -> list[str]:
    out = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)],
                         capture_output=True, text=True, check=False).stdout
    return out.split()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[QueueCluster, Path]]:
    assert os.geteuid() == 0 and shutil.which("losetup"), \
        "ext disks on loop devices need root and losetup"
    directory = tmp_path_factory.mktemp("bkpsched-exports")
    hosts, _ = sharedimg_hosts(directory, ADDRESSES)
    config = build_config(nodes=2, drbd_instances=0)
    config.cluster.enabled_disk_templates = ["ext", "diskless"]
    for node in config.nodes.values():
        node.primary_ip = ADDRESSES[node.name]
    try:
        os_dir = guest.install_os_definition(directory / "os")
        with master_over_nodes(directory, config, ADDRESSES, hosts=hosts,
                               os_path=(os_dir.parent,)) as master:
            yield QueueCluster(master), directory
    finally:
        for image in (directory / "images").glob("*.img"):
            for loop in loops_of(image):
                subprocess.run(["losetup", "-d", loop], check=False)


def write_pattern(queue_cluster: QueueCluster, directory: Path, pattern: bytes) -> None:
    """`pattern` at the start of NAME's disk (its loop device), synced."""
    inst = queue_cluster.master.store.load().find_instance(NAME)
    (loop,) = loops_of(image_of(directory, inst))
    with open(loop, "r+b") as device:
        device.write(pattern)
        device.flush()
        os.fsync(device.fileno())


def instance_with_pattern(queue_cluster: QueueCluster, directory: Path) -> model.Instance:
    """NAME, running on node1 with PATTERN at the start of its disk (made once)."""
    queue = queue_cluster.queue
    if not any(i.name == NAME for i in queue_cluster.master.store.load().instances.values()):
        created = queue.wait(queue.submit([{
            "OP_ID": "OP_INSTANCE_CREATE", "instance_name": NAME, "disk_template": "ext",
            "disks": [{"size": 4, "provider": "sharedimg"}], "nics": [{}],
            "pnode": "node1.example.com", "name_check": False, "ip_check": False,
            "os_type": guest.OS_NAME, "no_install": True, "start": True,
            "ignore_ipolicy": True}]), 300)
        assert str(created.status) == "success", created.ops[0].result
    write_pattern(queue_cluster, directory, PATTERN)
    return queue_cluster.master.store.load().find_instance(NAME)


def image_of(directory: Path, inst: model.Instance) -> Path:
    logical_id = inst.disks[0].logical_id
    assert isinstance(logical_id, model.ExtId)
    return directory / "images" / f"{logical_id.name}.img"


def exports_of(directory: Path, node: str = "node2.example.com") -> Path:
    return directory / node / "root" / exportconf.EXPORT_DIR.lstrip("/")


def as_it_was(queue_cluster: QueueCluster, directory: Path) -> None:
    """NAME up in the config, its disk attached (started again) with PATTERN on it."""
    inst = queue_cluster.master.store.load().find_instance(NAME)
    assert inst.admin_state == "up"
    (loop,) = loops_of(image_of(directory, inst))
    with open(loop, "rb") as device:
        assert device.read(len(PATTERN)) == PATTERN


def test_a_due_schedule_exports_the_disk_and_the_instance_runs_again(
        cluster: tuple[QueueCluster, Path], tmp_path: Path) -> None:
    queue_cluster, directory = cluster
    queue = queue_cluster.queue
    inst = instance_with_pattern(queue_cluster, directory)
    made = 1_000_000_000.0
    with queue_cluster.master.store.update() as config:
        config.maintenance.backup_schedules = [BackupSchedule(
            name="nightly", when="daily 02:00", target_node="node2.example.com",
            instance=NAME, ctime=made)]
    due = backupsched.next_due("daily 02:00", made)
    daemon = Maintd(queue_cluster, FileState(tmp_path / "state.json"), [], watcher=False,
                    node_recovery=False, clock=lambda: due + 1)
    asyncio.run(daemon.tick())
    (run,) = daemon.state.backups
    job = queue.wait(run.jobs[0], 600)
    assert str(job.status) == "success", job.ops[0].result
    asyncio.run(daemon.tick())
    assert (run.status, run.error, run.end) == ("success", "", due + 1)
    export = exports_of(directory) / NAME
    dump = export / inst.disks[0].uuid
    with open(dump, "rb") as exported:
        assert hashlib.sha256(exported.read(len(PATTERN))).digest() == \
            hashlib.sha256(PATTERN).digest()
    assert "[instance]" in (export / exportconf.CONF_FILE).read_text()
    as_it_was(queue_cluster, directory)
    assert any("export of" in str(entry) for entry in job.ops[0].log)


# --- faults (issue 30 item 7): one line, the partial export removed, the instance as it was ---


def export_job(queue_cluster: QueueCluster) -> tuple[str, list[str]]:
    """An export of NAME to node2 (as maintd submits it): its one-line error, its log."""
    queue = queue_cluster.queue
    job = queue.wait(queue.submit([{"OP_ID": "OP_BACKUP_EXPORT", "instance_name": NAME,
                                    "target_node": "node2.example.com"}]), 600)
    assert str(job.status) == "error", job.ops[0].result
    kind, args = job.ops[0].result
    message = str(args[0])
    assert kind == "OpExecError" and "\n" not in message
    return message, [str(entry) for entry in job.ops[0].log]


def test_an_os_export_script_that_fails_leaves_no_partial_export(
        cluster: tuple[QueueCluster, Path]) -> None:
    queue_cluster, directory = cluster
    instance_with_pattern(queue_cluster, directory)
    script = directory / "os" / guest.OS_NAME / "export"
    kept = script.read_text()
    script.write_text('#!/bin/sh\nhead -c 100000 "$EXPORT_DEVICE"\nexit 3\n')
    try:
        message, _ = export_job(queue_cluster)
    finally:
        script.write_text(kept)
    assert "OS export script failed" in message and "exit code 3" in message
    assert "the partial export was removed" in message
    assert not (exports_of(directory) / f"{NAME}.new").exists()
    as_it_was(queue_cluster, directory)


def test_a_full_target_filesystem_fails_in_one_line(cluster: tuple[QueueCluster, Path]) -> None:
    """node2's export directory on a 1 MiB filesystem image (a real ext4 on a loop device):
    the 4 MiB disk does not fit."""
    queue_cluster, directory = cluster
    instance_with_pattern(queue_cluster, directory)
    target = exports_of(directory)
    aside = target.with_name("export-before")
    if target.exists():
        target.rename(aside)
    target.mkdir(parents=True)
    image = directory / "small-fs.img"
    with open(image, "wb") as small:
        small.truncate(1 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(target)], check=True)
    try:
        message, _ = export_job(queue_cluster)
        assert "No space left on device" in message or "space" in message.lower(), message
        assert "the partial export was removed" in message
        assert sorted(p.name for p in target.iterdir() if p.name != "lost+found") == []
    finally:
        subprocess.run(["umount", str(target)], check=False)
        target.rmdir()
        if aside.exists():
            aside.rename(target)
    as_it_was(queue_cluster, directory)


def test_a_corrupt_config_ini_is_refused_on_import(cluster: tuple[QueueCluster, Path]) -> None:
    queue_cluster, directory = cluster
    broken = exports_of(directory) / "broken.example.com"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / exportconf.CONF_FILE).write_text("[export\nversion = 0\n[instance\n")
    before = queue_cluster.master.store.load()
    queue = queue_cluster.queue
    job = queue.wait(queue.submit([{
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": "broken.example.com",
        "mode": "import", "src_node": "node2.example.com", "src_path": "broken.example.com",
        "disk_template": "ext", "disks": [{"size": 4, "provider": "sharedimg"}],
        "nics": [{}], "pnode": "node1.example.com", "name_check": False, "ip_check": False,
        "ignore_ipolicy": True}]), 300)
    assert str(job.status) == "error", job.ops[0].result
    message = str(job.ops[0].result[1][0])
    assert "config.ini" in message and "\n" not in message, message
    after = queue_cluster.master.store.load()
    assert sorted(i.name for i in after.instances.values()) == \
        sorted(i.name for i in before.instances.values())


def test_the_recovery_job_of_an_export_the_master_died_in_cleans_up(
        cluster: tuple[QueueCluster, Path]) -> None:
    """What a master that died mid-export leaves (made here by hand: a partial export on the
    target, the instance stopped on its node though it should run): the job the queue's
    recovery submits for the export removes the partial export and starts the instance."""
    from herder.masterd import lu
    from herder.masterd.jobs import opcodes

    queue_cluster, directory = cluster
    inst = instance_with_pattern(queue_cluster, directory)
    export = {"OP_ID": "OP_BACKUP_EXPORT", "instance_name": NAME,
              "target_node": "node2.example.com"}
    unit = lu.registry()["OP_BACKUP_EXPORT"]
    (recovery,) = unit.after_master_death(opcodes.parse(export))
    assert recovery == {**export, "cleanup": True}
    assert unit.after_master_death(opcodes.parse(recovery)) == []
    partial = exports_of(directory) / f"{NAME}.new"
    partial.mkdir(parents=True, exist_ok=True)
    (partial / inst.disks[0].uuid).write_bytes(PATTERN[:4096])
    queue = queue_cluster.queue
    stopped = queue.wait(queue.submit([{"OP_ID": "OP_INSTANCE_SHUTDOWN",
                                        "instance_name": NAME}]), 300)
    assert str(stopped.status) == "success", stopped.ops[0].result
    with queue_cluster.master.store.update() as config:
        config.find_instance(NAME).admin_state = "up"  # as the export left it: up, stopped
    job = queue.wait(queue.submit([recovery]), 300)
    assert str(job.status) == "success", job.ops[0].result
    assert not partial.exists()
    assert any(f"removed the partial export {NAME}.new" in str(e) for e in job.ops[0].log)
    assert any(f"starting instance {NAME}" in str(e) for e in job.ops[0].log)
    as_it_was(queue_cluster, directory)
    again = queue.wait(queue.submit([recovery]), 300)  # nothing left: nothing to do
    assert str(again.status) == "success" and not any(
        "removed the partial export" in str(e) or "starting" in str(e)
        for e in again.ops[0].log)



def test_a_schedule_keeping_two_exports_keeps_the_newest_two_and_each_imports(
        cluster: tuple[QueueCluster, Path], tmp_path: Path) -> None:
    """keep 2, three runs (a new pattern on the disk before each): the newest export under
    the instance's name, the one before under its dated name, the first removed; the dated
    one imports (`src_path` its name) into a new instance with its pattern, and
    `OP_BACKUP_REMOVE` of its name (found by the nodes' export_list) removes it alone."""
    queue_cluster, directory = cluster
    queue = queue_cluster.queue
    instance_with_pattern(queue_cluster, directory)
    shutil.rmtree(exports_of(directory), ignore_errors=True)
    made = 1_000_000_000.0
    with queue_cluster.master.store.update() as config:
        config.maintenance.backup_schedules = [BackupSchedule(
            name="kept", when="daily 03:00", target_node="node2.example.com",
            instance=NAME, keep=2, ctime=made)]
    now = [made]
    daemon = Maintd(queue_cluster, FileState(tmp_path / "state.json"), [], watcher=False,
                    node_recovery=False, clock=lambda: now[0])
    patterns = [os.urandom(1 << 16) for _ in range(3)]
    try:
        for day, pattern in enumerate(patterns):
            write_pattern(queue_cluster, directory, pattern)
            now[0] = backupsched.next_due("daily 03:00", made) + day * backupsched.DAY + 1
            asyncio.run(daemon.tick())
            run = daemon.state.backups[-1]
            assert run.keep == 2
            job = queue.wait(run.jobs[0], 600)
            assert str(job.status) == "success", job.ops[0].result
            asyncio.run(daemon.tick())
            assert run.status == "success"
        assert any("removed the older export" in str(e) for e in job.ops[0].log)
    finally:
        with queue_cluster.master.store.update() as config:
            config.maintenance.backup_schedules = []
    names = sorted(p.name for p in exports_of(directory).iterdir())
    assert len(names) == 2 and names[0] == NAME and names[1].startswith(NAME + "@"), names
    dated = names[1]
    inst = queue_cluster.master.store.load().find_instance(NAME)
    for name, pattern in ((NAME, patterns[2]), (dated, patterns[1])):
        with open(exports_of(directory) / name / inst.disks[0].uuid, "rb") as dump:
            assert dump.read(len(pattern)) == pattern, name
    restored = "restored.example.com"
    created = queue.wait(queue.submit([{
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": restored, "mode": "import",
        "src_node": "node2.example.com", "src_path": dated, "disk_template": "ext",
        "disks": [{"size": 4, "provider": "sharedimg"}], "nics": [{}],
        "pnode": "node1.example.com", "name_check": False, "ip_check": False,
        "start": False, "ignore_ipolicy": True}]), 600)
    assert str(created.status) == "success", created.ops[0].result
    try:
        new = queue_cluster.master.store.load().find_instance(restored)
        (loop,) = loops_of(image_of(directory, new))
        with open(loop, "rb") as device:
            assert device.read(len(patterns[1])) == patterns[1]
    finally:
        removed = queue.wait(queue.submit([{"OP_ID": "OP_INSTANCE_REMOVE",
                                            "instance_name": restored}]), 300)
        assert str(removed.status) == "success", removed.ops[0].result
    gone = queue.wait(queue.submit([{"OP_ID": "OP_BACKUP_REMOVE", "instance_name": dated}]),
                      300)
    assert str(gone.status) == "success", gone.ops[0].result
    assert sorted(p.name for p in exports_of(directory).iterdir()) == [NAME]
    write_pattern(queue_cluster, directory, PATTERN[:1 << 16])
    as_it_was(queue_cluster, directory)
