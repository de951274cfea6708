"""The etcd backend against a real etcd with TLS client certificates and authentication.

One 3-member etcd per module (`--client-cert-auth`, the members' certificates from a test CA,
simple tokens that expire after 2 s of disuse), set up by `herder etcd setup` as an operator
would: herder's role may use `/herder/prod/` only, its user has that role only, root is the
administrator's. Then the config store, the master lease and the job queue work over it, end to
end; a client without a certificate, with a wrong CA, with a certificate of another CA or with
wrong credentials is refused in one line; the herder user cannot read or write outside its prefix.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from herder.core import etcd, etcd_history, etcd_settings
from herder.core.errors import StoreError
from herder.core.fence import Fence
from herder.core.rapi import RapiClient
from herder.core.store import FileStore, open_store
from herder.core.store_etcd import EtcdStore, open_client
from herder.masterd.jobs.queue import Job, OpStatus, QueuedOpCode, timestamp
from herder.masterd.jobs.store_etcd import EtcdJobStorage
from herder.masterd.lease import MasterLease
from tests.conftest import build_config
from tests.ha.etcd_pki import EtcdPki, make_pki, write_client_settings
from tests.ha.test_etcd import ETCD, REPO, EtcdCluster
from tests.ha.test_etcd_masterd import Masterd
from tests.system.masterd_fixture import make_cluster

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD), reason="etcd is not installed")

CLUSTER = "prod"
USER = "herder-prod"
TOKEN_TTL = 2  # etcd's --auth-token-ttl: a simple token dies after this many idle seconds


@dataclass
class Secured:
    etcd: EtcdCluster
    pki: EtcdPki
    location: str
    herder_settings: Path  # herder's client settings file
    root_settings: Path  # the administrator's
    setup_output: str
    directory: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "HERDER_CONFIG": self.location,
                etcd_settings.ENVIRONMENT: str(self.herder_settings), **extra}

    def herder(self, *args: str, settings: Path | None = None,
               ) -> subprocess.CompletedProcess[str]:
        env = self.env()
        if settings is not None:
            env[etcd_settings.ENVIRONMENT] = str(settings)
        return subprocess.run([sys.executable, "-m", "herder.cli.main", *args], env=env,
                              cwd=REPO, capture_output=True, text=True, timeout=60)

    def herder_client(self, **options: float) -> etcd.EtcdClient:
        return open_client(self.location, client_settings=self.herder_settings, **options)[0]

    def root_client(self) -> etcd.EtcdClient:
        return etcd_settings.client(self.etcd.client_urls, self.root_settings)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("etcd-tls")
    pki = make_pki(base / "pki")
    (base / "etcd").mkdir()
    cluster = EtcdCluster(base / "etcd", pki=pki,
                          extra_args=["--auth-token-ttl", str(TOKEN_TTL)])
    try:
        cluster.start_all()
        location = f"etcds://{cluster.hostports}/{CLUSTER}"
        herder_settings = write_client_settings(base / "herder.toml", pki, pki.herder, USER,
                                                "herder-secret")
        root_settings = write_client_settings(base / "root.toml", pki, pki.root, "root",
                                              "root-secret")
        secured = Secured(cluster, pki, location, herder_settings, root_settings, "", base)
        done = secured.herder("etcd", "setup", "--admin", str(root_settings))
        assert done.returncode == 0, done.stderr
        secured.setup_output = done.stdout
        yield secured
    finally:
        cluster.stop_all()


# --- the setup --------------------------------------------------------------------------------


def test_setup_makes_a_confined_role_and_user(secured: Secured) -> None:
    assert secured.setup_output.splitlines() == [
        "created etcd user root",
        "granted role root to user root",
        f"created etcd role {USER}",
        f"granted role {USER} read-write on /herder/{CLUSTER}/*",
        f"created etcd user {USER}",
        f"granted role {USER} to user {USER}",
        "turned etcd's authentication on",
        f"etcd user {USER} may use /herder/{CLUSTER}/ (3 endpoint(s), TLS with client "
        "certificates)",
    ]
    with secured.root_client() as root:
        perms = root.call("/v3/auth/role/get", {"role": USER})["perm"]
        assert perms == [{"permType": "READWRITE", "key": etcd.b64(f"/herder/{CLUSTER}/"),
                          "range_end": etcd.b64(f"/herder/{CLUSTER}0")}]
        assert root.call("/v3/auth/user/get", {"name": USER})["roles"] == [USER]
        # drift: an extra permission and an extra role; a second run puts it back
        root.call("/v3/auth/role/grant", {"name": USER, "perm": {
            "permType": "READ", "key": etcd.b64("/elsewhere")}})
        root.call("/v3/auth/user/grant", {"user": USER, "role": "root"})
    again = secured.herder("etcd", "setup", "--admin", str(secured.root_settings))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[:3] == [
        f"revoked from role {USER} a permission outside /herder/{CLUSTER}/",
        f"set the password of etcd user {USER}",
        f"revoked role root from user {USER}",
    ]
    with secured.root_client() as root:
        assert len(root.call("/v3/auth/role/get", {"role": USER})["perm"]) == 1
        assert root.call("/v3/auth/user/get", {"name": USER})["roles"] == [USER]


def test_setup_refuses_root_as_herders_user(secured: Secured) -> None:
    done = secured.herder("etcd", "setup", "--admin", str(secured.root_settings),
                          "--client", str(secured.root_settings))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "herder: error: herder's etcd user must not be root: name another user in its client "
        "settings (root stays the administrator's)"]


# --- herder's work over TLS and authentication ------------------------------------------------


def test_store_lease_and_jobs_end_to_end(secured: Secured,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(etcd_settings.ENVIRONMENT, str(secured.herder_settings))
    store = open_store(secured.location)  # as every herder command opens it
    assert isinstance(store, EtcdStore) and store.location == secured.location
    assert all(url.startswith("https://") for url in store.client.endpoints)
    store.create(build_config())
    with store.update() as config:
        config.cluster.tags.append("over-tls")
    assert store.load().cluster.tags == ["over-tls"]

    client = store.client
    lease = MasterLease(client, CLUSTER, "node1.example.com", ttl=3).start()
    try:
        assert lease.wait_elected(10)
        fenced = EtcdStore(client, CLUSTER, fence=lease)
        with fenced.update() as config:
            config.cluster.tags.append("fenced")
        jobs = EtcdJobStorage(client, CLUSTER, fence=lease)
        def make(job_id: int) -> Job:
            return Job(id=job_id, received_timestamp=timestamp(), ops=[QueuedOpCode(
                input={"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["x"]},
                status=OpStatus.QUEUED)])

        first = jobs.add(1, make).id
        second = jobs.add(1, make).id
        assert second == first + 1
        loaded, highest = jobs.load()
        assert [job.id for job in loaded] == [first, second] and highest == second
        epoch = lease.epoch
        assert epoch is not None
    finally:
        lease.resign()
    # the same fencing as without TLS: the resigned master's writes are refused by etcd
    with pytest.raises(StoreError, match="node1.example.com is not the master"), \
            EtcdStore(client, CLUSTER, fence=Fence("node1.example.com", epoch)).update():
        pass
    with pytest.raises(StoreError, match="not the master"):
        EtcdJobStorage(client, CLUSTER, fence=Fence("node1.example.com", epoch)).add(1, make)
    assert store.load().cluster.tags == ["over-tls", "fenced"]


def test_cli_reads_the_config_over_tls(secured: Secured) -> None:
    if not EtcdStore(secured.herder_client(), CLUSTER).exists():
        EtcdStore(secured.herder_client(), CLUSTER).create(build_config())
    done = secured.herder("cluster", "info", "--json")
    assert done.returncode == 0, done.stderr
    assert '"cluster.example.com"' in done.stdout


def test_a_stale_token_is_replaced(secured: Secured) -> None:
    with secured.herder_client() as client:
        assert client.auth is not None
        client.get(f"/herder/{CLUSTER}/config")
        first = client.auth.token()
        assert first and client.auth.authentications == 1
        time.sleep(TOKEN_TTL + 1.5)  # etcd forgets a simple token unused for its TTL
        client.get(f"/herder/{CLUSTER}/config")  # refused once, then with a new token
        assert client.auth.authentications == 2 and client.auth.token() != first
        # a clone (the lease's, the RAPI cache's) shares the credentials and the token
        clone = client.clone(timeout=1, retry_for=2)
        clone.get(f"/herder/{CLUSTER}/config")
        assert client.auth.authentications == 2
        clone.close()


# --- confinement ------------------------------------------------------------------------------


def test_herder_user_stays_inside_its_prefix(secured: Secured) -> None:
    with secured.herder_client(retry_for=2) as client, secured.root_client() as root:
        root.put("/other/secret", "root's")
        root.put("/herder/other-cluster/config", "another cluster's")
        attempts = [
            lambda: client.get("/other/secret"),
            lambda: client.put("/other/secret", "mine"),
            lambda: client.get("/herder/other-cluster/config"),
            lambda: client.put("/herder/other-cluster/config", "mine"),
            lambda: client.range("/herder/", prefix=True),
            lambda: client.delete("/other/", prefix=True),
            lambda: client.txn([], [etcd.op_put("/other/secret", "mine")]),
            lambda: client.call("/v3/auth/user/list", {}),
        ]
        for attempt in attempts:
            with pytest.raises(etcd.EtcdError) as refused:
                attempt()
            assert f"permission denied for user '{USER}'" in str(refused.value)
            assert "\n" not in str(refused.value)
        kv = root.get("/other/secret")
        assert kv is not None and kv.value == b"root's"
        other = root.get("/herder/other-cluster/config")
        assert other is not None and other.value == b"another cluster's"
        client.put(f"/herder/{CLUSTER}/scratch", "ok")  # its own prefix: fine
        client.delete(f"/herder/{CLUSTER}/scratch")


# --- refusals, each one line ------------------------------------------------------------------


def refusal(secured: Secured, client: etcd.EtcdClient) -> str:
    with client, pytest.raises(etcd.EtcdError) as refused:
        client.get(f"/herder/{CLUSTER}/config")
    message = str(refused.value)
    assert "\n" not in message and "no member answered" not in message  # refused, not retried
    return message


def test_refused_clients(secured: Secured) -> None:
    pki = secured.pki
    urls = secured.etcd.client_urls
    good = etcd.EtcdAuth(USER, "herder-secret")
    no_cert = refusal(secured, etcd.EtcdClient(urls, tls=etcd.EtcdTls(pki.ca), auth=good))
    assert no_cert.startswith(f"etcd at {urls[0]}: TLS: the server refused this client (no "
                              "client certificate): ")
    wrong_ca = refusal(secured, etcd.EtcdClient(urls, tls=etcd.EtcdTls(
        pki.other_ca, pki.herder.cert, pki.herder.key), auth=good))
    assert wrong_ca.startswith(f"etcd at {urls[0]}: TLS: the server's certificate is not "
                               f"trusted with CA {pki.other_ca} (certificate verify failed: ")
    rogue = refusal(secured, etcd.EtcdClient(urls, tls=etcd.EtcdTls(
        pki.ca, pki.rogue.cert, pki.rogue.key), auth=good))
    assert rogue.startswith(f"etcd at {urls[0]}: TLS: the server refused this client "
                            f"(certificate {pki.rogue.cert}): ")
    tls = etcd.EtcdTls(pki.ca, pki.herder.cert, pki.herder.key)
    wrong_password = refusal(secured, etcd.EtcdClient(urls, tls=tls, auth=etcd.EtcdAuth(
        USER, "guess", source="/etc/herder/etcd/password")))
    assert wrong_password == (
        f"etcd at {urls[0]} refused user '{USER}': authentication failed, invalid user ID or "
        "password (password from /etc/herder/etcd/password)")
    unknown = refusal(secured, etcd.EtcdClient(urls, tls=tls, auth=etcd.EtcdAuth("nobody", "x")))
    assert unknown.startswith(f"etcd at {urls[0]} refused user 'nobody': authentication failed")
    anonymous = refusal(secured, etcd.EtcdClient(urls, tls=tls))
    assert anonymous == (f"etcd at {urls[0]} requires authentication and this client has no "
                         "user (an etcds:// location and its client settings file: docs/ha.md)")
    with_cn = refusal(secured, etcd.EtcdClient(urls, tls=etcd.EtcdTls(
        pki.ca, pki.with_cn.cert, pki.with_cn.key), auth=good))
    assert with_cn.startswith(f"etcd at {urls[0]} refuses client certificates that carry a "
                              "CommonName")


def test_cli_refusal_is_one_line(secured: Secured) -> None:
    wrong = secured.directory / "wrong.toml"
    write_client_settings(wrong, secured.pki, secured.pki.herder, USER, "not-the-password")
    done = secured.herder("cluster", "info", settings=wrong)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"herder: error: etcd at {secured.etcd.client_urls[0]} refused user '{USER}': "
        f"authentication failed, invalid user ID or password (password from "
        f"{wrong.with_suffix('.password')})"]


# --- masterd over TLS and authentication ------------------------------------------------------


@pytest.mark.slow
def test_masterd_elected_and_serving_over_tls(secured: Secured, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = make_cluster(tmp_path / "cluster").parent
    # a second cluster in the same etcd needs its own role (herder-prod may use /herder/prod/
    # only): this masterd's cluster gets a user of its own, made by the same setup
    settings = write_client_settings(tmp_path / "masterd.toml", secured.pki,
                                     secured.pki.herder, "herder-masterd", "masterd-secret")
    location = f"etcds://{secured.etcd.hostports}/masterd"
    done = subprocess.run(
        [sys.executable, "-m", "herder.cli.main", "etcd", "setup", "--admin",
         str(secured.root_settings), "--client", str(settings)],
        env=secured.env(HERDER_CONFIG=location), cwd=REPO, capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 0, done.stderr
    with open_client(location, client_settings=settings)[0] as client:
        EtcdStore(client, "masterd").create(FileStore(secrets / "config.json").load())
    monkeypatch.setenv(etcd_settings.ENVIRONMENT, str(settings))
    masterd = Masterd(location, secrets, "node1.example.com", "127.0.0.2")
    try:
        serving = masterd.serving(30)
        assert serving, f"masterd did not start: {''.join(masterd.log)}"
        rapi = RapiClient.for_herder_cluster(secrets, serving[1], timeout=10)
        job = rapi.add_cluster_tags(["over-tls"])
        assert rapi.wait_for_job(job, timeout=30)["status"] == "success"
        rapi.close()
        client, _ = open_client(location, client_settings=settings)
        with client:
            stored = EtcdStore(client, "masterd")
            assert stored.load().cluster.tags == ["over-tls"]
            keys = [kv.key.decode() for kv in client.range("/herder/masterd/jobs/",
                                                           prefix=True).kvs]
            assert keys == [f"/herder/masterd/jobs/{job}"]
            # this user is confined to its cluster's prefix too
            with pytest.raises(etcd.EtcdError, match="permission denied"):
                client.get(f"/herder/{CLUSTER}/config")
    finally:
        masterd.stop()
    assert masterd.proc.returncode == 0



def test_a_killed_member_is_passed_over(secured: Secured) -> None:
    """Over TLS as over plain HTTP: a dead member is member trouble, tried past (its token
    good on the others); only a refused handshake fails at once."""
    leader = secured.etcd.leader()
    if leader == 0:
        # the leader's death would start an election: on a loaded machine that can outlast the
        # token's 2 s TTL, and a token that simply expired says nothing about the others
        # honouring it. etcd's own leadership transfer (root only) moves it to member 1 first.
        status = httpx.post(secured.etcd.client_urls[1] + "/v3/maintenance/status", json={},
                            timeout=5, verify=secured.etcd.verify).json()
        with etcd_settings.client([secured.etcd.client_urls[leader]],
                                  secured.root_settings) as root:  # asked of the leader
            root.call("/v3/maintenance/transfer-leadership",
                      {"targetID": status["header"]["member_id"]})
        deadline = time.monotonic() + 20
        while secured.etcd.leader() != 1:
            assert time.monotonic() < deadline, "etcd did not move its leadership"
            time.sleep(0.1)
    with secured.herder_client() as client:
        client.put(f"/herder/{CLUSTER}/alive", "before")
        used = time.monotonic()
        secured.etcd.kill(0)  # the client's first endpoint, a follower
        try:
            client.put(f"/herder/{CLUSTER}/alive", "after")
            idle = time.monotonic() - used
            kv = client.get(f"/herder/{CLUSTER}/alive")
            assert kv is not None and kv.value == b"after"
            assert client.auth is not None
            # one token for both members; a second only if the first lay idle past its TTL
            # (a machine so loaded that the kill and the pass-over took that long)
            assert client.auth.authentications in ((1,) if idle < TOKEN_TTL else (1, 2)), idle
        finally:
            secured.etcd.start(0)
            secured.etcd.wait_healthy([0])
        client.delete(f"/herder/{CLUSTER}/alive")


def test_herders_user_may_compact_etcds_history(secured: Secured) -> None:
    """The elected masterd compacts etcd's history (core.etcd_history) as herder's confined
    user: the revision read from its own head key, the compaction allowed."""
    with secured.herder_client() as client:
        store = EtcdStore(client, CLUSTER)
        if not store.exists():
            store.create(build_config(nodes=2, plain_instances=1))
        compactor = etcd_history.HistoryCompactor(client, store.key, keep=1.0)
        assert compactor.step(0.0) is None
        marked = compactor.marks[0][1]
        with store.update() as config:
            config.cluster.tags.append("compact")
        assert compactor.step(5.0) == marked
        with pytest.raises(etcd.EtcdError, match="compacted"):
            client.range(store.key, revision=marked - 1)
        assert "compact" in store.load().cluster.tags
