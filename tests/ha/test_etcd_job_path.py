"""What a one-object job costs on etcd, against a real single-member etcd: its round trips are
few, bounded and the same whatever the cluster's size; the writers' lock and the job ids keep
their guarantees (a dead writer frees the lock, a stale job serial never hands out an id twice).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herder.core import etcd
from herder.core.errors import StoreError
from herder.core.store_etcd import EtcdStore
from herder.masterd import locking
from herder.masterd.jobs.queue import Job, JobQueue, OpStatus, QueuedOpCode, timestamp
from herder.masterd.jobs.store_etcd import EtcdJobStorage
from herder.masterd.lease import MasterLease
from herder.masterd.lu.base import MasterEnv
from herder.masterd.processor import Processor
from tests.conftest import build_config
from tests.ha.test_etcd import ETCD, REPO, EtcdCluster

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD), reason="etcd is not installed")


@pytest.fixture
def one_member(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path, size=1)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()


class CountingClient(etcd.EtcdClient):
    """An etcd client that notes every request (path and body) while `counting`."""

    def __init__(self, endpoints: list[str]) -> None:
        super().__init__(endpoints)
        self.counting = False
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._noted = threading.Lock()

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.counting:
            with self._noted:
                self.calls.append((path, body))
        return super().call(path, body)


def one_tag_job_calls(cluster: EtcdCluster, name: str, instances: int) -> list[tuple[str, Any]]:
    """The etcd requests of one instance tag job (submitted to success) through the job queue,
    the real processor and the store, fenced by a master lease, as masterd runs it; after two
    jobs that warm the caches."""
    client = CountingClient(cluster.client_urls)
    lease = MasterLease(client, name, "node1.example.com", ttl=5).start()
    queue: JobQueue | None = None
    try:
        assert lease.wait_elected(10)
        store = EtcdStore(client, name, fence=lease)
        store.create(build_config(nodes=max(3, instances // 10), drbd_instances=instances // 2,
                                  plain_instances=instances - instances // 2))
        config = store.snapshot()
        env = MasterEnv(store=store, locks=locking.LockManager(
            nodes=config.nodes, nodegroups=config.nodegroups, instances=config.instances))
        jobs = EtcdJobStorage(client, name, fence=lease)
        queue = JobQueue(Path("/nonexistent"), Processor(env), workers=2, storage=jobs)
        queue.recover()
        queue.start()
        target = sorted(i.name for i in config.instances.values())[instances // 2]

        def tag(value: str) -> Job:
            job_id = queue.submit([{"OP_ID": "OP_TAGS_SET", "kind": "instance",
                                    "name": target, "tags": [value]}])
            return queue.wait(job_id, 30)

        for warm in ("a", "b"):
            assert tag(warm).status == OpStatus.SUCCESS
        client.counting = True
        job = tag("counted")
        client.counting = False
        assert job.status == OpStatus.SUCCESS
        # the job answered as a success is stored so, and so is its change
        stored = {j.id: j for j in jobs.load()[0]}
        assert stored[job.id].status == OpStatus.SUCCESS
        assert "counted" in EtcdStore(client, name).load().find_instance(target).tags
        assert client.get(store.lock_key) is None
        # the writer lease's renewals run beside the job, not on its path
        return [(path, body) for path, body in client.calls if path != "/v3/lease/keepalive"]
    finally:
        if queue is not None:
            queue.stop()
        lease.resign()
        client.close()


def test_a_one_object_job_costs_the_same_few_round_trips_at_any_size(
        one_member: EtcdCluster) -> None:
    small = one_tag_job_calls(one_member, "small", 10)
    large = one_tag_job_calls(one_member, "large", 300)
    for calls in (small, large):
        paths = Counter(path for path, _ in calls)
        # the job's submission (its id and itself), running, the config read after its
        # locks, the lock taken with the head read, the change written with the lock's
        # release, success: no lease granted or revoked per write, no extra head reads
        assert paths == {"/v3/kv/txn": 5, "/v3/kv/range": 1}, paths
        # nothing read by prefix (or counted) on the way: no read grows with the cluster
        assert not [body for path, body in calls
                    if path == "/v3/kv/range" and ("range_end" in body or "count_only" in body)]
    assert [path for path, _ in small] == [path for path, _ in large]


DEAD_WRITER = textwrap.dedent("""
    import os, signal, sys
    from herder.core import etcd
    from herder.core.store_etcd import EtcdStore
    store = EtcdStore(etcd.EtcdClient(sys.argv[1].split(",")), "dead", lock_ttl=2)
    with store.update() as config:  # a first write: the writer's lease is kept after it
        config.cluster.tags.append("first")
    with store.locked():
        print("locked", flush=True)
        signal.pause()
""")


def test_a_writer_killed_while_holding_the_lock_frees_it_within_its_ttl(
        one_member: EtcdCluster) -> None:
    with etcd.EtcdClient(one_member.client_urls) as client:
        EtcdStore(client, "dead").create(build_config())
        holder = subprocess.Popen([sys.executable, "-c", DEAD_WRITER, one_member.hostports],
                                  stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            waiting = EtcdStore(client, "dead", lock_wait=1)
            with pytest.raises(StoreError, match="holds the config lock"), waiting.update():
                pass  # the holder is alive (its lease renewed): the lock stays held
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(5)
            killed = time.monotonic()
            with EtcdStore(client, "dead", lock_wait=30).update() as config:
                config.cluster.tags.append("after")
            # the lease (ttl 2 s) went with the process; room for a loaded machine
            assert time.monotonic() - killed < 2 + 4
            assert EtcdStore(client, "dead").load().cluster.tags == ["first", "after"]
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()


def test_a_writer_whose_lease_expired_in_etcd_takes_a_new_one(
        one_member: EtcdCluster) -> None:
    with etcd.EtcdClient(one_member.client_urls) as client:
        store = EtcdStore(client, "expired")
        store.create(build_config())
        with store.update() as config:
            config.cluster.tags.append("one")
        # every lease gone behind the store's back (as after a pause longer than its ttl)
        for lease in client.call("/v3/lease/leases", {}).get("leases", []):
            client.lease_revoke(int(lease["ID"]))
        with store.update() as config:
            config.cluster.tags.append("two")
        assert store.load().cluster.tags == ["one", "two"]
        assert client.get(store.lock_key) is None


def test_job_ids_stay_unique_when_another_writer_moved_the_serial(
        one_member: EtcdCluster) -> None:
    """Each storage compares the serial as it last saw it; one that is behind learns the
    current serial from the refusal and takes the next id."""
    def make(job_id: int) -> Job:
        return Job(id=job_id, received_timestamp=timestamp(), ops=[QueuedOpCode(
            input={"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["x"]})])

    with etcd.EtcdClient(one_member.client_urls) as client:
        first, second = EtcdJobStorage(client, "ids"), EtcdJobStorage(client, "ids")
        taken = [first.add(1, make).id, second.add(1, make).id, first.add(1, make).id,
                 first.add(1, make).id, second.add(1, make).id, second.add(10, make).id,
                 first.add(1, make).id]
        assert taken == [1, 2, 3, 4, 5, 10, 11]
        loaded, highest = EtcdJobStorage(client, "ids").load()
        assert [job.id for job in loaded] == taken and highest == 11
