"""maintd's start on the etcd backend (`maintd.startup`, `maintd.etcd_master`): the edge of
`--local-dir` and the node names the master lease may carry."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.core.errors import HerderError
from herder.maintd.etcd_master import same_node
from herder.maintd.settings import MaintdSettings
from herder.maintd.startup import config_store


def test_local_dir_is_refused_for_a_config_file(tmp_path: Path) -> None:
    settings = MaintdSettings(config_path=tmp_path / "config.json", local_dir=tmp_path)
    with pytest.raises(HerderError, match=r"^--local-dir is for a config in etcd"):
        config_store(settings)


def test_local_dir_names_the_etcd_stores_secrets(tmp_path: Path) -> None:
    store = config_store(MaintdSettings(config_path="etcd://127.0.0.1:2379/prod",
                                        local_dir=tmp_path))  # opened, not yet asked
    assert store.directory == tmp_path


def test_the_lease_holder_is_this_node_by_its_fqdn_or_short_name() -> None:
    assert same_node("node1.example.com", "node1.example.com")
    assert same_node("node1", "node1.example.com")
    assert same_node("node1.example.com", "node1")
    assert not same_node("node2.example.com", "node1.example.com")
    assert not same_node("node10", "node1")
