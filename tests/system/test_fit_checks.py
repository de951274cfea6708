"""Issue 35 items 13 and 14: an instance must fit where it goes, whoever chose the node.

With an explicit primary, 24 disks and 24 NICs (the policy allows 16 and 8), a disk larger
than the node's file storage and more memory than the node has were accepted, and a start put
a guest with 1 TiB of memory on a node with 3 GiB; the last disk of an instance could be
removed. Now the group's policy is checked (Ganeti's message; `ignore_ipolicy` overrides) and
the nodes are asked for their free memory and disk (Ganeti's CheckNodeFreeMemory,
CheckNodesFreeDiskPerVG) at create, start and move.

Two real node daemons (noded's server, libvirt's test driver: a node of 3 GiB... as libvirt
makes it up) in this process answer masterd's LUs, run by the real job queue and processor.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herder.core import model
from herder.core.store import FileStore
from herder.masterd.jobs.queue import JobQueue
from tests.conftest import build_config
from tests.system.inprocess_master import master_over_nodes

ADDRESSES = {"node1.example.com": "127.0.0.171", "node2.example.com": "127.0.0.172"}
TIB = 1024 * 1024  # MiB


@dataclass
class Cluster:
    store: FileStore
    queue: JobQueue
    storage: Path  # the file storage directory

    def run(self, op: dict[str, Any]) -> dict[str, Any]:
        """The job of `op`, finished: its status and its result or error."""
        job_id = self.queue.submit([op])
        job = self.queue.wait(job_id, 120)
        return {"status": str(job.status), "result": job.ops[0].result}


def error_of(job: dict[str, Any]) -> str:
    assert job["status"] == "error", job
    kind, args = job["result"]
    assert kind == "OpPrereqError", job  # a prerequisite: nothing was changed
    return str(args[0])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("fit")
    storage = directory / "file-storage"
    storage.mkdir()
    config = build_config(nodes=2, drbd_instances=0, plain_instances=0)
    config.cluster.enabled_disk_templates = ["file", "plain", "diskless"]
    config.cluster.file_storage_dir = str(storage)
    for node in config.nodes.values():
        node.primary_ip = ADDRESSES[node.name]
    node1 = config.find_node("node1")
    huge = model.Instance(  # 1 TiB of memory, stopped; one file disk
        uuid=model.new_uuid(), name="huge.example.com", primary_node=node1.uuid, os="none",
        hypervisor="kvm", beparams={"maxmem": TIB, "minmem": TIB},
        disks=[model.Disk(uuid=model.new_uuid(), dev_type="file", size=1024,
                          iv_name="disk/0",
                          logical_id=model.FileId(driver="loop",
                                                  path=f"{storage}/huge.example.com/disk0"))],
        nics=[model.NIC(uuid=model.new_uuid(), mac="aa:00:00:02:00:01")])
    config.instances[huge.uuid] = huge
    with master_over_nodes(directory, config, ADDRESSES) as master:
        yield Cluster(master.store, master.queue, storage)


def create(name: str, **fields: Any) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "disk_template": "file",
            "disks": [{"size": 1024}], "nics": [{}], "pnode": "node2.example.com",
            "name_check": False, "ip_check": False, "no_install": True, "dry_run": True,
            **fields}


def test_an_explicit_primary_is_held_to_the_policy(cluster: Cluster) -> None:
    # one disk more than the policy's 16 (each at the policy's 1 GiB minimum)
    job = cluster.run(create("wide.example.com", disks=[{"size": 1024}] * 17))
    message = error_of(job)
    assert "violates policy" in message and "(default)" in message
    assert "disk-count value 17 is not in range [1, 16]" in message
    # more NICs than the policy's 8 are more than an instance may have at all (Ganeti's
    # MAX_NICS, before any policy): refused whatever the policy says
    too_many = error_of(cluster.run(create("wide.example.com", nics=[{}] * 24,
                                           ignore_ipolicy=True)))
    assert too_many == "Instance has too many network interfaces (24)"
    # with the policy ignored the same count is created; the disks are small (below the
    # policy's minimum size, ignored as well) so that the machine's free space cannot decide it
    ignored = cluster.run(create("wide.example.com", disks=[{"size": 64}] * 17,
                                 ignore_ipolicy=True, start=False))
    assert ignored == {"status": "success", "result": ["node2.example.com"]}


def test_an_explicit_primary_needs_the_memory_and_the_disk_space(cluster: Cluster) -> None:
    memory = error_of(cluster.run(create("big.example.com", beparams={"maxmem": TIB,
                                                                      "minmem": TIB},
                                         ignore_ipolicy=True)))
    assert memory.startswith("Not enough memory on node node2.example.com for creating "
                             f"instance big.example.com: needed {TIB} MiB, available ")
    free = os.statvfs(cluster.storage)
    too_big = free.f_bavail * free.f_frsize // (1 << 20) + 64 * 1024  # MiB
    disk = error_of(cluster.run(create("big.example.com", disks=[{"size": too_big}],
                                       ignore_ipolicy=True, start=False)))
    assert disk.startswith("Not enough disk space on target node node2.example.com file "
                           f"{cluster.storage}: required {too_big} MiB, available ")
    # the same instance without a start needs no memory, and fits on the disk
    fits = cluster.run(create("big.example.com", beparams={"maxmem": TIB, "minmem": TIB},
                              ignore_ipolicy=True, start=False))
    assert fits["status"] == "success"


def test_a_start_needs_the_memory(cluster: Cluster) -> None:
    message = error_of(cluster.run({"OP_ID": "OP_INSTANCE_STARTUP",
                                    "instance_name": "huge.example.com"}))
    assert message.startswith("Not enough memory on node node1.example.com for starting "
                              f"instance huge.example.com: needed {TIB} MiB, available ")
    assert cluster.store.load().find_instance("huge").admin_state == "down"


def test_the_last_disk_cannot_be_removed_unless_the_policy_is_ignored(cluster: Cluster) -> None:
    remove = {"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": "huge.example.com",
              "disks": [["remove", -1, {}]], "dry_run": True}
    message = error_of(cluster.run(remove))
    assert "violates policy" in message and "disk-count value 0 is not in range [1, 16]" \
        in message, message
    assert cluster.run({**remove, "ignore_ipolicy": True})["status"] == "success"
    assert len(cluster.store.load().find_instance("huge").disks) == 1  # dry runs
