"""A node's lease renewal is bound to that node (issue 29, the second round's item 4).

Before: masterd's heartbeat route took any body signed with the node-lease key, derived from
the cluster key every node holds, so any node (a removed one included) could keep a dead
node's lease alive and its guests from being recovered; its nonce cache (65,536 nonces over a
300 s window) could not hold the renewals of 1,000 nodes at one every 2 s. Now the master's
route and the candidates' (noded `POST /lease/NAME`) take a renewal only over TLS from a caller
showing NAME's own node certificate (the config's `node_certs`; the candidates' ssconf
`herder_node_certs`), with a counter above NAME's last one (one number a node).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from herder.core import node_certs, purpose_keys, rpcauth, serve, ssconf
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.rapi_users import UsersFile
from herder.core.store import ConfigCache, FileStore
from herder.instmon.sender import tls_context
from herder.masterd.leases import Leases
from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base
from herder.noded import server as noded_server
from herder.noded.node import Node, NodeSettings
from tests.conftest import build_config

from .serving import Served, serving

KEY = b"0123456789abcdef0123456789abcdef01234567\n"
NODES = ("node1.example.com", "node2.example.com", "node3.example.com")


@dataclass
class Pki:
    ca: Path
    pems: dict[str, Path]  # node name (or "removed", "stranger") -> its node.pem


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = tmp_path / "server.pem"
    ca.write_bytes(self_signed_certificate("cluster.example.com"))
    pems = {}
    for name in (*NODES, "removed"):
        pems[name] = tmp_path / f"{name}.pem"
        pems[name].write_bytes(node_certs.issue(ca.read_bytes(), name))
    pems["stranger"] = tmp_path / "stranger.pem"  # a certificate of another CA
    pems["stranger"].write_bytes(self_signed_certificate(NODES[1]))
    return Pki(ca, pems)


def beat(counter: int, node: str = NODES[1]) -> bytes:
    return rpcauth.sign_call(KEY, "node_lease", node, {"counter": counter},
                             purpose=purpose_keys.NODE_LEASE)


def post(base: str, path: str, pki: Pki, body: bytes, shown: str | None) -> httpx.Response:
    context = tls_context(pki.ca, client_cert=pki.pems[shown] if shown else None)
    with httpx.Client(verify=context, timeout=30) as http:
        return http.post(base + path, content=body)


@pytest.fixture
def masterd(tmp_path: Path, pki: Pki) -> Iterator[tuple[Served, rapi_base.RapiContext]]:
    """masterd's RAPI as it serves: the cluster CA asks for client certificates, the config
    lists every node's (not the removed node's)."""
    config = build_config(3)
    for node in config.nodes.values():
        config.cluster.node_certs[node.uuid] = node_certs.digest(pki.pems[node.name]
                                                                 .read_bytes())
    store = FileStore(tmp_path / "config.json")
    store.create(config)
    (tmp_path / "rapi_users").write_text("admin s3cret write\n")
    ctx = rapi_base.RapiContext(config=ConfigCache(store.path), queue=None,
                                users=UsersFile(tmp_path / "rapi_users"), store=store,
                                leases=Leases(lambda: [KEY]))
    tls = serve.server_tls(pki.ca, client_cas=[pki.ca], clients_optional=True)
    with serving(rapi_app.make_app(ctx), tls) as served:
        yield served, ctx


def test_masterd_takes_a_heartbeat_only_from_that_nodes_certificate(
        masterd: tuple[Served, rapi_base.RapiContext], pki: Pki) -> None:
    served, ctx = masterd
    assert served.secure is not None and ctx.leases is not None
    node2 = ctx.config().find_node(NODES[1])
    path = f"/2/herder/nodes/{NODES[1]}/heartbeat"
    before = ctx.leases.ages([node2.uuid])[node2.uuid]
    refusals = {
        "no certificate": (None, "node2.example.com's node certificate"),
        "another node's": (NODES[2], "is node node3.example.com's, not node2.example.com's"),
        "a removed node's": ("removed", "revoked or unknown"),
    }
    for case, (shown, said) in refusals.items():
        answer = post(served.secure, path, pki, beat(10), shown)
        assert answer.status_code == 403, (case, answer.text)
        assert said in answer.json()["explain"], (case, answer.text)
    with pytest.raises(httpx.HTTPError):  # another CA's: not even the handshake
        post(served.secure, path, pki, beat(10), "stranger")
    # over plain HTTP nothing is bound: refused while the cluster lists node certificates
    with httpx.Client(timeout=30) as http:
        assert http.post(served.plain + path, content=beat(10)).status_code == 403
    assert ctx.leases.ages([node2.uuid])[node2.uuid] >= before  # nothing was recorded
    assert len(ctx.leases.counters) == 0
    # the node's own certificate renews it ...
    answer = post(served.secure, path, pki, beat(10), NODES[1])
    assert answer.status_code == 200, answer.text
    assert ctx.leases.ages([node2.uuid])[node2.uuid] < 1.0
    # ... once per counter: the same body again, or an older one, is 409 with the last
    for body in (beat(10), beat(9)):
        answer = post(served.secure, path, pki, body, NODES[1])
        assert answer.status_code == 409, answer.text
        assert answer.json()["counter"] == 10
    assert post(served.secure, path, pki, beat(11), NODES[1]).status_code == 200
    # one number a node, whatever the rate
    assert len(ctx.leases.counters) == 1


def test_a_candidate_witnesses_a_renewal_only_from_that_nodes_certificate(
        tmp_path: Path, pki: Pki) -> None:
    daemon = Node(NodeSettings(
        node_name=NODES[0], state_dir=tmp_path / "state", run_dir=tmp_path / "run",
        hmac_key=KEY, libvirt_uri="test:///default", file_root=tmp_path / "root"))
    try:
        cluster = daemon.data_dir  # the ssconf files, under the test's file root
        cluster.mkdir(parents=True, exist_ok=True)
        ssconf.path("master_candidates", cluster).write_text("".join(f"{n}\n" for n in NODES))
        ssconf.path(node_certs.SSCONF_NAME, cluster).write_text(node_certs.format_list(
            (name, node_certs.digest(pki.pems[name].read_bytes())) for name in NODES))
        tls = serve.server_tls(pki.ca, client_cas=[pki.ca], clients_optional=True)
        with serving(noded_server.make_app(daemon), tls) as served:
            assert served.secure is not None
            path = f"/lease/{NODES[1]}"
            for shown in (NODES[2], "removed"):
                answer = post(served.secure, path, pki, beat(5), shown)
                assert answer.status_code == 403, (shown, answer.text)
            assert daemon.witness.age(NODES[1]) is None
            assert post(served.secure, path, pki, beat(5), NODES[1]).status_code == 200
            assert daemon.witness.age(NODES[1]) is not None
            answer = post(served.secure, path, pki, beat(5), NODES[1])
            assert answer.status_code == 409 and answer.json()["counter"] == 5
    finally:
        daemon.hv.close()


def test_a_node_whose_clock_went_back_counts_on_from_the_last_counter() -> None:
    clock = iter([1_000, 900, 901])
    source = rpcauth.CounterSource(clock=lambda: next(clock))
    counters = rpcauth.Counters()
    counters.admit("node2", source.next())  # 1000
    counters.admit("node2", source.next())  # max(1001, 900): the source never goes back
    with pytest.raises(rpcauth.StaleCounter) as refused:
        counters.admit("node2", 1001)
    restarted = rpcauth.CounterSource(clock=lambda: 500)  # a restart, the clock set back
    with pytest.raises(rpcauth.StaleCounter):
        counters.admit("node2", restarted.next())
    restarted.catch_up(refused.value.last)
    counters.admit("node2", restarted.next())
    for bad in (None, "7", -1, True, 1.5):
        with pytest.raises(rpcauth.SignatureError):
            counters.admit("node3", bad)
