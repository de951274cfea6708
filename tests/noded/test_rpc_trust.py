"""Who may make a node act (issue 18, item 1): a real noded in-process, over HTTP and TLS.

A confd request captured off the wire was accepted as a node RPC (its envelope was signed with
the same key), and one signed call was accepted for any method, on any node, any number of
times. Now a call is signed with the node-RPC key for its method and node, with a nonce the
node never accepts twice; and noded's TLS port takes only clients showing a certificate of the
cluster."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import httpx
import pytest

from herder.core import confd, envelope, rpcauth
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.noderpc import HttpNodeRpc
from herder.core.rpcdefs import node_calls

from .noded_fixture import KEY, client_context, node, running_noded

NODE1, NODE2 = "node1.example.com", "node2.example.com"


def captured(method: str, target: str, args: dict[str, object] | None = None,
             key: bytes = KEY) -> bytes:
    """The body the master's client sends for a call (caught before it leaves)."""
    bodies: list[bytes] = []

    def catch(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(200, json={"result": None})

    rpc = HttpNodeRpc(key, None)
    rpc._http = httpx.Client(transport=httpx.MockTransport(catch))
    rpc.send(node(target), method, args or {})
    return bodies[0]


def test_a_confd_packet_is_no_node_rpc(tmp_path: Path) -> None:
    """The reproduction: a confd request (signed with the cluster key, as Ganeti's) without
    its "plj0" prefix, POSTed to node_powercycle, power-cycled the node."""
    _, packet = confd.build_request(confd.REQ_PING, None, KEY)
    assert packet.startswith(envelope.MAGIC)
    with running_noded(tmp_path) as noded:
        answer = noded.post("node_powercycle", packet[len(envelope.MAGIC):])
        assert answer.status_code == 403, answer.text
        assert noded.daemon.powercycled == []
        assert not (tmp_path / "state" / "powercycle.log").exists()
        # and the same packet is no harmless call either
        assert noded.post("ping", packet[len(envelope.MAGIC):]).status_code == 403


def test_a_signed_call_is_good_once_for_its_method_and_node(tmp_path: Path) -> None:
    with running_noded(tmp_path, NODE1) as noded:
        ping = captured("ping", NODE1)
        for_powercycle = noded.post("node_powercycle", ping)  # another method: refused
        assert for_powercycle.status_code == 403, for_powercycle.text
        assert "method" in for_powercycle.json()["error"]
        assert noded.daemon.powercycled == []
        elsewhere = noded.post("ping", captured("ping", NODE2))  # signed for another node
        assert elsewhere.status_code == 403 and "node" in elsewhere.json()["error"]
        first = noded.post("ping", ping)
        assert first.status_code == 200 and first.json()["result"]["node"] == NODE1
        again = noded.post("ping", ping)  # the same call replayed
        assert again.status_code == 403 and "replayed" in again.json()["error"]
        forged = noded.post("ping", captured("ping", NODE1, key=b"not the cluster key\n"))
        assert forged.status_code == 403 and "signature" in forged.json()["error"]
        # the master's client does all of it right
        rpc = HttpNodeRpc(KEY, None, port=int(noded.url.rsplit(":", 1)[1]))
        assert rpc.call(node(NODE1), node_calls.Ping()).node == NODE1
        assert rpc.call(node(NODE1), node_calls.MasterEpoch()).node == NODE1
        assert noded.daemon.powercycled == []


def test_old_calls_are_refused(tmp_path: Path) -> None:
    with running_noded(tmp_path, NODE1) as noded:
        stale = rpcauth.sign_call(KEY, "ping", NODE1, {}, now=time.time() - 3600)
        answer = noded.post("ping", stale)
        assert answer.status_code == 403 and "window" in answer.json()["error"]
        # one signed before this noded started may have been used by its earlier run
        before = rpcauth.sign_call(KEY, "ping", NODE1, {}, now=time.time() - 60)
        answer = noded.post("ping", before)
        assert answer.status_code == 403 and "started" in answer.json()["error"]
        assert noded.post("ping", captured("ping", NODE1)).status_code == 200


@pytest.fixture
def cluster_pem(tmp_path: Path) -> Path:
    path = tmp_path / "server.pem"
    path.write_bytes(self_signed_certificate("cluster.example.com"))
    return path


def test_noded_takes_only_clients_with_a_certificate_of_the_cluster(tmp_path: Path,
                                                                       cluster_pem: Path) -> None:
    stranger = tmp_path / "stranger.pem"
    stranger.write_bytes(self_signed_certificate("cluster.example.com"))
    with running_noded(tmp_path / "n1", NODE1, certificate=cluster_pem) as noded:
        port = int(noded.url.rsplit(":", 1)[1])
        # a well-signed call, without a client certificate or with a foreign one: no answer
        for shown in (None, stranger):
            with pytest.raises((httpx.HTTPError, ssl.SSLError)):
                noded.post("ping", captured("ping", NODE1),
                           verify=client_context(cluster_pem, shown))
        # the master's client shows the cluster certificate (server.pem: key and certificate)
        rpc = HttpNodeRpc(KEY, cluster_pem, port=port)
        assert rpc.call(node(NODE1), node_calls.Ping()).node == NODE1
        rpc.close()
        answer = noded.post("ping", captured("ping", NODE1),
                            verify=client_context(cluster_pem, cluster_pem))
        assert answer.status_code == 200
