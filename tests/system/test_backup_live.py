"""Issue 30 item 1, an export of a running instance (`shutdown` false, Ganeti's
`gnt-backup export --noshutdown`), on real disks: the job path in this process (the real job
queue, processor and LUs) over two real node daemons whose ext disks are the `sharedimg`
provider's images on real loop devices. The running instance's disk is snapshotted
(`_export`), the export read from the snapshot through the OS `export` script, the snapshot
removed; the instance never stops. A failing export script leaves no snapshot, the queue's
recovery job removes one a dead master left, and a template that cannot snapshot is refused in
one line. (rbd on a real Ceph: tests/system/test_snapshots_rbd.py.)"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.core import exportconf, model
from herder.masterd.lu.backup import EXPORT_SNAPSHOT
from herder.sim import guest
from tests.conftest import build_config
from tests.system.inprocess_master import InProcessMaster, loops_of, sharedimg_master

ADDRESSES = {"node1.example.com": "127.0.0.195", "node2.example.com": "127.0.0.196"}
NAME = "live1.example.com"
PLAIN = "plain1.example.com"
PATTERN = os.urandom(1 << 20)


@dataclass
class Cluster:
    master: InProcessMaster
    directory: Path

    def run(self, op: dict[str, Any]) -> dict[str, Any]:
        job = self.master.queue.wait(self.master.queue.submit([op]), 600)
        return {"status": str(job.status), "result": job.ops[0].result,
                "log": [str(entry) for entry in job.ops[0].log]}

    def instance(self, name: str = NAME) -> model.Instance:
        return self.master.store.load().find_instance(name)

    def image(self, name: str = NAME) -> Path:
        logical_id = self.instance(name).disks[0].logical_id
        assert isinstance(logical_id, model.ExtId)
        return self.directory / "images" / f"{logical_id.name}.img"

    def snapshot_images(self) -> list[str]:
        return sorted(p.name for p in (self.directory / "images").glob("*.snap-*"))

    def export_dir(self, name: str = NAME) -> Path:
        return self.directory / "node2.example.com" / "root" / \
            exportconf.EXPORT_DIR.lstrip("/") / name


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("backup-live")
    config = build_config(nodes=2, drbd_instances=0, plain_instances=1)
    (plain,) = config.instances.values()  # in the config only: refused before any node call
    plain.name, plain.admin_state = PLAIN, "up"
    config.cluster.enabled_disk_templates = ["ext", "plain", "diskless"]
    with sharedimg_master(directory, config, ADDRESSES) as master:
        made = Cluster(master, directory)
        created = made.run({
            "OP_ID": "OP_INSTANCE_CREATE", "instance_name": NAME, "disk_template": "ext",
            "disks": [{"size": 4, "provider": "sharedimg"}], "nics": [{}],
            "pnode": "node1.example.com", "name_check": False, "ip_check": False,
            "os_type": guest.OS_NAME, "no_install": True, "start": True,
            "ignore_ipolicy": True})
        assert created["status"] == "success", created
        (loop,) = loops_of(made.image())
        with open(loop, "r+b") as device:
            device.write(PATTERN)
            device.flush()
            os.fsync(device.fileno())
        yield made


def export_op(name: str = NAME, **extra: Any) -> dict[str, Any]:
    return {"OP_ID": "OP_BACKUP_EXPORT", "instance_name": name,
            "target_node": "node2.example.com", "shutdown": False, **extra}


def still_running(cluster: Cluster) -> None:
    """The instance up, its disk's loop device still attached with PATTERN on it."""
    assert cluster.instance().admin_state == "up"
    (loop,) = loops_of(cluster.image())
    with open(loop, "rb") as device:
        assert device.read(len(PATTERN)) == PATTERN


def test_a_running_instance_exports_from_a_snapshot_and_keeps_running(
        cluster: Cluster) -> None:
    job = cluster.run(export_op())
    assert job["status"] == "success", job
    assert not any("shutting down" in line or "starting instance" in line
                   for line in job["log"]), job["log"]
    assert any(f"snapshot {EXPORT_SNAPSHOT} of disk/0 taken" in line for line in job["log"])
    dump = cluster.export_dir() / cluster.instance().disks[0].uuid
    with open(dump, "rb") as exported:
        assert hashlib.sha256(exported.read(len(PATTERN))).digest() == \
            hashlib.sha256(PATTERN).digest()
    assert "[instance]" in (cluster.export_dir() / exportconf.CONF_FILE).read_text()
    assert cluster.snapshot_images() == []
    still_running(cluster)


def test_a_failing_export_script_leaves_no_snapshot(cluster: Cluster) -> None:
    script = cluster.directory / "os" / guest.OS_NAME / "export"
    kept = script.read_text()
    script.write_text('#!/bin/sh\nhead -c 100000 "$EXPORT_DEVICE"\nexit 3\n')
    try:
        job = cluster.run(export_op())
    finally:
        script.write_text(kept)
    assert job["status"] == "error", job
    kind, (message, *_) = job["result"]
    assert kind == "OpExecError" and "\n" not in message
    assert "OS export script failed" in message and "the partial export was removed" in message
    assert any(f"snapshot {EXPORT_SNAPSHOT} of disk/0 taken" in line for line in job["log"])
    assert cluster.snapshot_images() == []
    still_running(cluster)


def test_the_recovery_job_removes_a_snapshot_a_dead_master_left(cluster: Cluster) -> None:
    image = cluster.image()
    left = image.with_name(f"{image.stem}.snap-{EXPORT_SNAPSHOT}.img")
    shutil.copyfile(image, left)
    job = cluster.run({**export_op(), "cleanup": True})
    assert job["status"] == "success", job
    assert not left.exists() and cluster.snapshot_images() == []
    still_running(cluster)


def test_a_template_that_cannot_snapshot_is_refused_in_one_line(cluster: Cluster) -> None:
    job = cluster.run(export_op(PLAIN))
    assert job["status"] == "error", job
    kind, (message, *_) = job["result"]
    assert kind == "OpPrereqError" and "\n" not in message
    assert message.startswith(f"an export of the running {PLAIN} without a shutdown reads a "
                              "snapshot of each disk: "), message
    assert "plain disks cannot be snapshotted" in message
    assert job["log"] == [] and not cluster.export_dir(PLAIN).exists()
