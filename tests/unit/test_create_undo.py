"""A creation that fails after its disks were made undoes them; when the undo itself cannot
reach the node (it died meanwhile), the instance stays in the config, stopped, so that nothing
on the node is left unowned: `herder instance remove` finishes the cleanup once the node
answers (the chaos run found a sharedfile disk nobody owned after such a failure)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core import model
from herder.core.errors import RpcError
from herder.core.noderpc import RpcTransport
from tests.rpcfakes import nothing_answer
from tests.unit.test_jobs import Master

NAME = "c1.example.com"


class DyingNode(RpcTransport):
    """Every node answers about nothing, except the methods `failing` on node2."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.calls: list[tuple[str, str]] = []

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        short = node.name.split(".")[0]
        self.calls.append((short, method))
        if short == "node2" and method in self.failing:
            raise RpcError(f"node {node.name}: {method} failed: cannot reach its node daemon")
        if method == "node_info":
            return {**nothing_answer(method), "memory_free": 1 << 20,  # type: ignore[dict-item]
                    "memory_total": 1 << 20}
        return nothing_answer(method)


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path)
    yield m
    m.queue.stop()


def create(master: Master, failing: set[str]) -> tuple[dict[str, Any], DyingNode]:
    rpc = DyingNode(failing)
    master.env.rpc = rpc
    with master.store.update() as config:
        config.cluster.enabled_disk_templates = [*config.cluster.enabled_disk_templates,
                                                 "sharedfile"]
    info = master.run({"OP_ID": "OP_INSTANCE_CREATE", "instance_name": NAME,
                       "disk_template": "sharedfile", "disks": [{"size": 1024}], "nics": [{}],
                       "pnode": "node2.example.com", "os_type": "debootstrap",
                       "no_install": True, "name_check": False, "ip_check": False,
                       "beparams": {"maxmem": 128, "minmem": 128}})
    return info, rpc


def test_a_failed_start_removes_the_disks_and_the_instance(master: Master) -> None:
    info, rpc = create(master, {"instance_start"})
    assert info["status"] == "error", info
    assert ("node2", "blockdev_remove") in rpc.calls
    assert all(i.name != NAME for i in master.store.load().instances.values())


def test_an_undo_that_cannot_reach_the_node_keeps_the_instance_stopped(master: Master) -> None:
    info, rpc = create(master, {"instance_start", "instance_remove", "blockdev_remove"})
    assert info["status"] == "error", info
    assert ("node2", "blockdev_remove") in rpc.calls
    kept = [i for i in master.store.load().instances.values() if i.name == NAME]
    assert len(kept) == 1 and kept[0].admin_state == "down" and not kept[0].disks_active
    log = " ".join(str(entry) for entry in info["oplog"][0])
    assert f"herder instance remove {NAME}" in log, log
    # the cleanup finishes with the operator's remove once the node answers again
    master.env.rpc = DyingNode(set())
    done = master.run({"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": NAME})
    assert done["status"] == "success", done
    assert all(i.name != NAME for i in master.store.load().instances.values())
