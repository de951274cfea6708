"""Ganeti's old backend parameter `memory` (`-B memory=512`, still taken by gnt-instance
add/modify/start and gnt-cluster init/modify: `objects.UpgradeBeParams`) sets maxmem and
minmem to its value; without the alias herder refused scripts written for Ganeti."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core.store import FileStore
from herder.masterd import cluster_init
from herder.masterd.jobs import opcodes
from tests.unit.test_jobs import Master

INSTANCE = "web1.example.com"


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path)
    yield m
    m.queue.stop()


@pytest.mark.parametrize("op", [
    {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": INSTANCE, "disk_template": "diskless",
     "disks": [], "nics": [], "no_install": True},
    {"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": INSTANCE},
    {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": INSTANCE},
])
def test_instance_opcodes_read_memory_as_maxmem_and_minmem(op: dict[str, Any]) -> None:
    parsed = opcodes.parse({**op, "beparams": {"memory": 512, "vcpus": 2}})
    assert parsed.beparams == {"maxmem": 512, "minmem": 512, "vcpus": 2}
    with pytest.raises(opcodes.OpcodeError, match="maxmem.: not a size"):
        opcodes.parse({**op, "beparams": {"memory": "lots"}})


def test_cluster_modify_and_init_take_it_too(master: Master, tmp_path: Path) -> None:
    done = master.run({"OP_ID": "OP_CLUSTER_SET_PARAMS", "beparams": {"memory": 384}})
    assert done["status"] == "success", done
    beparams = master.store.load().cluster.beparams
    assert (beparams["maxmem"], beparams["minmem"]) == (384, 384) and "memory" not in beparams
    store = FileStore(tmp_path / "new" / "config.json")
    store.path.parent.mkdir()
    cluster_init.init_cluster(store, cluster_init.InitSettings(
        name="c.example.com", master_node="n1.example.com", primary_ip="192.0.2.10",
        beparams={"memory": 256}, force=True))
    assert store.load().cluster.beparams == {"maxmem": 256, "minmem": 256}
