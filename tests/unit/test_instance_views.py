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
