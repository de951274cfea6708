"""Nodes masterd cannot reach, with real sockets (`core.reachability`): the live cache does
not call a node in back-off (connections counted at a real address whose "node daemon" drops
every connection), and a node's announcement (noded's `announce_once`, over HTTPS with the
cluster's certificate) makes masterd's RAPI mark it seen again. How promptly a returning node
gets its redistribution with real processes: tests/ha/test_redist.py on a simulated cluster."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.core import model, ssconf
from herder.core.cluster_secrets import self_signed_certificate
from herder.core.noderpc import HttpNodeRpc
from herder.core.rapi_users import UsersFile
from herder.core.reachability import Reachability, ReachabilityRpc
from herder.core.store import ConfigCache, FileStore
from herder.masterd.announce import Announcements
from herder.masterd.jobs.queue import JobQueue
from herder.masterd.livecache import LiveCache
from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base
from herder.noded import announce
from herder.noded.trust import NodeTrust
from tests.conftest import build_config
from tests.security.serving import serving

KEY = b"0123456789abcdef0123456789abcdef01234567\n"


class DroppingDaemon:
    """A listening socket that accepts each connection and closes it at once, counting them
    (a node daemon that is there but never answers)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def dropping() -> Iterator[DroppingDaemon]:
    daemon = DroppingDaemon()
    yield daemon
    daemon.close()


def test_the_live_cache_does_not_call_a_node_in_backoff(dropping) -> None:
    config = build_config(nodes=1, drbd_instances=0)
    node = next(iter(config.nodes.values()))
    node.primary_ip = "127.0.0.1"
    record = Reachability(base=30.0)
    transport = HttpNodeRpc(KEY, None, port=dropping.port, timeout=2.0, connect_timeout=2.0)
    cache = LiveCache(ReachabilityRpc(transport, record), timeout=2.0, reachability=record)
    try:
        first = cache.snapshot(config)
        assert first.info(node.uuid) is None and record.avoid(node.uuid) is not None
        assert dropping.connections == 1
        started = time.monotonic()
        for fresh in (False, True, True):
            live = cache.snapshot(config, fresh=fresh)
            assert (live.error(node.uuid) or "").startswith("node unreachable (since ")
        assert cache.refresh_due(config) == 0
        assert time.monotonic() - started < 1.0  # nobody waited for it
        time.sleep(0.2)
        assert dropping.connections == 1 and cache.calls == 1
    finally:
        cache.close()
        transport.close()


@pytest.fixture
def masterd_rapi(tmp_path: Path) -> Iterator[tuple[str, int, rapi_base.RapiContext, Path]]:
    """masterd's RAPI over HTTPS with the cluster's certificate: (address, port, context,
    the certificate file)."""
    directory = tmp_path / "master"
    directory.mkdir()
    store = FileStore(directory / "config.json")
    store.create(build_config(3))
    (directory / "rapi_users").write_text("admin pw write\n")
    certificate = directory / "server.pem"
    certificate.write_bytes(self_signed_certificate("cluster.example.com"))
    ctx = rapi_base.RapiContext(config=ConfigCache(store.path),
                                queue=JobQueue(directory / "queue", lambda ctx, op: None),
                                users=UsersFile(directory / "rapi_users"), store=store,
                                announce=Announcements(lambda: [KEY], Reachability()))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificate)
    with serving(rapi_app.make_app(ctx), tls) as served:
        assert served.secure is not None
        yield "127.0.0.1", int(served.secure.rsplit(":", 1)[1]), ctx, certificate


def node_dir(tmp_path: Path, certificate: Path, master_ip: str) -> NodeTrust:
    """A joined node's files: the cluster key and certificate, ssconf naming the master."""
    directory = tmp_path / "node2"
    directory.mkdir()
    (directory / "hmac.key").write_bytes(KEY)
    (directory / "server.pem").write_bytes(certificate.read_bytes())
    ssconf.path("master_ip", directory).write_text(f"{master_ip}\n")
    ssconf.path("master_node", directory).write_text("node1.example.com\n")
    return NodeTrust(directory)


def test_a_node_announcing_itself_is_seen_again_by_masterd(tmp_path, masterd_rapi) -> None:
    address, port, ctx, certificate = masterd_rapi
    assert ctx.announce is not None
    record = ctx.announce.reachability
    config: model.ConfigData = ctx.config()
    node2 = config.find_node("node2")
    record.failed(node2.uuid, "connection refused")
    trust = node_dir(tmp_path, certificate, address)
    url = announce.target(trust, node2.name, port)
    assert url == f"https://{address}:{port}/2/herder/nodes/{node2.name}/announce"
    # noded's task: it announces once it serves, and is done
    asyncio.run(asyncio.wait_for(announce.announce(trust, node2.name, asyncio.Event(), port),
                                 timeout=30))
    assert record.down(node2.uuid) is None
    # the master itself, and a node without the cluster key, announce nothing
    assert announce.target(trust, "node1.example.com", port) is None
    (trust.config_dir / "hmac.key").unlink()
    assert announce.target(trust, node2.name, port) is None
