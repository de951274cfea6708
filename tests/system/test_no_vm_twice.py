"""Issue 18, item 5: no VM ever runs twice.

A real masterd job processor drives two real node daemons (`herder.noded.node.Node` and its
RPC handlers), each with its own libvirt (a private test-driver connection: the domains of one
node are not the other's). The source's node daemon "dies" right after the target accepted the
migration (its calls fail from then on, as a killed noded's would): the migration's cleanup
must leave exactly one copy; when even the cleanup cannot reach the target,
`OP_CLUSTER_VERIFY_GROUP` reports the stray ("instance should not run on node", as Ganeti), the
target's guard refuses to start it again (also after its node daemon restarted), and maintd's
OP_INSTANCE_STOP_STRAY stops it only once the primary's copy is confirmed to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("libvirt")

from herder.core import model, nodeverify, vmclaim
from herder.core.errors import RpcError
from herder.core.noderpc import RpcTransport
from herder.core.rpcdefs import instance_calls
from herder.core.rpcdefs.payload import instance_payload
from herder.core.store import FileStore
from herder.masterd import locking
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from herder.noded import rpc as noded_rpc
from herder.noded.node import Node, NodeSettings
from tests.conftest import build_config

NAME = "web1.example.com"
SOURCE, TARGET = "node2.example.com", "node3.example.com"
TEST_NODE_XML = "<node><cpu><nodes>1</nodes><sockets>1</sockets><cores>2</cores>" \
                "<threads>1</threads></cpu><memory>8388608</memory></node>"


class Nodes(RpcTransport):
    """The node RPC of the master, delivered to in-process node daemons; a node in `dead`
    does not answer (and `drop` lists (node, method) calls lost on the way)."""

    def __init__(self, tmp_path: Path, names: list[str]) -> None:
        self.tmp_path = tmp_path
        self.daemons = {name: self.boot(name) for name in names}
        self.dead: set[str] = set()
        self.die_after: tuple[str, str, str] | None = None  # (node, method): then `node` dies
        self.drop: set[tuple[str, str]] = set()
        self.calls: list[tuple[str, str]] = []

    def boot(self, name: str) -> Node:
        base = self.tmp_path / name
        base.mkdir(exist_ok=True)
        host = base / "libvirt-node.xml"
        if not host.exists():
            host.write_text(TEST_NODE_XML)
        return Node(NodeSettings(
            node_name=name, state_dir=base / "state", run_dir=base / "run", hmac_key=b"k" * 32,
            libvirt_uri=f"test://{host}", file_root=base))

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        from herder.core.errors import HerderError

        self.calls.append((node.name, method))
        if node.name in self.dead or (node.name, method) in self.drop:
            raise RpcError(f"node {node.name}: connection refused")
        try:
            result = noded_rpc.dispatch(self.daemons[node.name], method, dict(args))
        except HerderError as err:
            raise RpcError(f"node {node.name}: {err}") from None
        if self.die_after is not None and self.die_after[:2] == (node.name, method):
            self.dead.add(self.die_after[2])
        return msgspec.to_builtins(result)

    def running(self) -> dict[str, str]:
        """Node name -> the state of the instance's domain there (only where it exists)."""
        out = {}
        for name, daemon in self.daemons.items():
            state = daemon.hv.state(NAME)
            if state is not None:
                out[name] = state
        return out

    def close(self) -> None:
        for daemon in self.daemons.values():
            daemon.hv.close()


@pytest.fixture
def cluster(tmp_path: Path):
    config = build_config(nodes=3, drbd_instances=0, plain_instances=0)
    # a diskless instance; no LVM template, so verify asks the nodes (this machine's LVM,
    # where simulated hosts' volume groups may show) about no volume group
    config.cluster.enabled_disk_templates = ["diskless"]
    source = config.find_node(SOURCE)
    inst = model.Instance(uuid=model.new_uuid(), name=NAME, primary_node=source.uuid,
                          os="debootstrap", hypervisor="kvm", admin_state="up",
                          beparams={"maxmem": 128, "minmem": 128, "vcpus": 1})
    config.instances[inst.uuid] = inst
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    nodes = Nodes(tmp_path, [n.name for n in config.nodes.values()])
    env = MasterEnv(store=store, rpc=nodes, locks=locking.LockManager(
        nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances))
    queue = JobQueue(tmp_path / "queue", Processor(env), workers=2)
    queue.recover()
    queue.start()
    try:
        yield store, queue, nodes
    finally:
        queue.stop()
        nodes.close()


def run(queue: JobQueue, *ops: dict[str, Any]) -> dict[str, Any]:
    job = queue.submit(list(ops))
    queue.wait(job, 60)
    return queue.info(job)


def verify(queue: JobQueue) -> list[dict[str, Any]]:
    """What runs where (the stand-in nodes are no hosts: their node checks are not judged)."""
    info = run(queue, {"OP_ID": "OP_CLUSTER_VERIFY_GROUP", "group_name": "default"})
    assert info["status"] == "success", info["opresult"]
    return [f for f in info["opresult"][0] if f["code"] not in nodeverify.CODES]


def migrate(queue: JobQueue) -> dict[str, Any]:
    return run(queue, {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": NAME,
                       "target_node": TARGET})


def start(queue: JobQueue, nodes: Nodes) -> None:
    info = run(queue, {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": NAME})
    assert info["status"] == "success", info["opresult"]
    assert nodes.running() == {SOURCE: "running"}
    assert verify(queue) == []


def test_a_source_dying_before_the_finish_leaves_exactly_one_copy(cluster) -> None:
    store, queue, nodes = cluster
    start(queue, nodes)
    nodes.die_after = (TARGET, "migrate_accept", SOURCE)
    info = migrate(queue)
    assert info["status"] == "error"
    assert f"stays on {SOURCE}" in str(info["opresult"]) or "config keeps it on" in str(
        info["opresult"])
    # the target's copy was stopped: the source's (which the dead noded left running) is the
    # only one, and the config still names the source
    assert nodes.running() == {SOURCE: "running"}
    config = store.load()
    assert config.node_name(config.find_instance(NAME).primary_node) == SOURCE
    # verify while the source's noded is down: it says so, and no stray anywhere
    assert [(f["code"], f["object"]) for f in verify(queue)] == [("node-rpc", f"node {SOURCE}")]
    nodes.dead.clear()
    assert verify(queue) == []


def test_a_stray_left_behind_is_reported_refused_and_stopped_after_the_primary_is_confirmed(
        cluster) -> None:
    store, queue, nodes = cluster
    start(queue, nodes)
    # the source dies after the accept, and the cleanup's stop does not reach the target
    nodes.die_after = (TARGET, "migrate_accept", SOURCE)
    nodes.drop.add((TARGET, "instance_stop_stray"))
    info = migrate(queue)
    assert info["status"] == "error" and "cluster verify reports it" in str(info["opresult"])
    assert nodes.running() == {SOURCE: "running", TARGET: "running"}  # two copies
    nodes.dead.clear()
    nodes.drop.clear()
    findings = verify(queue)
    assert [(f["severity"], f["code"], f["message"]) for f in findings] == [
        ("error", "instance-wrong-node",
         f"instance should not run on node {TARGET} (its primary node is {SOURCE})")]

    # the target never starts it again under the primary's claim (a stale job, a retry)
    config = store.load()
    inst = config.find_instance(NAME)
    target = config.find_node(TARGET)
    stale = instance_calls.InstanceStart(instance=instance_payload(config, inst), name=NAME,
                                         version=inst.serial_no,
                                         claim=vmclaim.claim_for(config, inst))
    nodes.daemons[TARGET].hv.undefine(NAME)
    nodes.daemons[TARGET].hv.close()  # and its node daemon restarts: the guard's record stays
    nodes.daemons[TARGET] = nodes.boot(TARGET)
    with pytest.raises(RpcError, match=f"primary node is {SOURCE}, not this node"):
        nodes.call(target, stale)
    assert TARGET not in nodes.running()

    # put the stray back (as the failed move left it) and let maintd's opcode stop it
    nodes.daemons[TARGET].hv.define_xml(NAME, nodes.daemons[SOURCE].hv.xml_of(NAME))
    nodes.daemons[TARGET].hv.start(NAME)
    assert nodes.running() == {SOURCE: "running", TARGET: "running"}
    stop = {"OP_ID": "OP_INSTANCE_STOP_STRAY", "instance_name": NAME, "node_name": TARGET}
    # not while the primary's copy does not run: the stray might be the only one
    nodes.daemons[SOURCE].hv.shutdown(NAME, timeout=2)
    info = run(queue, stop)
    assert info["status"] == "error" and "not running" in str(info["opresult"])
    assert nodes.running()[TARGET] == "running"
    nodes.daemons[SOURCE].hv.start(NAME)
    info = run(queue, stop)
    assert info["status"] == "success", info["opresult"]
    assert nodes.running() == {SOURCE: "running"}
    assert verify(queue) == []
    # the primary refuses to stop its own copy as a stray
    source = config.find_node(SOURCE)
    with pytest.raises(RpcError, match="this node is its primary node"):
        nodes.call(source, instance_calls.InstanceStopStray(name=NAME, version=stale.version,
                                                            claim=stale.claim))


def test_a_completed_migration_moves_the_claim(cluster) -> None:
    store, queue, nodes = cluster
    start(queue, nodes)
    info = migrate(queue)
    assert info["status"] == "success", info["opresult"]
    assert nodes.running() == {TARGET: "running"}
    assert verify(queue) == []
    # the old claim (source as primary, the version before the move) starts nothing on the
    # source any more
    config = store.load()
    inst = config.find_instance(NAME)
    old = msgspec.structs.replace(vmclaim.claim_for(config, inst), primary=SOURCE,
                                  serial=inst.serial_no - 1)
    with pytest.raises(RpcError, match="stale order|recorded"):
        nodes.call(config.find_node(SOURCE), instance_calls.InstanceStart(
            instance=instance_payload(config, inst), name=NAME, claim=old))
    assert nodes.running() == {TARGET: "running"}
