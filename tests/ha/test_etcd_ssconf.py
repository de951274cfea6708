"""masterd on etcd pushes the nodes' ssconf (`masterd.redist_etcd`): at its takeover, so the
nodes' heartbeats follow the new master's IP, and after every config change; a node that could
not be reached is tried again later. Real noded RPC handlers (one in-process `Node` per node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from herder.core import model, ssconf
from herder.core.noderpc import RpcTransport, UnreachableError
from herder.masterd import redist_etcd
from herder.noded import rpc as noded_rpc
from herder.noded.node import Node, NodeSettings
from tests.conftest import build_config


class Nodes(RpcTransport):
    """Each node's noded, in-process (its "/" under tmp_path/NAME); `down` ones unreachable."""

    def __init__(self, tmp_path: Path, config: model.ConfigData) -> None:
        self.root = tmp_path
        self.down: set[str] = set()
        self.noded = {n.name: Node(NodeSettings(
            node_name=n.name, state_dir=tmp_path / n.name / "state",
            run_dir=tmp_path / n.name / "run", hmac_key=b"k" * 40,
            libvirt_uri="test:///default", file_root=tmp_path / n.name / "root",
            config_dir=Path("/var/lib/herder"))) for n in config.nodes.values()}

    def data_dir(self, name: str) -> Path:
        return self.root / name / "root" / "var" / "lib" / "herder"

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        if node.name in self.down:
            raise UnreachableError(f"node {node.name}: connection refused")
        return msgspec.to_builtins(noded_rpc.dispatch(self.noded[node.name], method, args))


def take_over(config: model.ConfigData, name: str) -> model.Node:
    """As `etcd_master.take_over` writes it: the master and its IP moved, the serial up."""
    new = next(n for n in config.nodes.values() if n.name == name)
    config.cluster.master_node = new.uuid
    config.cluster.master_ip = new.primary_ip
    config.serial_no += 1
    return new


def test_the_nodes_learn_the_new_master_at_the_takeover_and_later_changes(tmp_path):
    config = build_config(3)
    nodes = Nodes(tmp_path, config)
    names = sorted(n.name for n in config.nodes.values())
    old_master = config.node_name(config.cluster.master_node)
    new = take_over(config, names[1])
    nodes.down.add(old_master)  # the old master died
    record = redist_etcd.SsconfRecord()

    failed = redist_etcd.push_ssconf(nodes, config, record, now=0.0)
    assert list(failed) == [old_master] and "connection refused" in failed[old_master]
    for name in names:
        if name != old_master:
            assert ssconf.master_node(nodes.data_dir(name)) == new.name
            assert ssconf.master_ip(nodes.data_dir(name)) == new.primary_ip
    assert ssconf.master_node(nodes.data_dir(old_master)) is None

    # nothing changed: nobody is pushed to again, the failed node not before its retry time
    assert redist_etcd.push_ssconf(nodes, config, record, now=1.0) == {}
    assert record.due(config, now=redist_etcd.RETRY - 1) == []
    nodes.down.clear()  # it came back
    assert [n.name for n in record.due(config, now=redist_etcd.RETRY)] == [old_master]
    assert redist_etcd.push_ssconf(nodes, config, record, now=redist_etcd.RETRY) == {}
    assert ssconf.master_node(nodes.data_dir(old_master)) == new.name

    # a config change (a node marked offline) reaches the online nodes at once; the offline
    # node gets no ssconf (as with the file backend)
    # (a change replaces the objects it touches, as the stores' do: the ssconf values are
    # kept per object, `redist.PlanMemo`)
    gone = next(n for n in config.nodes.values() if n.name == old_master)
    config.nodes = {**config.nodes, gone.uuid: msgspec.structs.replace(gone, offline=True,
                                                                     master_candidate=False)}
    config.serial_no += 1
    pushed = {n.name for n in record.due(config, now=redist_etcd.RETRY + 1)}
    assert pushed == set(names) - {old_master}
    assert redist_etcd.push_ssconf(nodes, config, record, now=redist_etcd.RETRY + 1) == {}
    for name in pushed:
        assert ssconf.read_lines("offline_nodes", nodes.data_dir(name)) == [old_master]


def test_a_failed_node_is_pushed_to_at_once_when_the_config_changes_again(tmp_path):
    config = build_config(2)
    nodes = Nodes(tmp_path, config)
    first = sorted(n.name for n in config.nodes.values())[0]
    nodes.down.add(first)
    record = redist_etcd.SsconfRecord()
    assert list(redist_etcd.push_ssconf(nodes, config, record, now=0.0)) == [first]
    assert first not in {n.name for n in record.due(config, now=1.0)}
    config.serial_no += 1  # the serial alone: nobody is pushed to (compat D30)
    assert record.due(config, now=1.0) == []
    config.cluster.tags.append("moved")  # a value moved
    config.serial_no += 1
    assert first in {n.name for n in record.due(config, now=1.0)}


def test_a_candidate_gets_no_config_copy_on_etcd(tmp_path):
    """`node add` and a promotion push everything to a new candidate (full). On etcd, where
    every masterd reads the config and the job queue from etcd, the candidate gets its
    ssconf and the cluster's files but no config.json nor queue copy (one pushed once and
    never again would be stale); with the file store it gets both, as before."""
    from herder.core.store import FileStore
    from herder.masterd import redist

    config = build_config(3)
    master_dir = tmp_path / "master"
    master_dir.mkdir()
    FileStore(master_dir / "config.json").create(config)
    (master_dir / "queue").mkdir()
    (master_dir / "hmac.key").write_bytes(b"k" * 40)
    master = config.node_name(config.cluster.master_node)
    (candidate,) = [n.name for n in config.nodes.values()
                    if n.master_candidate and n.name != master][:1]
    for copies, where in ((False, "etcd"), (True, "file")):
        nodes = Nodes(tmp_path / where, config)
        pushed = redist.Redistributor(nodes, master_dir / "config.json", master_dir / "queue",
                                      config_copies=copies).push(config, full=True,
                                                                 only=[candidate])
        data = nodes.data_dir(candidate)
        assert ssconf.read_lines("master_node", data) == [master], pushed
        # the cluster's files land where the master has them
        root = nodes.root / candidate / "root"
        assert (root / str(master_dir / "hmac.key").lstrip("/")).read_bytes() == b"k" * 40
        assert (data / "config.json").exists() is copies, pushed[candidate]
        assert any(s.startswith("config") for s in pushed[candidate].sent) is copies
