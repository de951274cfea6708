"""The bulk instance list's encoded views (masterd.views.InstanceViews) equal the views built
one by one, after changes of an instance, a node, the cluster and a removal."""

from __future__ import annotations

import json
from pathlib import Path

from herder.core.store import FileStore
from herder.masterd import views
from tests.conftest import build_config


def fresh(config) -> list:  # type: ignore[no-untyped-def]
    ordered = sorted(config.instances.values(), key=lambda i: i.name)
    return [json.loads(json.dumps(views.instance_view(config, i))) for i in ordered]


def cached(encoder: views.InstanceViews, config) -> list:  # type: ignore[no-untyped-def]
    ordered = sorted(config.instances.values(), key=lambda i: i.name)
    return json.loads(encoder.encode(config, ordered))


def test_encoded_views_follow_every_change(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "config.json")
    store.create(build_config(nodes=4, drbd_instances=3, plain_instances=2))
    encoder = views.InstanceViews()
    assert cached(encoder, store.snapshot()) == fresh(store.snapshot())
    with store.update() as config:
        config.find_instance("drbd1").beparams["vcpus"] = 3
    assert cached(encoder, store.snapshot()) == fresh(store.snapshot())
    assert [v["beparams"]["vcpus"] for v in cached(encoder, store.snapshot())
            if v["name"].startswith("drbd1")] == [3]
    with store.update() as config:
        config.find_node("node2").name = "renamed2.example.com"
    assert cached(encoder, store.snapshot()) == fresh(store.snapshot())
    with store.update() as config:
        config.cluster.beparams["maxmem"] = 2048
    after = cached(encoder, store.snapshot())
    assert after == fresh(store.snapshot()) and 2048 in {v["beparams"]["maxmem"] for v in after}
    with store.update() as config:
        del config.instances[config.find_instance("plain0").uuid]
    assert cached(encoder, store.snapshot()) == fresh(store.snapshot())


def test_the_kept_encodings_stay_within_their_bytes_and_the_answer_is_the_same(
        tmp_path: Path) -> None:
    """At most `max_bytes` of encodings are kept (masterd's memory after bulk lists is bounded
    whatever the cluster's size); the instances past it are encoded per answer, the same."""
    store = FileStore(tmp_path / "config.json")
    store.create(build_config(nodes=4, drbd_instances=6, plain_instances=4))
    unbounded = views.InstanceViews()
    whole = cached(unbounded, store.snapshot())
    one = len(views._ENCODE(views._instance_config_view(
        store.snapshot(), next(iter(store.snapshot().instances.values())))))
    assert unbounded.kept_bytes > 8 * one  # all 10 kept
    encoder = views.InstanceViews(max_bytes=3 * one + one // 2)
    for _ in range(3):
        assert cached(encoder, store.snapshot()) == whole == fresh(store.snapshot())
        assert 0 < encoder.kept_bytes <= encoder.max_bytes
        assert encoder.kept_bytes == sum(len(v[1]) for v in encoder._encoded.values())
    with store.update() as config:  # a kept instance's object replaced: its encoding follows
        config.find_instance("drbd0").beparams["vcpus"] = 5
    assert cached(encoder, store.snapshot()) == fresh(store.snapshot())
    assert encoder.kept_bytes == sum(len(v[1]) for v in encoder._encoded.values()) \
        <= encoder.max_bytes
