"""masterd on the etcd backend: two real masterd processes, a real 3-member etcd cluster.

A is elected and serves RAPI; kill -9 A and the etcd raft leader; B (a standby until then) is
elected within the lease TTL + 2 s, takes over the config and the job queue, and serves; A's old
lease can no longer write; no config write is lost or applied twice.
"""

from __future__ import annotations

import functools
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from herder.core import etcd, supervise_control
from herder.core.errors import StoreError
from herder.core.fence import Fence, master_key
from herder.core.rapi import RapiClient, RapiError
from herder.core.store import FileStore
from herder.core.store_etcd import EtcdStore
from herder.core.supervise_control import DaemonStatus
from herder.masterd.daemon import EXIT_LEASE_LOST, MasterDaemon
from herder.masterd.jobs.queue import Job, OpStatus, QueuedOpCode, timestamp
from herder.masterd.jobs.store_etcd import EtcdJobStorage
from tests.ha.test_etcd import ETCD, EtcdCluster
from tests.system.masterd_fixture import make_cluster

pytestmark = [pytest.mark.skipif(not os.path.exists(ETCD), reason="etcd is not installed"),
              pytest.mark.slow]

TTL = 3
CLUSTER = "ha"
A, B = "node1.example.com", "node2.example.com"


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    (tmp_path / "etcd").mkdir()
    cluster = EtcdCluster(tmp_path / "etcd")
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()


class Masterd:
    """A `herder masterd` process on the etcd backend; its stderr lines, time-stamped."""

    def __init__(self, location: str, secrets: Path, node: str, bind: str,
                 ttl: int | None = TTL) -> None:
        """`ttl` None: no --lease-ttl (the cluster's setting)."""
        env = {**os.environ, "HERDER_CONFIG": location}
        self.node, self.bind = node, bind
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "herder.cli.main", "masterd", "--bind", bind, "--port", "0",
             "--run-dir", str(secrets / f"run-{node}"), "--node", node, "--local-dir",
             str(secrets), *(["--lease-ttl", str(ttl)] if ttl is not None else [])],
            stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put((time.monotonic(), line))

    def wait_for(self, pattern: str, timeout: float) -> tuple[float, re.Match[str]] | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                when, line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.log.append(line)
            match = re.search(pattern, line)
            if match:
                return when, match
        return None

    def serving(self, timeout: float) -> tuple[float, str] | None:
        got = self.wait_for(rf"serving RAPI on (https://{re.escape(self.bind)}:\d+)/", timeout)
        return (got[0], got[1].group(1)) if got else None

    def stop(self) -> None:
        terminate(self.proc, 10)


def terminate(proc: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tags_of(store: EtcdStore) -> tuple[int, list[str]]:
    config = store.load()
    return config.serial_no, list(config.cluster.tags)


def test_masterd_failover_on_etcd(tmp_path: Path, etcd_cluster: EtcdCluster) -> None:
    secrets = make_cluster(tmp_path / "cluster").parent  # hmac key, certificate, rapi_users
    config = FileStore(secrets / "config.json").load()
    client = etcd.EtcdClient(etcd_cluster.client_urls)
    store = EtcdStore(client, CLUSTER)  # an observer: reads, and writes nothing unfenced
    store.create(config)
    location = f"etcd://{etcd_cluster.hostports}/{CLUSTER}"

    masterd_a = Masterd(location, secrets, A, "127.0.0.2")
    masterd_b: Masterd | None = None
    clients: list[RapiClient] = []
    try:
        started = masterd_a.serving(30)
        assert started, f"A did not start: {''.join(masterd_a.log)}"
        url_a = started[1]
        epoch_a = config_epoch = store.load().cluster.master_epoch
        kv = client.get(master_key(CLUSTER))
        assert kv is not None and kv.value.decode() == A and kv.create_revision == epoch_a
        assert store.load().nodes[store.load().cluster.master_node].name == A
        serial_a0 = store.load().serial_no

        masterd_b = Masterd(location, secrets, B, "127.0.0.3")
        b_started = time.monotonic()
        assert masterd_b.wait_for("standby", 30), f"B: {''.join(masterd_b.log)}"
        assert masterd_b.serving(1.5) is None  # a standby serves no RAPI while A holds the lease

        rapi_a = RapiClient.for_herder_cluster(secrets, url_a, timeout=10)
        clients.append(rapi_a)
        job_a = rapi_a.add_cluster_tags(["from-a"])
        assert rapi_a.wait_for_job(job_a, timeout=30)["status"] == "success"
        serial_a1, tags = tags_of(store)
        assert tags == ["from-a"] and serial_a1 == serial_a0 + 1
        # A archives its finished job and drains the queue: both are the cluster's, in etcd
        assert rapi_a.archive_job(job_a) == (True, f"Job {job_a} archived")
        assert rapi_a.set_queue_drained(True)

        # a job A was running when it died (written with A's fence, as A's queue would)
        jobs_a = EtcdJobStorage(client, CLUSTER, fence=Fence(A, epoch_a))
        running_id = jobs_a.add(1, lambda job_id: Job(
            id=job_id, received_timestamp=timestamp(), ops=[QueuedOpCode(
                input={"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["never"]},
                status=OpStatus.RUNNING)])).id
        assert running_id > int(job_a)

        leader = etcd_cluster.leader()
        masterd_a.proc.send_signal(signal.SIGKILL)
        etcd_cluster.kill(leader)
        killed = time.monotonic()
        masterd_a.proc.wait(10)

        elected = masterd_b.wait_for(rf"master lease: {re.escape(B)} is master", TTL + 15)
        assert elected, f"B was not elected: {''.join(masterd_b.log)}"
        took_over = masterd_b.serving(10)
        assert took_over, f"B did not take over: {''.join(masterd_b.log)}"
        took, serving = elected[0] - killed, took_over[0] - killed
        print(f"B elected {took:.2f} s, serving RAPI {serving:.2f} s after the kills "
              f"(lease ttl {TTL} s)")
        assert took <= TTL + 2  # the acceptance bound
        assert serving <= TTL + 3  # takeover (fenced config write, queue recovery) included

        # B is the master: in etcd, in the config, with a newer epoch
        kv = client.get(master_key(CLUSTER))
        assert kv is not None and kv.value.decode() == B
        after = store.load()
        epoch_b = after.cluster.master_epoch
        assert epoch_b == kv.create_revision and epoch_b > epoch_a == config_epoch
        assert after.nodes[after.cluster.master_node].name == B
        assert after.serial_no == serial_a1 + 1 and after.cluster.tags == ["from-a"]

        rapi_b = RapiClient.for_herder_cluster(secrets, took_over[1], timeout=10)
        clients.append(rapi_b)
        # the nodes' liveness leases count from the takeover, not from B's start as a standby
        # (which heard no heartbeat): the dead A is unknown now, suspect only after a whole
        # failure time under B
        leases = rapi_b.get_herder("leases")
        since_elected, since_start = (time.monotonic() - elected[0],
                                      time.monotonic() - b_started)
        assert leases["masterd_age"] <= since_elected + 0.5 < since_start - 2, \
            (leases, since_elected, since_start)
        assert set(leases["nodes"]) >= {A, B}
        assert all(age <= leases["masterd_age"] for age in leases["nodes"].values()), leases
        # A's jobs are in B's queue: the archived one readable by id (and listed with the
        # archive only), the running one failed; the queue still drained
        assert rapi_b.get_job_status(job_a)["status"] == "success"
        assert int(job_a) not in rapi_b.get_jobs()
        assert int(job_a) in rapi_b.get_jobs(archived=True)
        failed = rapi_b.get_job_status(running_id)
        assert failed["status"] == "error"
        assert "master daemon stopped" in str(failed["opresult"])
        assert rapi_b.get_queue()["drained"]
        assert not rapi_b.set_queue_drained(False)

        # the cluster keeps working: a new job through B, with an id never used before
        job_b = rapi_b.add_cluster_tags(["from-b"])
        assert int(job_b) > running_id
        assert rapi_b.wait_for_job(job_b, timeout=30)["status"] == "success"
        serial_b, tags = tags_of(store)
        assert tags == ["from-a", "from-b"] and serial_b == serial_a1 + 2

        # A's old lease writes nothing: not the config, not a job, not a job id
        with pytest.raises(StoreError, match=rf"{A} is not the master"), \
                EtcdStore(client, CLUSTER, fence=Fence(A, epoch_a)).update() as stale:
            stale.cluster.tags.append("stale-a")
        with pytest.raises(StoreError, match=rf"{A} is not the master"):
            jobs_a.save(Job(id=running_id, received_timestamp=timestamp(), ops=[]))
        with pytest.raises(StoreError, match=rf"{A} is not the master"):
            jobs_a.add(1, lambda job_id: Job(id=job_id, received_timestamp=timestamp(), ops=[]))
        with pytest.raises(StoreError, match=rf"{A} is not the master"):
            jobs_a.archive([Job(id=int(job_b), received_timestamp=timestamp(), ops=[])])
        with pytest.raises(StoreError, match=rf"{A} is not the master"):
            jobs_a.set_drained(True)
        final = store.load()
        assert final.serial_no == serial_b and final.cluster.tags == ["from-a", "from-b"]
        assert rapi_b.get_job_status(running_id)["status"] == "error"  # untouched

        # a clean stop of B hands the lease back at once (SIGTERM: exit 0, lease revoked)
        masterd_b.stop()
        assert masterd_b.proc.returncode == 0
        assert client.get(master_key(CLUSTER)) is None
    finally:
        for rapi in clients:
            rapi.close()
        for daemon in (masterd_a, masterd_b):
            if daemon is not None:
                daemon.stop()
        client.close()


def granted_ttl(client: etcd.EtcdClient) -> int:
    """The TTL etcd granted the master key's lease (etcd's own record of it)."""
    kv = client.get(master_key(CLUSTER))
    assert kv is not None and kv.lease
    return int(client.call("/v3/lease/timetolive", {"ID": str(kv.lease)})["grantedTTL"])


def test_the_lease_ttl_is_the_clusters_setting(tmp_path: Path,
                                               etcd_cluster: EtcdCluster) -> None:
    """Without --lease-ttl masterd campaigns with the config's `master_lease_ttl`, which
    `cluster modify` (a job: validated by the LU) changes for the next election."""
    secrets = make_cluster(tmp_path / "cluster").parent
    config = FileStore(secrets / "config.json").load()
    config.cluster.master_lease_ttl = 4
    client = etcd.EtcdClient(etcd_cluster.client_urls)
    store = EtcdStore(client, CLUSTER)
    store.create(config)
    location = f"etcd://{etcd_cluster.hostports}/{CLUSTER}"
    masterd = Masterd(location, secrets, A, "127.0.0.2", ttl=None)
    try:
        started = masterd.serving(30)
        assert started, f"A did not start: {''.join(masterd.log)}"
        assert "(ttl 4 s)" in "".join(masterd.log)
        assert granted_ttl(client) == 4
        with RapiClient.for_herder_cluster(secrets, started[1], timeout=10) as rapi:
            with pytest.raises(RapiError, match="master_lease_ttl must be 2-3600") as refused:
                rapi.modify_cluster(master_lease_ttl=1)
            assert refused.value.status == 400
            job = rapi.modify_cluster(master_lease_ttl=6)
            assert rapi.wait_for_job(job, timeout=30)["status"] == "success"
        assert store.load().cluster.master_lease_ttl == 6
        assert granted_ttl(client) == 4  # the lease held keeps its TTL until the next election
        masterd.stop()
        masterd = Masterd(location, secrets, A, "127.0.0.2", ttl=None)
        assert masterd.serving(30), f"A did not start again: {''.join(masterd.log)}"
        assert granted_ttl(client) == 6
    finally:
        masterd.stop()
        client.close()


def test_masterd_exits_75_when_its_lease_is_taken(tmp_path: Path,
                                                   etcd_cluster: EtcdCluster) -> None:
    """Mastership lost (here: the master key deleted under it): exit code 75 at once, which
    its supervisor restarts (a standby again), unlike 11 ("not my role")."""
    secrets = make_cluster(tmp_path / "cluster").parent
    client = etcd.EtcdClient(etcd_cluster.client_urls)
    EtcdStore(client, CLUSTER).create(FileStore(secrets / "config.json").load())
    masterd_a = Masterd(f"etcd://{etcd_cluster.hostports}/{CLUSTER}", secrets, A, "127.0.0.2")
    try:
        assert masterd_a.serving(30), f"A did not start: {''.join(masterd_a.log)}"
        client.delete(master_key(CLUSTER))
        assert masterd_a.proc.wait(TTL + 10) == EXIT_LEASE_LOST == 75
    finally:
        masterd_a.stop()
        client.close()


def test_takeover_gives_the_node_calls_the_new_epoch(tmp_path: Path,
                                                     etcd_cluster: EtcdCluster) -> None:
    """An elected masterd's node calls carry the lease's epoch, so the nodes refuse the old
    master's from then on: the transport under the live cache's and the reachability record's
    wrappers gets it (it kept the epoch of masterd's start)."""
    from types import SimpleNamespace

    from herder.core import envelope
    from herder.core.cluster_secrets import SecretPaths
    from herder.core.noderpc import HttpNodeRpc
    from herder.core.reachability import Reachability, ReachabilityRpc
    from herder.masterd.etcd_master import take_over
    from herder.masterd.livecache import InvalidatingRpc, LiveCache

    secrets = make_cluster(tmp_path / "cluster").parent
    config = FileStore(secrets / "config.json").load()
    start_epoch = config.cluster.master_epoch
    store = EtcdStore(etcd.EtcdClient(etcd_cluster.client_urls), CLUSTER)
    store.create(config)
    transport = HttpNodeRpc(envelope.load_key(SecretPaths.beside(secrets / "config.json").hmac_key),
                            None, epoch=start_epoch)
    reachability = Reachability()
    recorded = ReachabilityRpc(transport, reachability)
    live = LiveCache(recorded, reachability=reachability)
    me = config.nodes[config.cluster.master_node].name
    recovered = {"requeued": [], "failed": [], "canceled": [], "finished": []}
    daemon = SimpleNamespace(
        store=store, me=me, epoch=start_epoch, master_uuid=None, node_rpc=transport,
        env=SimpleNamespace(rpc=InvalidatingRpc(recorded, live), locks=None),
        queue=SimpleNamespace(recover=lambda: recovered), recovered=None,
        rapi=SimpleNamespace(leases=None))
    # the daemon's own step once elected, on the attributes it uses
    daemon.become_master = functools.partial(MasterDaemon.become_master, daemon)
    lease_epoch = start_epoch + 41  # an etcd revision: larger than any epoch before it
    take_over(daemon, lease_epoch)
    assert store.load().cluster.master_epoch == lease_epoch == daemon.epoch
    assert transport.epoch == lease_epoch


class SupervisedNode:
    """A node's `herder supervise` (the supervisor of hosts without systemd) running its masterd
    on etcd at boot, and maintd only when asked (`daemon-util start-master`), as on a host."""

    def __init__(self, location: str, secrets: Path, node: str, bind: str) -> None:
        # a short directory: a unix socket path has at most 107 bytes
        self.directory = Path(tempfile.mkdtemp(prefix="hetcd-", dir="/tmp"))
        self.node, self.bind = node, bind
        self.socket = self.directory / "s.sock"
        self.masterd_port, self.maintd_port = free_port(bind), free_port(bind)
        common = f'HERDER_CONFIG = "{location}", HERDER_SUPERVISE_SOCKET = "{self.socket}"'
        settings = self.directory / "node.toml"
        settings.write_text(f"""
[supervise]
socket = "{self.socket}"
log_dir = "{self.directory}/log"
restart_delay = 0.5
restart_delay_max = 2.0
stop_timeout = 10.0

[daemons.masterd]
enabled = true
args = ["masterd", "--bind", "{bind}", "--port", "{self.masterd_port}", "--run-dir",
        "{self.directory}/run-masterd", "--node", "{node}", "--local-dir", "{secrets}",
        "--lease-ttl", "{TTL}"]
command = ["{sys.executable}", "-m", "herder.cli.main"]
environment = {{ {common} }}

[daemons.maintd]
args = ["--masterd", "https://{bind}:{self.masterd_port}", "maintd", "--node", "{node}",
        "--bind", "{bind}", "--port", "{self.maintd_port}", "--notify-port", "0",
        "--run-dir", "{self.directory}/run-maintd", "--local-dir", "{secrets}",
        "--no-watcher", "--no-node-recovery", "--poll-interval", "60"]
command = ["{sys.executable}", "-m", "herder.cli.main"]
environment = {{ {common} }}
""")
        with open(self.directory / "supervise.log", "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "herder.cli.main", "supervise", "--settings",
                 str(settings)], stdout=out, stderr=subprocess.STDOUT)

    def status(self, daemon: str) -> DaemonStatus:
        return supervise_control.request(self.socket, "status", [daemon], timeout=30).daemons[0]

    def running(self, daemon: str) -> bool:
        return self.socket.exists() and self.status(daemon).state == supervise_control.RUNNING

    def maintd_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.bind}:{self.maintd_port}/1/status",
                                        timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def log(self, daemon: str) -> str:
        path = self.directory / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        terminate(self.proc, 30)
        shutil.rmtree(self.directory, ignore_errors=True)


def free_port(bind: str) -> int:
    with socket.socket() as probe:
        probe.bind((bind, 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until `condition` held (AssertionError with `what` when it did not)."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"not within {timeout:g} s: {what}"
        time.sleep(0.1)
    return time.monotonic() - start


def lease_holder(client: etcd.EtcdClient) -> str | None:
    kv = client.get(master_key(CLUSTER))
    return None if kv is None else kv.value.decode()


def test_the_elected_master_runs_maintd(tmp_path: Path, etcd_cluster: EtcdCluster) -> None:
    """maintd runs where the master lease is: the masterd that wins the election starts its
    node's maintd (`daemon-util start-master`, a master-failover's path); the old master's
    maintd stops once etcd names another master; a masterd whose lease is taken stops its
    maintd before it exits 75. Two supervised nodes, real processes, a real etcd."""
    secrets = make_cluster(tmp_path / "cluster").parent
    client = etcd.EtcdClient(etcd_cluster.client_urls)
    EtcdStore(client, CLUSTER).create(FileStore(secrets / "config.json").load())
    location = f"etcd://{etcd_cluster.hostports}/{CLUSTER}"
    node_a = SupervisedNode(location, secrets, A, "127.0.0.2")
    node_b: SupervisedNode | None = None
    try:
        started = wait_until(lambda: node_a.maintd_answers(), 120,
                             f"A's maintd: {node_a.log('masterd')}{node_a.log('maintd')}")
        print(f"A elected, its maintd answering {started:.1f} s after its supervisor's start")
        assert lease_holder(client) == A
        node_b = SupervisedNode(location, secrets, B, "127.0.0.3")
        wait_until(lambda: "standby" in node_b.log("masterd"), 60, "B's masterd a standby")
        time.sleep(1.0)  # a standby starts no maintd
        assert not node_b.running("maintd") and not node_b.maintd_answers()

        # the master dies (kill -9: nothing of it gets to clean up); its supervisor restarts
        # it as a standby
        old_pid = node_a.status("masterd").pid
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)
        killed = time.monotonic()
        # A's supervisor restarts its masterd at once, and it campaigns beside B: when the old
        # lease expires either may win. A that wins it back is killed again (its new process,
        # never a standby), so that B's takeover is what the rest of this test watches.
        deadline = killed + TTL + 120
        while not (lease_holder(client) == B and node_b.maintd_answers()):
            assert time.monotonic() < deadline, \
                f"B's maintd: {node_b.log('masterd')}{node_b.log('maintd')}"
            pid = node_a.status("masterd").pid
            if lease_holder(client) == A and pid not in (None, old_pid) \
                    and f"master on etcd: {A} took over" in node_a.log("masterd").split(
                        "standby, campaigning")[-1]:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        took = time.monotonic() - killed
        assert lease_holder(client) == B
        wait_until(lambda: not node_a.running("maintd"), 15,
                   f"A's maintd stopping: {node_a.log('maintd')}")
        gone_after = time.monotonic() - killed
        print(f"B's maintd answering {took:.1f} s after the master's kill (lease ttl {TTL} s); "
              f"A's maintd gone after {gone_after:.1f} s")
        assert node_a.status("maintd").last_exit == 11  # "not my role": not restarted
        # A's maintd stops on its own check: it saw B as the master, or the lease free in the
        # moment between A's loss and B's win (both mean "not my role")
        stopped = node_a.log("maintd")
        assert "is not the master (node2.example.com" in stopped \
            or "etcd names no master (the master lease is free); stopping" in stopped, stopped
        wait_until(lambda: node_a.log("masterd").count("standby, campaigning") >= 2, 60,
                   f"A's masterd a standby again: {node_a.log('masterd')}")
        assert not node_a.running("maintd") and node_b.running("maintd")

        # B's lease taken from it: B's masterd stops its maintd and exits 75 (restarted as a
        # standby); whoever is elected next runs the only maintd
        b_masterd = node_b.status("masterd").pid
        client.delete(master_key(CLUSTER))
        wait_until(lambda: node_b.status("masterd").pid != b_masterd, TTL + 20,
                   f"B's masterd exiting: {node_b.log('masterd')}")
        assert node_b.status("masterd").last_exit == EXIT_LEASE_LOST
        assert "deposed: " in node_b.log("masterd") or \
            "is not the master" in node_b.log("maintd")
        nodes = {A: node_a, B: node_b}
        wait_until(lambda: lease_holder(client) in nodes, TTL + 20, "a new master elected")
        master = lease_holder(client)
        assert master is not None
        wait_until(lambda: nodes[master].maintd_answers(), 60,
                   f"the new master's maintd: {nodes[master].log('masterd')}")
        other = node_b if master == A else node_a
        wait_until(lambda: not other.running("maintd"), 15, "the other node's maintd gone")
        assert lease_holder(client) == master
    finally:
        for node in (node_a, node_b):
            if node is not None:
                node.stop()
        client.close()


def test_only_a_master_candidate_campaigns(tmp_path: Path, etcd_cluster: EtcdCluster) -> None:
    """As in Ganeti only a master candidate may become master: node3's masterd, not one,
    waits without campaigning even while there is no master at all; made a candidate in the
    config, it campaigns and takes over."""
    secrets = make_cluster(tmp_path / "cluster").parent
    config = FileStore(secrets / "config.json").load()
    (node3,) = (n for n in config.nodes.values() if n.name == "node3.example.com")
    node3.master_candidate = False
    client = etcd.EtcdClient(etcd_cluster.client_urls)
    store = EtcdStore(client, CLUSTER)
    store.create(config)
    masterd_c = Masterd(f"etcd://{etcd_cluster.hostports}/{CLUSTER}", secrets, node3.name,
                        "127.0.0.4")
    try:
        said = masterd_c.wait_for(r"standby, not campaigning \((.*)\) until it is one", 30)
        assert said is not None, "".join(masterd_c.log)
        assert said[1].group(1) == "this node (node3.example.com) is not a master candidate"
        # three lease TTLs with no master: it holds no master key, it serves nothing
        assert masterd_c.serving(3 * TTL) is None, "".join(masterd_c.log)
        assert client.get(master_key(CLUSTER)) is None
        assert masterd_c.proc.poll() is None
        with store.update() as changed:
            changed.nodes[node3.uuid].master_candidate = True
        assert masterd_c.serving(TTL + 15), "".join(masterd_c.log)
        kv = client.get(master_key(CLUSTER))
        assert kv is not None and kv.value.decode() == node3.name
        assert store.load().cluster.master_node == node3.uuid
    finally:
        masterd_c.stop()
        client.close()
