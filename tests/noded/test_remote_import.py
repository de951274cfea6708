"""A disk streamed between nodes of two clusters (`noded.remote_import`, a move between
clusters): the target node listens on a port of its own for one stream, taking only a client
certificate of the source cluster's CA and the token; the source shows its node certificate
and checks the target's against the target cluster's CA; the stream goes through the OS
`import` script; a stream that breaks off, a wrong CA, a wrong token, or nobody streaming all
leave the listener failed (or still waiting) with one line, and nothing written."""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import xxhash

from herder.core import node_certs
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.rpcdefs import backup_calls, disk_calls
from herder.noded import disk_transfer, remote_import
from herder.noded import rpc as noded_rpc
from herder.noded.exports import ExportFailure
from herder.noded.node import Node
from herder.noded.node_disks import DiskFailure
from herder.sim import guest
from tests.noded.noded_fixture import running_noded
from tests.noded.test_disk_transfer import allow, file_disk

MIB = 1 << 20


def give_certificate(node: Node, ca: bytes) -> bytes:
    """A node certificate of `ca` for the node (what `cluster init` or a join gives it)."""
    pem = node_certs.issue(ca, node.name)
    node.trust.node_certificate.parent.mkdir(parents=True, exist_ok=True)
    node.trust.node_certificate.write_bytes(pem)
    return pem


def instance(disk: dict[str, Any]) -> dict[str, Any]:
    return {"name": "inst1", "uuid": "u-1", "memory": 128, "vcpus": 1, "os": guest.OS_NAME,
            "hypervisor": "kvm", "nics": [], "disks": [disk], "hvparams": {}, "beparams": {},
            "osparams": {}}


def wait_final(node: Node, token: str) -> backup_calls.RemoteImportProgress:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        progress = noded_rpc.dispatch(node, "remote_import_status", {"token": token})
        assert isinstance(progress, backup_calls.RemoteImportProgress)
        if progress.state in ("done", "failed"):
            return progress
        time.sleep(0.1)
    raise AssertionError("the remote import never finished")


@pytest.fixture
def two_clusters(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """node1 of cluster A (its disk holding 4 MiB of a pattern) and node2 of cluster B (an
    empty disk of the same size), each with a node certificate of its cluster's CA."""
    os_dir = guest.install_os_definition(tmp_path / "os")
    ca_a, ca_b = self_signed_certificate("cluster-a"), self_signed_certificate("cluster-b")
    store_a, store_b = tmp_path / "fs-a" / "inst1", tmp_path / "fs-b" / "inst1"
    with running_noded(tmp_path / "a", "node1") as source, \
            running_noded(tmp_path / "b", "node2") as target:
        disks = {}
        for node, root, store, ca in ((source, tmp_path / "a", store_a, ca_a),
                                      (target, tmp_path / "b", store_b, ca_b)):
            node.daemon.settings.os_path = (os_dir.parent,)
            allow(root / "root", store.parent)
            give_certificate(node.daemon, ca)
            noded_rpc.dispatch(node.daemon, "file_storage_dir_create",
                               {"file_storage_dir": str(store)})
            disks[node.daemon.name] = disk = file_disk(store / "disk0")
            noded_rpc.dispatch(node.daemon, "blockdev_create", {
                "disk": disk, "size": 4, "owner": "inst1", "on_primary": True, "info": ""})
        data = random.Random(11).randbytes(4 * MIB)
        (store_a / "disk0").write_bytes(data)
        yield {"source": source.daemon, "target": target.daemon, "data": data,
               "disk_a": disks["node1"], "disk_b": disks["node2"], "target_file":
               store_b / "disk0", "ca_a": node_certs.certificate_pem(ca_a).decode(),
               "ca_b": node_certs.certificate_pem(ca_b).decode(), "raw_ca_a": ca_a}


def listen(env: dict[str, Any], peer_ca: str) -> backup_calls.RemoteImportListening:
    listening = noded_rpc.dispatch(env["target"], "remote_import_prepare", {
        "disk": env["disk_b"], "instance": "inst1", "os_instance": instance(env["disk_b"]),
        "address": "127.0.0.1", "peer_ca": peer_ca})
    assert isinstance(listening, backup_calls.RemoteImportListening)
    return listening


def source_context(env: dict[str, Any], tmp_path: Path) -> ssl.SSLContext:
    """TLS as a node of cluster A shows it to cluster B's listener."""
    own_pem = tmp_path / "own.pem"
    own_pem.write_bytes(node_certs.issue(env["raw_ca_a"], "node1"))
    context = ssl.create_default_context(cadata=env["ca_b"])
    context.check_hostname = False
    context.load_cert_chain(str(own_pem))
    return context


def send(env: dict[str, Any], listening: backup_calls.RemoteImportListening,
         peer_ca: str) -> object:
    return noded_rpc.dispatch(env["source"], "blockdev_export", {
        "disk": env["disk_a"], "instance": "inst1", "token": listening.token,
        "os_instance": instance(env["disk_a"]), "peer_ca": peer_ca,
        "target": {"address": "127.0.0.1", "port": listening.port}})


def test_a_disk_crosses_to_another_clusters_node(two_clusters: dict[str, Any]) -> None:
    env = two_clusters
    listening = listen(env, env["ca_a"])
    sent = send(env, listening, env["ca_b"])
    digest = f"xxh3_128:{xxhash.xxh3_128(env['data']).hexdigest()}"
    assert sent == disk_calls.Transferred(bytes=4 * MIB, checksum=digest)
    assert wait_final(env["target"], listening.token) == backup_calls.RemoteImportProgress(
        state="done", bytes=4 * MIB, checksum=digest)
    assert env["target_file"].read_bytes() == env["data"]
    # the outcome was read once: the token is gone, a second stream finds no listener
    with pytest.raises(ExportFailure, match="no such remote import"):
        noded_rpc.dispatch(env["target"], "remote_import_status", {"token": listening.token})
    with pytest.raises(DiskFailure, match="copying disk"):
        send(env, listening, env["ca_b"])


def test_only_the_source_clusters_nodes_and_the_token_are_taken(
        two_clusters: dict[str, Any], tmp_path: Path) -> None:
    """A node of a third cluster, a node of the target's own cluster (another CA than the
    one named), a wrong token: refused, the listener still waiting, nothing written; a source
    that does not trust the target's CA does not send."""
    env = two_clusters
    listening = listen(env, env["ca_a"])
    stranger = tmp_path / "stranger.pem"
    stranger.write_bytes(node_certs.issue(self_signed_certificate("cluster-c"), "node9"))
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(str(stranger))
    url = f"https://127.0.0.1:{listening.port}/import/{listening.token}"
    with pytest.raises(httpx.HTTPError):
        httpx.post(url, content=b"x" * 1000, verify=context, timeout=10)
    with pytest.raises(DiskFailure, match="copying disk.*(certificate|SSL)"):
        send(env, listening, env["ca_a"])  # the target's certificate is not cluster A's
    own = ssl.create_default_context()
    own.check_hostname, own.verify_mode = False, ssl.CERT_NONE
    own_pem = tmp_path / "own.pem"
    own_pem.write_bytes(node_certs.issue(env["raw_ca_a"], "node1"))
    own.load_cert_chain(str(own_pem))
    refused = httpx.post(f"https://127.0.0.1:{listening.port}/import/wrong-token",
                         content=b"x" * 1000, verify=own, timeout=10)
    assert refused.status_code == 403
    waiting = noded_rpc.dispatch(env["target"], "remote_import_status",
                                 {"token": listening.token})
    assert isinstance(waiting, backup_calls.RemoteImportProgress)
    assert waiting.state == "listening"
    assert env["target_file"].read_bytes() == bytes(4 * MIB)
    noded_rpc.dispatch(env["target"], "remote_import_abort", {"token": listening.token})
    with pytest.raises(ExportFailure, match="no such remote import"):
        noded_rpc.dispatch(env["target"], "remote_import_status", {"token": listening.token})


def test_a_stream_that_breaks_off_fails_the_import(two_clusters: dict[str, Any],
                                                   tmp_path: Path) -> None:
    """The source dies mid-stream (its connection drops after 1 MiB): the import fails in
    one line, the listener is closed."""
    env = two_clusters
    listening = listen(env, env["ca_a"])
    context = source_context(env, tmp_path)

    def dying() -> Iterator[bytes]:
        yield b"\1" * MIB
        raise ConnectionAbortedError("the source node died")

    with pytest.raises(ConnectionAbortedError):
        httpx.post(f"https://127.0.0.1:{listening.port}/import/{listening.token}",
                   content=dying(), verify=context, timeout=30)
    progress = wait_final(env["target"], listening.token)
    assert progress.state == "failed" and progress.error and "\n" not in progress.error
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"https://127.0.0.1:{listening.port}/import/{listening.token}",
                   content=b"x", verify=context, timeout=10)


def test_a_listener_nobody_streams_to_closes_failed(tmp_path: Path) -> None:
    ca = self_signed_certificate("cluster-b")
    pem = tmp_path / "node.pem"
    pem.write_bytes(node_certs.issue(ca, "node2"))
    target = tmp_path / "disk"
    target.write_bytes(b"")
    context = remote_import.server_context(pem, node_certs.certificate_pem(ca).decode())
    listener = remote_import.RemoteImport(
        disk_transfer.PendingImport(str(target), MIB, 0.0), context, "127.0.0.1", ttl=0.5)
    deadline = time.monotonic() + 30
    while listener.state == "listening" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert listener.progress() == backup_calls.RemoteImportProgress(
        state="failed", error="no stream came within 0.5 s")


def test_a_node_without_certificate_cannot_listen(tmp_path: Path) -> None:
    with pytest.raises(disk_transfer.TransferError, match="no node certificate"):
        remote_import.server_context(tmp_path / "none.pem", "-----BEGIN CERTIFICATE-----")


@pytest.mark.parametrize(("args", "named"), [
    ({"address": "not-an-ip"}, "address"),
    ({"peer_ca": "hello"}, "peer_ca"),
    ({"idx": -1}, "idx|index"),
])
def test_bad_remote_import_arguments_are_refused_at_the_door(args: dict[str, object],
                                                             named: str) -> None:
    disk = file_disk(Path("/srv/x/d0"))
    base = {"disk": disk, "instance": "inst1", "os_instance": instance(disk),
            "address": "127.0.0.1", "peer_ca": "-----BEGIN CERTIFICATE-----\n"}
    with pytest.raises(noded_rpc.BadArguments, match=named):
        noded_rpc.decode("remote_import_prepare", {**base, **args})


def test_a_listener_closed_mid_stream_fails_both_ends(two_clusters: dict[str, Any],
                                                      tmp_path: Path) -> None:
    """The target side goes away during the stream (its listener ended, as when its master
    aborts it or its noded stops): the sender's stream fails in one line, the import is
    failed."""
    import threading

    env = two_clusters
    listening = listen(env, env["ca_a"])
    context = source_context(env, tmp_path)
    first_sent, go_on = threading.Event(), threading.Event()

    def stalled() -> Iterator[bytes]:
        yield b"\1" * MIB
        first_sent.set()
        go_on.wait(60)
        for _ in range(64):
            yield b"\2" * MIB

    outcome: list[BaseException | httpx.Response] = []

    def post() -> None:
        try:
            outcome.append(httpx.post(
                f"https://127.0.0.1:{listening.port}/import/{listening.token}",
                content=stalled(), verify=context, timeout=60))
        except (httpx.HTTPError, OSError) as err:
            outcome.append(err)

    sender = threading.Thread(target=post)
    sender.start()
    assert first_sent.wait(60)
    deadline = time.monotonic() + 60
    while env["target"].remote_imports.find(listening.token).state != "receiving":
        assert time.monotonic() < deadline, "the stream never began"
        time.sleep(0.05)
    env["target"].remote_imports.find(listening.token).abort("the target node stops")
    go_on.set()
    sender.join(120)
    assert outcome and isinstance(outcome[0], httpx.RemoteProtocolError), outcome
    progress = env["target"].remote_imports.find(listening.token).progress()
    assert progress.state == "failed" and progress.error and "\n" not in progress.error
