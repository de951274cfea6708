"""A notification is bound to the node that sends it (issue 35 item 2).

Before: the notification token was derived from the cluster key, the same on every node, and
maintd believed the `hostname` in the body: with any node's key (a removed node's included) a
forged IO_ERROR for an instance on node2 made maintd drain node2 and fail the instance over.
Now instmon shows its node certificate on maintd's HTTPS port; maintd takes a notification
only from a listed node certificate (ssconf `herder_node_certs`: a removed node's is not),
whose node the body names, about an instance that node hosts (its primary node). The token
stays (masakari's header), but it proves nothing more than the cluster key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from herder.core import node_certs, notification, serve
from herder.core.cluster_secrets import self_signed_certificate
from herder.instmon.sender import tls_context
from herder.maintd import server as maintd_server
from herder.maintd.daemon import Maintd
from herder.maintd.rounds import Instance
from herder.maintd.state import FileState
from tests.maintd.fakes import FakeCluster, FakeSource

from .serving import Served, serving

KEY = b"k" * 40
U_A = "11111111-1111-4111-8111-111111111111"  # runs on node2
TOKEN = {notification.TOKEN_HEADER: notification.token_for(KEY)}


@dataclass
class Cluster:
    served: Served
    daemon: Maintd
    pems: dict[str, Path]  # node -> its node.pem (key and certificate)
    ca: Path


def io_error(hostname: str) -> bytes:
    return notification.vm_notification(hostname, U_A, "IO_ERROR", "IO_ERROR_REPORT").to_json()


@contextmanager
def maintd(tmp_path: Path, listed: dict[str, str] | None) -> Iterator[Cluster]:
    """maintd's HTTPS port as it starts (the cluster CA asks for client certificates), `a`
    running on node2 (DRBD secondary node3), `listed`: the node certificates (None: none)."""
    ca = tmp_path / "server.pem"
    if not ca.exists():
        ca.write_bytes(self_signed_certificate("cluster.example.com"))
    daemon = Maintd(FakeCluster(4, [Instance("a", "node2", ("node3",), uuid=U_A,
                                             disk_template="drbd")]),
                    FileState(tmp_path / "s.json"), [FakeSource()], interval=0.01,
                    watcher=False)
    settings = maintd_server.NotifySettings(lambda: KEY, senders=lambda: listed)
    tls = serve.server_tls(ca, client_cas=[ca], clients_optional=True)
    with serving(maintd_server.make_app(daemon, settings), tls) as served:
        yield Cluster(served, daemon, {}, ca)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    ca = tmp_path / "server.pem"
    ca.write_bytes(self_signed_certificate("cluster.example.com"))
    pems = {}
    for name in ("node2", "node3", "removed"):
        pems[name] = tmp_path / f"{name}.pem"
        pems[name].write_bytes(node_certs.issue(ca.read_bytes(), name))
    with maintd(tmp_path, {node_certs.digest(pems[n].read_bytes()): n
                           for n in ("node2", "node3")}) as served:
        served.pems.update(pems)
        yield served


def post(cluster: Cluster, body: bytes, shown: str | None) -> httpx.Response:
    context = tls_context(cluster.ca, client_cert=cluster.pems[shown] if shown else None)
    assert cluster.served.secure is not None
    with httpx.Client(verify=context, timeout=30) as http:
        return http.post(cluster.served.secure + "/1/notifications", content=body,
                         headers={**TOKEN, "Content-Type": "application/json"})


def test_only_the_node_that_hosts_an_instance_reports_it(cluster: Cluster) -> None:
    refusals = {
        "another node's name": (io_error("node2"), "node3", 403, "node3"),
        "a removed node": (io_error("removed"), "removed", 403, "revoked or unknown"),
        "no certificate": (io_error("node2"), None, 403, "node certificate"),
        "not its instance": (io_error("node3"), "node3", 400, "not hosted by node3"),
    }
    for case, (body, shown, status, said) in refusals.items():
        answer = post(cluster, body, shown)
        assert answer.status_code == status, (case, answer.text)
        assert said in answer.json()["message"], (case, answer.text)
    assert cluster.daemon.state.incidents == [] and cluster.daemon.notifications() == []
    # a certificate of another CA does not even get through the handshake
    stranger = cluster.ca.parent / "stranger.pem"
    stranger.write_bytes(self_signed_certificate("node2"))
    cluster.pems["stranger"] = stranger
    with pytest.raises(httpx.HTTPError):
        post(cluster, io_error("node2"), "stranger")
    # the control: the instance's own node
    answer = post(cluster, io_error("node2"), "node2")
    assert answer.status_code == 202, answer.text
    assert answer.json()["notification"]["status"] == "new"
    (incident,) = cluster.daemon.state.incidents
    assert incident.instance == U_A


def test_a_cluster_without_node_certificates_keeps_the_token(tmp_path: Path) -> None:
    """A cluster whose master issued no node certificates (imported from Ganeti, until its
    renew-crypto) has no list: the token alone, as before, and nodes show no certificate."""
    with maintd(tmp_path, None) as cluster:
        answer = post(cluster, io_error("node2"), None)
        assert answer.status_code == 202, answer.text
        (incident,) = cluster.daemon.state.incidents
        assert incident.instance == U_A
