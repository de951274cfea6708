"""Joining a node with a token, and noded's callers by node certificate (docs/real-nodes.md
"Joining a node", "noded authenticates callers"): a real noded in-process on loopback, with
the TLS it serves in production (`noded.trust`), and the master's join (`masterd.join`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from herder.core import node_certs, ssconf
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.errors import RpcError
from herder.core.noderpc import HttpNodeRpc
from herder.core.rpcdefs import node_calls
from herder.masterd import join
from herder.noded import rpc as noded_rpc
from herder.noded.daemon import serve
from herder.noded.node import Node, NodeSettings

from .noded_fixture import KEY, node

NEW = "node2.example.com"


@dataclass
class Cluster:
    """The master's side: the CA (server.pem), the key, the master's node certificate."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "server.pem"

    @property
    def node_pem(self) -> Path:
        return self.directory / "node.pem"

    def material(self) -> join.JoinMaterial:
        return join.JoinMaterial(self.ca.read_bytes(), KEY)

    def listing(self, *extra: tuple[str, str]) -> dict[str, str]:
        rows = [("node1.example.com", node_certs.digest(self.node_pem.read_bytes())), *extra]
        return {"cluster_name": "cluster.example.com\n",
                node_certs.SSCONF_NAME: node_certs.format_list(rows)}

    def rpc(self, port: int, shown: Path | None = None) -> HttpNodeRpc:
        return HttpNodeRpc(KEY, self.ca, port=port, client_certificate=shown, timeout=20,
                           connect_timeout=5)


def make_cluster(directory: Path) -> Cluster:
    directory.mkdir(parents=True)
    cluster = Cluster(directory)
    cluster.ca.write_bytes(self_signed_certificate("cluster.example.com"))
    cluster.node_pem.write_bytes(node_certs.issue(cluster.ca.read_bytes(), "node1.example.com"))
    return cluster


@dataclass
class Fresh:
    port: int
    daemon: Node

    @property
    def token(self) -> str:
        return self.daemon.trust.join_token.read_text().strip()


@contextmanager
def fresh_noded(directory: Path, name: str = NEW,
                config_dir: Path = Path("/var/lib/herder"), *, host: str = "127.0.0.1",
                port: int = 0, file_root: Path | None = None) -> Iterator[Fresh]:
    """noded as `herder noded` runs it (on a node without the cluster's secrets, unless
    `config_dir` under `file_root` holds them)."""
    daemon = Node(NodeSettings(
        node_name=name, state_dir=directory / "state", run_dir=directory / "run",
        libvirt_uri="test:///default", file_root=file_root or directory / "root",
        config_dir=config_dir))
    daemon.trust.prepare_join(name)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    bound: list[int] = []
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve(daemon, host, port, None,
                                      tls=daemon.trust.server_context(),
                                      ready=lambda port: (bound.append(port), ready.set()),
                                      stop=stop))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "noded did not start"
    try:
        yield Fresh(bound[0], daemon)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()
        daemon.hv.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return make_cluster(tmp_path / "master")


def joined_files(daemon: Node) -> list[str]:
    return sorted(p.name for p in daemon.trust.config_dir.iterdir())


def test_a_fresh_node_joins_with_its_token_and_then_takes_the_masters_calls(
        tmp_path: Path, cluster: Cluster) -> None:
    with fresh_noded(tmp_path / "n2") as fresh:
        token = fresh.token
        assert (fresh.daemon.trust.join_token.stat().st_mode & 0o777) == 0o600
        secret, pinned = node_certs.parse_token(token)
        assert pinned == node_certs.digest(fresh.daemon.trust.join_certificate.read_bytes())
        before = cluster.rpc(fresh.port)
        with pytest.raises(RpcError, match="certificate verify failed"):
            before.call(node(NEW), node_calls.Ping())  # it shows no certificate of the cluster yet
        before.close()
        digest = join.join(NEW, "127.0.0.1", fresh.port, token, cluster.material(),
                           ssconf=lambda d: cluster.listing((NEW, d)))
        trust = fresh.daemon.trust
        assert trust.joined() and not trust.join_token.exists()
        assert node_certs.digest(trust.node_certificate.read_bytes()) == digest
        assert node_certs.is_issued_by(trust.node_certificate.read_bytes(),
                                       cluster.ca.read_bytes())
        assert (trust.node_certificate.stat().st_mode & 0o777) == 0o600
        assert ssconf.read("cluster_name", trust.config_dir) == "cluster.example.com"
        # the master's client, showing its node certificate, is taken at once
        rpc = cluster.rpc(fresh.port)
        assert rpc.call(node(NEW), node_calls.Ping()).node == NEW
        rpc.close()
        # a certificate the CA issued but the cluster does not list is refused
        stray = tmp_path / "stray.pem"
        stray.write_bytes(node_certs.issue(cluster.ca.read_bytes(), "node9.example.com"))
        stranger = cluster.rpc(fresh.port, shown=stray)
        with pytest.raises(RpcError, match="not one of the cluster's node certificates"):
            stranger.call(node(NEW), node_calls.Ping())
        stranger.close()
        # nor is the token good a second time: the node belongs to a cluster now
        with pytest.raises(join.JoinError, match="already belongs to a cluster"):
            join.join(NEW, "127.0.0.1", fresh.port, token, cluster.material(),
                      ssconf=lambda d: cluster.listing((NEW, d)))
        del secret


def test_a_wrong_token_changes_nothing_on_the_node(tmp_path: Path, cluster: Cluster) -> None:
    with fresh_noded(tmp_path / "n2") as fresh:
        secret, pinned = node_certs.parse_token(fresh.token)
        files = joined_files(fresh.daemon)
        wrong_pin = f"{secret}.{'0' * 64}"
        with pytest.raises(join.JoinError, match="wrong join token"):
            join.join(NEW, "127.0.0.1", fresh.port, wrong_pin, cluster.material(),
                      ssconf=cluster.listing)
        wrong_secret = f"x{secret}.{pinned}"
        with pytest.raises(join.JoinError, match="refused.*wrong join token"):
            join.join(NEW, "127.0.0.1", fresh.port, wrong_secret, cluster.material(),
                      ssconf=cluster.listing)
        assert joined_files(fresh.daemon) == files and not fresh.daemon.trust.joined()
        # the right token still works afterwards
        join.join(NEW, "127.0.0.1", fresh.port, fresh.token, cluster.material(),
                  ssconf=lambda d: cluster.listing((NEW, d)))
        assert fresh.daemon.trust.joined()


def test_an_unreachable_node_is_one_line(cluster: Cluster) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = f"secret.{'a' * 64}"
    with pytest.raises(join.JoinError, match="cannot be reached") as caught:
        join.join(NEW, "127.0.0.1", port, token, cluster.material(), ssconf=cluster.listing)
    assert "\n" not in str(caught.value)


def test_a_node_of_another_cluster_is_refused(tmp_path: Path, cluster: Cluster) -> None:
    other = make_cluster(tmp_path / "other")
    with fresh_noded(tmp_path / "n2") as fresh:
        token = fresh.token
        join.join(NEW, "127.0.0.1", fresh.port, token, other.material(),
                  ssconf=lambda d: other.listing((NEW, d)))
        with pytest.raises(join.JoinError, match="already belongs to a cluster"):
            join.join(NEW, "127.0.0.1", fresh.port, token, cluster.material(),
                      ssconf=lambda d: cluster.listing((NEW, d)))
        # still the other cluster's node
        assert node_certs.is_issued_by(fresh.daemon.trust.node_certificate.read_bytes(),
                                       other.ca.read_bytes())


def test_a_certificate_taken_off_the_list_is_refused(tmp_path: Path, cluster: Cluster) -> None:
    """What `node remove` does to the removed node's certificate on every other node."""
    third = tmp_path / "node3.pem"
    third.write_bytes(node_certs.issue(cluster.ca.read_bytes(), "node3.example.com"))
    third_digest = node_certs.digest(third.read_bytes())
    with fresh_noded(tmp_path / "n2") as fresh:
        join.join(NEW, "127.0.0.1", fresh.port, fresh.token, cluster.material(),
                  ssconf=lambda d: cluster.listing((NEW, d), ("node3.example.com",
                                                             third_digest)))
        rpc = cluster.rpc(fresh.port, shown=third)
        assert rpc.call(node(NEW), node_calls.Ping()).node == NEW
        # only the master and the candidates make node RPCs
        noded_rpc.dispatch(fresh.daemon, "write_ssconf", {"values": {
            "master_node": "node1.example.com\n",
            "master_candidates": "node1.example.com\nnode3.example.com\n"}})
        assert rpc.call(node(NEW), node_calls.Ping()).node == NEW
        noded_rpc.dispatch(fresh.daemon, "write_ssconf",
                           {"values": {"master_candidates": "node1.example.com\n"}})
        with pytest.raises(RpcError, match="neither the master nor a master candidate"):
            rpc.call(node(NEW), node_calls.Ping())
        master = cluster.rpc(fresh.port)
        assert master.call(node(NEW), node_calls.Ping()).node == NEW
        master.close()
        listing = cluster.listing()  # node3 removed
        noded_rpc.dispatch(fresh.daemon, "write_ssconf", {"values": listing})
        with pytest.raises(RpcError, match="revoked or unknown"):
            rpc.call(node(NEW), node_calls.Ping())
        rpc.close()


def test_node_add_joins_first_and_leaves_the_config_unchanged_when_the_join_fails(
        tmp_path: Path, cluster: Cluster) -> None:
    """OP_NODE_ADD with a join token, through the job processor and masterd's node RPC."""
    from herder.core.store import FileStore
    from herder.masterd import locking
    from herder.masterd.jobs.queue import JobQueue
    from herder.masterd.lu.base import MasterEnv
    from herder.masterd.processor import Processor
    from tests.conftest import build_config

    (cluster.directory / "hmac.key").write_bytes(KEY)
    store = FileStore(cluster.directory / "config.json")
    config = build_config(nodes=1, drbd_instances=0, plain_instances=0)
    master = next(iter(config.nodes.values()))
    config.cluster.node_certs[master.uuid] = node_certs.digest(cluster.node_pem.read_bytes())
    store.create(config)
    with fresh_noded(tmp_path / "n2", config_dir=cluster.directory) as fresh:
        rpc = cluster.rpc(fresh.port)
        env = MasterEnv(store=store, rpc=rpc, locks=locking.LockManager(
            nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances))
        queue = JobQueue(tmp_path / "queue", Processor(env), workers=1)
        queue.recover()
        queue.start()
        try:
            def add(token: str) -> dict:
                job = queue.submit([{"OP_ID": "OP_NODE_ADD", "node_name": NEW,
                                     "primary_ip": "127.0.0.1", "join_token": token}])
                queue.wait(job, 60)
                return queue.info(job)

            serial = store.load().serial_no
            secret, pinned = node_certs.parse_token(fresh.token)
            failed = add(f"x{secret}.{pinned}")
            assert failed["status"] == "error" and "wrong join token" in str(failed["opresult"])
            assert store.load().serial_no == serial and len(store.load().nodes) == 1
            done = add(fresh.token)
            assert done["status"] == "success", done
            added = store.load().find_node(NEW)
            assert store.load().cluster.node_certs[added.uuid] == node_certs.digest(
                fresh.daemon.trust.node_certificate.read_bytes())
            # and masterd's node RPC reaches it at once
            assert rpc.call(added, node_calls.Ping()).node == NEW
        finally:
            queue.stop()
            rpc.close()


def test_renew_crypto_rotates_ca_node_certificates_and_key(tmp_path: Path,
                                                           cluster: Cluster) -> None:
    """The master's noded (its files are the master's) and a joined node, on one port of two
    loopback addresses: after the rotation both show certificates of the new CA, take the
    master's calls with the new key and certificate, and refuse the old ones."""
    import socket

    from herder.core import model
    from herder.core.store import FileStore
    from herder.masterd import renew
    from tests.conftest import build_config

    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        port = probe.getsockname()[1]
    (cluster.directory / "hmac.key").write_bytes(KEY)
    config = build_config(nodes=2, drbd_instances=0, plain_instances=0)
    first, second = sorted(config.nodes.values(), key=lambda n: n.name)
    first.name, first.primary_ip = "node1.example.com", "127.0.0.2"
    second.name, second.primary_ip = NEW, "127.0.0.3"
    config.cluster.master_node = first.uuid
    config.cluster.node_certs[first.uuid] = node_certs.digest(cluster.node_pem.read_bytes())
    store = FileStore(cluster.directory / "config.json")
    store.create(config)
    for name, text in cluster.listing().items():
        (cluster.directory / f"ssconf_{name}").write_text(text)
    (cluster.directory / "ssconf_master_node").write_text("node1.example.com\n")
    old_ca = cluster.ca.read_bytes()
    with fresh_noded(tmp_path / "n1", "node1.example.com", cluster.directory,
                     host="127.0.0.2", port=port, file_root=Path("/")), \
            fresh_noded(tmp_path / "n2", host="127.0.0.3", port=port) as fresh:
        digest = join.join(NEW, "127.0.0.3", port, fresh.token, cluster.material(),
                           ssconf=lambda d: cluster.listing((NEW, d)))
        with store.update() as changed:
            changed.cluster.node_certs[second.uuid] = digest
        old_node_pem = tmp_path / "old-node.pem"
        old_node_pem.write_bytes(cluster.node_pem.read_bytes())
        lines: list[str] = []
        renewed = renew.renew(store.path, lines.append, port=port)
        new_ca = cluster.ca.read_bytes()
        assert new_ca != old_ca and set(renewed) == {"node1.example.com", NEW}
        assert store.load().cluster.node_certs == {first.uuid: renewed["node1.example.com"],
                                                   second.uuid: renewed[NEW]}
        assert node_certs.is_issued_by(fresh.daemon.trust.node_certificate.read_bytes(), new_ca)
        assert not list(cluster.directory.glob("*.retiring"))
        assert not list(fresh.daemon.trust.config_dir.glob("*.retiring"))
        new_key = (cluster.directory / "hmac.key").read_bytes()
        assert new_key != KEY
        for target in (first, second):
            now = HttpNodeRpc(new_key, cluster.ca, port=port, timeout=20)
            assert now.call(model.Node(uuid="x", name=target.name,
                                       primary_ip=target.primary_ip, group="g"),
                            node_calls.Ping()).node == target.name
            now.close()
            # the old key is refused, and so is the old certificate
            old = HttpNodeRpc(KEY, cluster.ca, port=port, timeout=20)
            with pytest.raises(RpcError, match="invalid signature"):
                old.call(target, node_calls.Ping())
            old.close()
            stale = HttpNodeRpc(new_key, cluster.ca, port=port, timeout=20,
                                client_certificate=old_node_pem)
            with pytest.raises(RpcError):
                stale.call(target, node_calls.Ping())
            stale.close()
