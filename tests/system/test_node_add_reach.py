"""Issue 35 item 16: `node add` without a join token wrote any address into the config (a typo
in the IP was accepted silently, and the cluster then had a node nobody could reach). As
Ganeti's LUNodeAdd, the master now reaches the new node's daemon port first (TcpPing to
noded's port, 10 s), on its primary and on its secondary address; `node_check: false`
(`--no-node-check`) adds it without, explicitly.

The job queue, processor and config store are masterd's own, in this process; the node is a
real noded server (libvirt's test driver) on a loopback address.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core.store import FileStore
from herder.masterd.jobs.queue import JobQueue
from tests.conftest import build_config, run_cli, stored_files
from tests.system.inprocess_master import master_over_nodes

LISTENING, SILENT = "127.0.0.181", "127.0.0.182"  # a node daemon; nothing at all


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[JobQueue, FileStore]]:
    with master_over_nodes(tmp_path_factory.mktemp("reach"),
                           build_config(nodes=2, drbd_instances=0, plain_instances=0),
                           {"node3.example.com": LISTENING}, workers=1) as running:
        yield running.queue, running.store


def add(queue: JobQueue, name: str, ip: str, **fields: Any) -> tuple[str, Any]:
    job = queue.wait(queue.submit([{"OP_ID": "OP_NODE_ADD", "node_name": name,
                                    "primary_ip": ip, **fields}]), 60)
    return str(job.status), job.ops[0].result


def test_an_unreachable_address_is_refused_and_nothing_is_written(master) -> None:
    queue, store = master
    before = stored_files(store.path)
    status, result = add(queue, "node9.example.com", SILENT)
    assert status == "error"
    assert result == ["OpPrereqError", [f"Node not reachable by ping: nothing answers on "
                                        f"{SILENT} port {queue.processor.env.rpc.port} "
                                        "(node_check: false adds it without)",
                                        "environment_error"]]
    assert stored_files(store.path) == before
    status, result = add(queue, "node9.example.com", LISTENING, secondary_ip=SILENT)
    assert status == "error" and "Node secondary ip not reachable" in result[1][0]
    assert stored_files(store.path) == before


def test_a_reachable_node_is_added_and_the_check_can_be_skipped_explicitly(master) -> None:
    queue, store = master
    assert add(queue, "node3.example.com", LISTENING)[0] == "success"
    assert store.load().find_node("node3").primary_ip == LISTENING
    assert add(queue, "node9.example.com", SILENT, node_check=False)[0] == "success"
    assert store.load().find_node("node9").primary_ip == SILENT


def test_the_cli_refuses_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    FileStore(config).create(build_config(nodes=1, drbd_instances=0, plain_instances=0))
    refused = run_cli("--offline", "node", "add", "node9.example.com", "--ip", SILENT,
                      config=config)
    assert refused.code != 0
    lines = refused.err.strip().splitlines()
    assert len(lines) == 1 and "Node not reachable by ping" in lines[0], refused.err
    assert run_cli("--offline", "node", "add", "node9.example.com", "--ip", SILENT,
                   "--no-node-check", config=config).code == 0
