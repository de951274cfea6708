"""The etcd backend against a real 3-member etcd cluster on 127.0.0.1: client, store, lease."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from herder.core import etcd
from herder.core.errors import ConfigError, StoreError
from herder.core.fence import Fence
from herder.core.store import open_store
from herder.core.store_etcd import EtcdStore, parse_location
from herder.masterd.lease import MasterLease
from tests.conftest import build_config
from tests.ha.etcd_pki import EtcdPki

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD), reason="etcd is not installed")


def free_ports(count: int) -> list[int]:
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class EtcdCluster:
    """Three etcd members on free 127.0.0.1 ports; members can be killed and restarted.

    With `pki` the client port is HTTPS with client certificates (`--client-cert-auth`); the
    helpers' own requests (health, status) present the administrator's certificate. Peers talk
    plain HTTP on loopback (their TLS is etcd's business, not herder's)."""

    def __init__(self, base: Path, size: int = 3, *, pki: EtcdPki | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        ports = free_ports(2 * size)
        self.base = base
        self.names = [f"m{i}" for i in range(size)]
        scheme = "https" if pki is not None else "http"
        self.client_urls = [f"{scheme}://127.0.0.1:{ports[2 * i]}" for i in range(size)]
        self.peer_urls = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(size)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size
        self.initial = ",".join(f"{n}={u}" for n, u in zip(self.names, self.peer_urls, strict=True))
        self.extra_args = list(extra_args)
        self.verify: ssl.SSLContext | bool = True
        if pki is not None:
            self.extra_args += ["--cert-file", str(pki.server.cert), "--key-file",
                                str(pki.server.key), "--trusted-ca-file", str(pki.ca),
                                "--client-cert-auth"]
            self.verify = ssl.create_default_context(cafile=str(pki.ca))
            self.verify.load_cert_chain(str(pki.root.cert), str(pki.root.key))

    @property
    def hostports(self) -> str:
        return ",".join(u.split("://")[1] for u in self.client_urls)

    def start(self, i: int, state: str = "new") -> None:
        log = open(self.base / f"{self.names[i]}.log", "ab")  # noqa: SIM115
        self.procs[i] = subprocess.Popen(
            [
                ETCD, "--name", self.names[i], "--data-dir", str(self.base / self.names[i]),
                "--listen-client-urls", self.client_urls[i],
                "--advertise-client-urls", self.client_urls[i],
                "--listen-peer-urls", self.peer_urls[i],
                "--initial-advertise-peer-urls", self.peer_urls[i],
                "--initial-cluster", self.initial, "--initial-cluster-state", state,
                "--initial-cluster-token", f"herder-test-{os.getpid()}",
                # faster failure detection than the defaults (100 ms / 1000 ms); fine on loopback
                "--heartbeat-interval", "25", "--election-timeout", "250",
                *self.extra_args,
            ],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()

    def start_all(self) -> None:
        for i in range(len(self.names)):
            self.start(i)
        self.wait_healthy(range(len(self.names)))

    def wait_healthy(self, members: range | list[int], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        pending = set(members)
        while pending:
            for i in list(pending):
                try:
                    r = httpx.get(self.client_urls[i] + "/health", timeout=0.5,
                                  verify=self.verify)
                    if r.status_code == 200 and r.json().get("health") == "true":
                        pending.discard(i)
                except (httpx.HTTPError, ValueError):
                    pass
            if pending and time.monotonic() > deadline:
                logs = {n: (self.base / f"{n}.log").read_text()[-1500:] for n in self.names}
                raise RuntimeError(f"etcd members {sorted(pending)} not healthy: {logs}")
            time.sleep(0.1)

    def leader(self) -> int:
        """The index of the current raft leader."""
        ids = {}
        leader = None
        for i, url in enumerate(self.client_urls):
            if self.procs[i] is None:
                continue
            doc = httpx.post(url + "/v3/maintenance/status", json={}, timeout=1,
                             verify=self.verify).json()
            ids[doc["header"]["member_id"]] = i
            leader = doc["leader"]
        assert leader in ids
        return ids[leader]

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.procs[i] = None

    def stop_all(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc is not None:
                self.kill(i)


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()


@pytest.fixture
def client(etcd_cluster: EtcdCluster) -> Iterator[etcd.EtcdClient]:
    with etcd.EtcdClient(etcd_cluster.client_urls) as c:
        yield c


# --- the client -------------------------------------------------------------------------------


def test_client_crud_and_txn(client: etcd.EtcdClient) -> None:
    rev = client.put("/t/a", b"one")
    kv = client.get("/t/a")
    assert kv is not None and kv.value == b"one" and kv.mod_revision == rev
    assert kv.create_revision == rev and kv.version == 1
    client.put("/t/b", "two")
    assert [k.key for k in client.range("/t/", prefix=True).kvs] == [b"/t/a", b"/t/b"]
    assert client.get("/t/missing") is None

    ok = client.txn([etcd.cmp_mod("/t/a", rev)], [etcd.op_put("/t/a", "uno")],
                    [etcd.op_range("/t/a")])
    assert ok.succeeded
    stale = client.txn([etcd.cmp_mod("/t/a", rev)], [etcd.op_put("/t/a", "x")],
                       [etcd.op_range("/t/a")])
    assert not stale.succeeded and stale.ranges[0].kvs[0].value == b"uno"
    created = client.txn([etcd.cmp_create("/t/c", 0)], [etcd.op_put("/t/c", "c")])
    assert created.succeeded
    assert not client.txn([etcd.cmp_create("/t/c", 0)], [etcd.op_put("/t/c", "again")]).succeeded
    assert client.txn([etcd.cmp_value("/t/c", "c")], [etcd.op_delete("/t/c")]).succeeded
    assert client.get("/t/c") is None
    assert client.delete("/t/", prefix=True) == 2

    lease = client.lease_grant(5)
    assert lease.ttl == 5
    client.put("/t/leased", "v", lease=lease.id)
    assert client.lease_keepalive(lease.id).ttl == 5
    client.lease_revoke(lease.id)
    assert client.get("/t/leased") is None
    assert client.lease_keepalive(lease.id).ttl <= 0
    client.lease_revoke(lease.id)  # already gone: fine

    with pytest.raises(etcd.EtcdError, match="lease not found"):
        client.put("/t/x", "v", lease=12345)


def test_client_survives_a_killed_member(etcd_cluster: EtcdCluster) -> None:
    with etcd.EtcdClient(etcd_cluster.client_urls) as c:
        c.put("/k", "before")
        etcd_cluster.kill(0)  # the client's first endpoint
        c.put("/k", "after")
        kv = c.get("/k")
        assert kv is not None and kv.value == b"after"
    with etcd.EtcdClient([etcd_cluster.client_urls[0]], retry_for=0.5) as dead, \
            pytest.raises(etcd.EtcdError, match="no member answered"):
        dead.get("/k")


# --- the store --------------------------------------------------------------------------------


def test_store_create_load_update(client: etcd.EtcdClient) -> None:
    store = EtcdStore(client, "c1")
    assert not store.exists()
    with pytest.raises(StoreError, match="no cluster config"):
        store.load()
    config = build_config()
    store.create(config)
    assert store.exists()
    with pytest.raises(StoreError, match="already exists"):
        store.create(config)
    before = store.load()
    assert before.cluster.name == config.cluster.name

    with store.update() as cfg:
        cfg.cluster.tags.append("one")
    after = store.load()
    assert after.serial_no == before.serial_no + 1 and after.cluster.tags == ["one"]
    assert after.mtime > before.mtime

    with pytest.raises(RuntimeError), store.update() as cfg:  # the block fails
        cfg.cluster.tags.append("two")
        raise RuntimeError("boom")
    with pytest.raises(ConfigError, match="nothing written"), store.update() as cfg:
        cfg.cluster.master_netmask = "not a number"  # type: ignore[assignment]
    unchanged = store.load()
    assert unchanged.serial_no == after.serial_no and unchanged.cluster.tags == ["one"]
    assert client.get(store.lock_key) is None  # the lock is released every time
    # a second cluster in the same etcd is separate
    assert not EtcdStore(client, "c2").exists()


def test_lost_cas_writes_nothing(client: etcd.EtcdClient) -> None:
    store = EtcdStore(client, "c1")
    store.create(build_config())
    with pytest.raises(StoreError, match="concurrent write"), store.update() as cfg:
        cfg.cluster.tags.append("mine")
        client.put(store.key, client.get(store.key).value)  # type: ignore[union-attr]
    assert store.load().cluster.tags == []


def test_etcd_location_opens_an_etcd_store(
    etcd_cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    location = f"etcd://{etcd_cluster.hostports}/prod"
    store = open_store(location)
    assert isinstance(store, EtcdStore) and store.cluster == "prod"
    assert store.client.endpoints == etcd_cluster.client_urls
    store.create(build_config())
    monkeypatch.setenv("HERDER_CONFIG", location)
    from_env = open_store()
    assert isinstance(from_env, EtcdStore) and from_env.load().serial_no == 1
    assert parse_location("etcd://a:1/x") == (["http://a:1"], "x")
    for bad in ("etcd://a:1", "etcd:///x", "etcd://a:1/x/y"):
        with pytest.raises(StoreError, match="bad etcd location"):
            parse_location(bad)


WRITER = textwrap.dedent("""
    import sys
    from herder.core import etcd
    from herder.core.store_etcd import EtcdStore
    endpoints, who, count = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
    store = EtcdStore(etcd.EtcdClient(endpoints, retry_for=15), "cw", lock_wait=60)
    for i in range(count):
        with store.update() as cfg:
            cfg.cluster.tags.append(f"{who}-{i}")
""")


@pytest.mark.slow
def test_concurrent_writers_lose_nothing(etcd_cluster: EtcdCluster,
                                         client: etcd.EtcdClient) -> None:
    store = EtcdStore(client, "cw")
    store.create(build_config())
    initial = store.load().serial_no
    writers, count = 4, 25
    procs = []
    for w in range(writers):
        urls = etcd_cluster.client_urls[w % 3:] + etcd_cluster.client_urls[: w % 3]
        procs.append(subprocess.Popen(
            [sys.executable, "-c", WRITER, ",".join(urls), f"w{w}", str(count)], cwd=REPO,
        ))
    time.sleep(0.5)
    etcd_cluster.kill(etcd_cluster.leader())  # mid-run: the writers carry on
    for p in procs:
        assert p.wait(timeout=60) == 0
    final = store.load()
    assert final.serial_no == initial + writers * count
    expected = {f"w{w}-{i}" for w in range(writers) for i in range(count)}
    assert sorted(final.cluster.tags) == sorted(expected)  # every marker exactly once


# --- the master lease -------------------------------------------------------------------------


def test_lease_basics(client: etcd.EtcdClient) -> None:
    lost: list[str] = []
    a = MasterLease(client, "lc", "A", ttl=3, on_lost=lost.append).start()
    assert a.wait_elected(5)
    assert a.is_master() and a.epoch is not None
    b = MasterLease(client, "lc", "B", ttl=3).start()
    assert not b.wait_elected(1.5)  # A renews; B waits
    assert b.current_master() == ("A", a.epoch)
    epoch_a = a.epoch
    a.resign()
    assert not a.is_master() and lost == []  # resigning is not losing
    assert b.wait_elected(10)  # promptly in practice; room for a loaded machine
    assert b.epoch is not None and b.epoch > epoch_a
    # somebody else takes the key away: B notices and stops claiming
    client.delete(b.key)
    deadline = time.monotonic() + 10  # B looks every 0.1 s; room for a loaded machine
    while b.is_master() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not b.is_master() and b.lost_reason and "no longer" in b.lost_reason
    b.resign()


def test_a_kept_lease_is_held_on_by_the_next_masterd_of_the_node(client: etcd.EtcdClient) -> None:
    """A restart in place (`cluster upgrade`'s switch of the master's masterd): the stopping
    masterd keeps its lease, the next one of the same node holds it at the same epoch, and a
    standby candidate is not elected meanwhile; a lease kept by another node is not taken."""
    a = MasterLease(client, "kc", "A", ttl=4).start()
    assert a.wait_elected(5)
    epoch = a.epoch
    b = MasterLease(client, "kc", "B", ttl=4).start()  # a standby, campaigning
    kept = a.resign(keep=True)
    assert kept is not None and not a.is_master()
    assert b.current_master() == ("A", epoch)  # the key stays, attached to the kept lease
    # "B" cannot adopt A's lease: the key names A
    thief = MasterLease(client, "kc", "B2", ttl=4)
    thief.adopt = kept
    thief.start()
    again = MasterLease(client, "kc", "A", ttl=4)
    again.adopt = kept
    again.start()
    assert again.wait_elected(10)
    assert again.epoch == epoch and again.current_master() == ("A", epoch)
    # held on past the kept lease's first TTL: renewed by the new holder, nobody else elected
    time.sleep(6)
    assert again.is_master() and not b.is_master() and not thief.is_master()
    assert again.current_master() == ("A", epoch)
    # without the keep: revoked, a standby takes over
    assert again.resign() is None
    assert b.wait_elected(10) or thief.wait_elected(10)
    b.resign()
    thief.resign()


HOLDER = textwrap.dedent("""
    import sys, time
    from herder.core import etcd
    from herder.masterd.lease import MasterLease
    lease = MasterLease(etcd.EtcdClient(sys.argv[1].split(",")), "ha", "A", ttl=int(sys.argv[2]))
    lease.start()
    assert lease.wait_elected(10)
    print(lease.epoch, flush=True)
    while True:
        time.sleep(1)
""")


@pytest.mark.slow
def test_failover_kill_master_and_an_etcd_member(
    etcd_cluster: EtcdCluster, client: etcd.EtcdClient
) -> None:
    ttl = 3
    EtcdStore(client, "ha").create(build_config())
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, ",".join(etcd_cluster.client_urls), str(ttl)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        epoch_a = int(holder.stdout.readline())
        b = MasterLease(client, "ha", "B", ttl=ttl).start()
        assert not b.wait_elected(ttl)  # A holds the lease while it lives
        store_a = EtcdStore(client, "ha", fence=Fence("A", epoch_a))
        with store_a.update() as cfg:  # A is master: its fenced writes go through
            cfg.cluster.tags.append("from-A")
        serial = store_a.load().serial_no

        leader = etcd_cluster.leader()  # the hardest member to lose: the raft leader
        holder.send_signal(signal.SIGKILL)
        etcd_cluster.kill(leader)
        killed = time.monotonic()
        assert b.wait_elected(ttl + 5)
        took = (b.elected_at or 0) - killed
        print(f"new master elected {took:.2f} s after the kills (ttl {ttl} s)")
        assert took <= ttl + 2
        assert b.epoch is not None and b.epoch > epoch_a

        with pytest.raises(StoreError, match=rf"A is not the master \(epoch {epoch_a}\)"), \
                store_a.update() as cfg:  # the old master's write is refused
            cfg.cluster.tags.append("stale-A")
        store_b = EtcdStore(client, "ha", fence=b)
        assert store_b.load().serial_no == serial
        with store_b.update() as cfg:  # the cluster keeps working on two members
            cfg.cluster.tags.append("from-B")
        final = store_b.load()
        assert final.serial_no == serial + 1 and final.cluster.tags == ["from-A", "from-B"]
        b.resign()
        with pytest.raises(StoreError, match="B is not the master"), store_b.update():
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
