"""etcd's history kept short (`core.etcd_history`) against a real etcd at its defaults: the
compactor drops only revisions older than what it keeps, the stores' readers (also one in
another process that follows by the objects changed) still read the current config, and the
database stops growing with every new generation of the config."""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Iterator

import pytest

from herder.core import etcd, etcd_history, model
from herder.core.store_etcd import EtcdStore
from tests.conftest import build_config
from tests.ha.test_etcd import ETCD, EtcdCluster

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD), reason="etcd is not installed")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[etcd.EtcdClient]:
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"), size=1)
    try:
        cluster.start_all()
        with etcd.EtcdClient(cluster.client_urls) as connected:
            yield connected
    finally:
        cluster.stop_all()


def test_due_is_the_newest_mark_old_enough() -> None:
    marks = deque([(0.0, 10), (60.0, 20), (120.0, 30)])
    assert etcd_history.due(marks, 100.0, 600.0) is None
    assert list(marks) == [(0.0, 10), (60.0, 20), (120.0, 30)]
    assert etcd_history.due(marks, 660.0, 600.0) == 20
    assert list(marks) == [(120.0, 30)]
    assert etcd_history.due(deque(), 1e9, 600.0) is None


def tag(store: EtcdStore, name: str) -> None:
    with store.update() as config:
        config.instances[sorted(config.instances)[0]].tags.append(name)


def test_compaction_keeps_the_history_asked_and_the_config(client: etcd.EtcdClient) -> None:
    store = EtcdStore(client, "hist")
    store.replace(build_config(nodes=4, drbd_instances=6, plain_instances=6))
    follower = EtcdStore(client, "hist")  # another process's reader, following changes
    follower.snapshot()
    compactor = etcd_history.HistoryCompactor(client, store.key, keep=100.0)
    assert compactor.step(0.0) is None
    marked = compactor.marks[0][1]
    for number in range(3):
        tag(store, f"before{number}")
    assert compactor.step(50.0) is None  # nothing is 100 s old yet
    client.range(store.key, revision=marked)  # the history is all there
    for number in range(3):
        tag(store, f"after{number}")
    assert compactor.step(100.0) == marked
    with pytest.raises(etcd.EtcdError, match="compacted"):
        client.range(store.key, revision=marked - 1)
    client.range(store.key, revision=marked)  # kept from the compacted revision on
    assert compactor.step(100.0) is None  # the next mark is not old enough
    # both readers read the current config: the follower's last read is older than the
    # compaction (it follows or reads the whole config again, whichever it can)
    expected = model.encode(store.load())
    assert model.encode(EtcdStore(client, "hist").load()) == expected
    assert model.encode(follower.snapshot()) == expected
    first = sorted(follower.snapshot().instances)[0]
    assert follower.snapshot().instances[first].tags[-1] == "after2"


def db_in_use(client: etcd.EtcdClient) -> int:
    return int(client.call("/v3/maintenance/status", {}).get("dbSizeInUse", 0))


def test_new_generations_stop_growing_the_database(client: etcd.EtcdClient) -> None:
    """Each import writes the whole config again under a new generation: without compaction
    every one stays in etcd's history; with the compactor keeping none, the database in use
    stays about one config's size."""
    config = build_config(nodes=20, drbd_instances=150, plain_instances=150)
    for number, inst in enumerate(config.instances.values()):  # instances of some weight
        inst.tags = [f"t{number}-{tag}-" + "x" * 90 for tag in range(30)]
    store = EtcdStore(client, "gens")
    size = len(model.encode(config))
    store.replace(config)
    start = db_in_use(client)
    for _ in range(6):
        store.replace(config)
    grown = db_in_use(client) - start
    assert grown > 4 * size  # every generation is still there

    compactor = etcd_history.HistoryCompactor(client, store.key, keep=0.0)
    for _ in range(6):
        store.replace(config)
        compactor.step(time.monotonic())
    compactor.step(time.monotonic())
    deadline = time.monotonic() + 60  # etcd frees the compacted pages in the background
    while db_in_use(client) - start > 2 * size and time.monotonic() < deadline:
        time.sleep(0.5)
    assert db_in_use(client) - start <= 2 * size
    assert model.encode(EtcdStore(client, "gens").load()) == model.encode(store.load())


def test_the_masters_loop_compacts_until_stopped(client: etcd.EtcdClient) -> None:
    store = EtcdStore(client, "loop")
    store.replace(build_config(nodes=2, plain_instances=2))
    clock = iter(float(n) for n in range(1000))
    compactor = etcd_history.HistoryCompactor(client, store.key, keep=2.0)

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(etcd_history.keep_short(
            compactor, lambda: next(clock), stop, every=0.05))
        for number in range(6):
            await asyncio.to_thread(tag, store, f"t{number}")
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.wait_for(task, 10)

    first = client.revision(store.key)
    asyncio.run(run())
    with pytest.raises(etcd.EtcdError, match="compacted"):
        client.range(store.key, revision=first)
