"""Issue 35 item 16: `node add` without a join token wrote any address into the config (a typo
in the IP was accepted silently, and the cluster then had a node nobody could reach). As
Ganeti's LUNodeAdd, the master now reaches the new node's daemon port first (TcpPing to
noded's port, 10 s), on its primary and on its secondary address; `node_check: false`
(`--no-node-check`) adds it without, explicitly.

The job queue, processor and config store are masterd's own, in this process; the node is a
real noded server (libvirt's test driver) on a loopback address.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core.noderpc import HttpNodeRpc
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from herder.noded.server import NodeDaemon, NodeSettings
from tests.conftest import build_config, run_cli, stored_files
from tests.noded.noded_fixture import KEY, serving

LISTENING, SILENT = "127.0.0.181", "127.0.0.182"  # a node daemon; nothing at all


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[JobQueue, FileStore]]:
    directory = tmp_path_factory.mktemp("reach")
    store = FileStore(directory / "config.json")
    store.create(build_config(nodes=2, drbd_instances=0, plain_instances=0))
    config = store.load()
    port = _free_port()
    daemon = NodeDaemon(NodeSettings(
        node_name="node3.example.com", state_dir=directory / "n3" / "state",
        run_dir=directory / "n3" / "run", hmac_key=KEY, libvirt_uri="test:///default",
        file_root=directory / "n3" / "root", config_dir=directory / "n3" / "cluster"))
    with serving(daemon, LISTENING, port):
        env = MasterEnv(store=store, locks=locking.LockManager(
            nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances),
            rpc=HttpNodeRpc(KEY, None, port=port, timeout=10))
        queue = JobQueue(directory / "queue", Processor(env), workers=1)
        queue.recover()
        queue.start()
        try:
            yield queue, store
        finally:
            queue.stop()
            daemon.hv.close()


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
