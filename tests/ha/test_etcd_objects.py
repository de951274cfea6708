"""The etcd store's objects layout against a real etcd at its default limits: every object under
its own key, one transaction per change, a document far beyond etcd's request limit imported
and read back, and changes interrupted by a killed member applied once or not at all."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.core import etcd, model
from herder.core.store_etcd import MAX_TXN_BYTES, EtcdStore
from tests.conftest import build_config
from tests.ha.test_etcd import ETCD, REPO, EtcdCluster

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD), reason="etcd is not installed")

ETCD_REQUEST_LIMIT = int(1.5 * 1024 * 1024)  # etcd's default --max-request-bytes


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()


def keys_under(client: etcd.EtcdClient, prefix: str) -> dict[bytes, etcd.KeyValue]:
    return {kv.key: kv for kv in client.range(prefix, prefix=True).kvs}


def test_a_cluster_past_the_request_limit_is_stored_object_by_object(
        etcd_cluster: EtcdCluster) -> None:
    config = build_config(nodes=40, drbd_instances=250, plain_instances=250)
    for number, inst in enumerate(config.instances.values()):  # instances of some weight
        inst.tags = [f"t{number}-{tag}-" + "x" * 90 for tag in range(50)]
    assert len(model.encode(config)) > 2 * ETCD_REQUEST_LIMIT  # one key could not hold it
    with etcd.EtcdClient(etcd_cluster.client_urls) as client:
        store = EtcdStore(client, "big")
        store.replace(config)
        stored = keys_under(client, "/herder/big/")
        assert max(len(kv.value) for kv in stored.values()) < MAX_TXN_BYTES
        assert model.encode(EtcdStore(client, "big").load()) == model.encode(store.load())
        assert store.load().instances.keys() == config.instances.keys()

        # one change: one transaction, touching the head and the changed object only
        inst = sorted(config.instances)[7]
        with store.update() as changed:
            changed.instances[inst].tags.append("one")
        after = keys_under(client, "/herder/big/")
        moved = {key for key, kv in after.items()
                 if key not in stored or kv.mod_revision != stored[key].mod_revision}
        assert moved == {b"/herder/big/config",
                         next(k for k in after if k.endswith(inst.encode()))}
        assert len({after[key].mod_revision for key in moved}) == 1  # the same transaction
        assert EtcdStore(client, "big").load().instances[inst].tags[-1] == "one"

        # an instance removed: its key goes in the change's transaction
        with store.update() as changed:
            del changed.instances[inst]
        assert not [k for k in keys_under(client, "/herder/big/") if k.endswith(inst.encode())]
        assert inst not in EtcdStore(client, "big").load().instances


def test_an_old_single_key_document_is_read_and_moved_to_objects(
        etcd_cluster: EtcdCluster) -> None:
    config = model.revalidate(build_config())
    with etcd.EtcdClient(etcd_cluster.client_urls) as client:
        client.put("/herder/old/config", model.encode(config))  # as herder wrote it before
        store = EtcdStore(client, "old")
        assert model.encode(store.load()) == model.encode(config)
        with store.update() as changed:
            changed.cluster.tags.append("moved")
        assert len(keys_under(client, "/herder/old/objects/")) == len(config.instances) + \
            len(config.nodes) + len(config.nodegroups)
        assert EtcdStore(client, "old").load().cluster.tags == ["moved"]


# each write's outcome on stdout: "ok MARKER"; "refused MARKER" for a StoreError that says
# nothing was written (the store lock's lease ran out while the killed member's cluster
# elected a leader, and another writer wrote meanwhile: the commit's compare refused it);
# "unknown MARKER" for one whose reply was lost ("maybe not written")
WRITER = textwrap.dedent("""
    import sys
    from herder.core import etcd
    from herder.core.errors import StoreError
    from herder.core.store_etcd import EtcdStore
    endpoints, who, count = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3])
    store = EtcdStore(etcd.EtcdClient(endpoints, retry_for=15), "objs", lock_wait=60)
    for i in range(count):
        marker = f"{who}-{i}"
        try:
            with store.update() as cfg:
                inst = sorted(cfg.instances)[i % len(cfg.instances)]
                cfg.instances[inst].tags.append(marker)
        except StoreError as err:
            outcome = "refused" if "nothing written" in str(err) else "unknown"
            print(outcome, marker, "#", err, flush=True)
        else:
            print("ok", marker, flush=True)
""")


@pytest.mark.slow
def test_object_changes_interrupted_by_a_killed_member_apply_once_or_not_at_all(
        etcd_cluster: EtcdCluster) -> None:
    with etcd.EtcdClient(etcd_cluster.client_urls) as client:
        store = EtcdStore(client, "objs")
        store.create(build_config(nodes=4, drbd_instances=4, plain_instances=2))
        initial = store.load().serial_no
        writers, count = 3, 20
        procs = []
        for w in range(writers):
            urls = etcd_cluster.client_urls[w % 3:] + etcd_cluster.client_urls[: w % 3]
            procs.append(subprocess.Popen(
                [sys.executable, "-c", WRITER, ",".join(urls), f"w{w}", str(count)],
                cwd=REPO, stdout=subprocess.PIPE, text=True))
        time.sleep(0.5)
        etcd_cluster.kill(etcd_cluster.leader())  # mid-run: the writers carry on
        outcomes: dict[str, set[str]] = {"ok": set(), "refused": set(), "unknown": set()}
        for proc in procs:
            out, _ = proc.communicate(timeout=90)
            assert proc.returncode == 0
            for line in out.splitlines():
                outcome, marker = line.split()[:2]
                outcomes[outcome].add(marker)
        assert sum(map(len, outcomes.values())) == writers * count  # every write said
        final = EtcdStore(client, "objs").load()
        markers = [t for inst in final.instances.values() for t in inst.tags]
        assert len(markers) == len(set(markers))  # none twice
        assert outcomes["ok"] <= set(markers)  # every acknowledged write is there...
        assert not outcomes["refused"] & set(markers)  # ... and no refused one
        assert set(markers) <= outcomes["ok"] | outcomes["unknown"]
        assert final.serial_no == initial + len(markers)  # one serial per applied change
        # the kill costs a few writes at most: the writers carry on past it
        assert len(outcomes["ok"]) >= writers * count - 2 * writers, outcomes


def test_a_reader_follows_another_writer_by_the_objects_changed(
        etcd_cluster: EtcdCluster) -> None:
    """confd, mond and a second masterd read the store in their own process: a write there
    costs them the objects it changed (range by modification revision), not the document."""
    with etcd.EtcdClient(etcd_cluster.client_urls) as client:
        writer = EtcdStore(client, "follow")
        writer.create(build_config(nodes=4, drbd_instances=3, plain_instances=3))
        reader = EtcdStore(client, "follow")
        before = reader.snapshot()
        drbd0, plain0 = before.find_instance("drbd0").uuid, before.find_instance("plain0").uuid
        with writer.update() as config:
            config.instances[drbd0].tags.append("changed")
            del config.instances[plain0]
            config.cluster.tags.append("cluster-wide")
            added = model.Instance(
                uuid=model.new_uuid(), name="added.example.com", primary_node=next(
                    iter(config.nodes)), os="debootstrap", hypervisor="kvm")
            config.instances[added.uuid] = added
        with writer.update() as config:
            config.find_node("node2").tags.append("second-write")
        after = reader.snapshot()
        assert model.encode(after) == model.encode(writer.load())
        assert plain0 not in after.instances and after.instances[added.uuid].name == \
            "added.example.com"
        untouched = [u for u in before.instances if u not in (drbd0, plain0)]
        assert untouched and all(after.instances[u] is before.instances[u] for u in untouched)
        assert after.index().comparable() == type(after.index()).build(after).comparable()
        # a new generation (an import) is read whole
        writer.replace(build_config(nodes=3, drbd_instances=1, plain_instances=1))
        assert model.encode(reader.snapshot()) == model.encode(writer.load())
