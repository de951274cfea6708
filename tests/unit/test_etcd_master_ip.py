"""Which master IP an etcd master brings up (`master_ip.floating_master_ip`), how the
takeover moves a master IP that is the master's own primary IP, and where noded keeps its
files on the etcd backend (`locations.local_config_path`). The IP's move itself, on real
hosts, is tests/system/test_etcd_master_death_sim.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.core.locations import DEFAULT_CONFIG_PATH, local_config_path
from herder.core.store import ConfigStore, FileStore
from herder.masterd.etcd_master import take_over
from herder.masterd.master_ip import floating_master_ip
from tests.system.masterd_fixture import make_cluster

NODE1, NODE2 = "node1.example.com", "node2.example.com"


class Elected:
    """What `take_over` asks of the masterd elected: its name, the store, becoming master."""

    def __init__(self, me: str, store: FileStore) -> None:
        self.me = me
        self.store: ConfigStore = store
        self.deposed: str | None = None
        self.became: tuple[str, int] | None = None

    def depose(self, reason: str) -> None:
        self.deposed = reason

    def become_master(self, node_uuid: str, epoch: int) -> dict[str, list[int]]:
        self.became = (node_uuid, epoch)
        return {}


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(make_cluster(tmp_path))


def test_a_floating_master_ip_is_brought_up_by_whoever_is_elected(store: FileStore) -> None:
    with store.update() as config:
        config.cluster.master_ip = "192.0.2.2"
        config.cluster.master_netdev = "br0"
        config.cluster.master_netmask = 24
    take_over(Elected(NODE2, store), epoch=1000)
    config = store.load()
    assert config.node_name(config.cluster.master_node) == NODE2
    assert config.cluster.master_ip == "192.0.2.2"  # floating: it stays the cluster's
    for node in (NODE1, NODE2):
        net = floating_master_ip(config, node)
        assert net is not None
        assert net.options() == ["--ip", "192.0.2.2", "--netmask", "24", "--netdev", "br0",
                                 "--family", "4"]


def test_a_master_ip_that_is_the_masters_primary_ip_moves_with_the_config(
        store: FileStore) -> None:
    config = store.load()
    old_master = config.nodes[config.cluster.master_node]
    assert config.cluster.master_ip == old_master.primary_ip
    assert floating_master_ip(config, NODE1) is None  # nothing to bring up: the node's own
    elected = Elected(NODE2, store)
    take_over(elected, epoch=1000)
    config = store.load()
    new_master = config.nodes[config.cluster.master_node]
    assert new_master.name == NODE2 and elected.became == (new_master.uuid, 1000)
    assert config.cluster.master_ip == new_master.primary_ip
    assert floating_master_ip(config, NODE2) is None


def test_noded_keeps_its_files_in_the_local_directory_on_etcd(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert local_config_path("etcds://10.0.0.1:2379/prod") == DEFAULT_CONFIG_PATH
    assert local_config_path("etcd://127.0.0.1:2379/test") == DEFAULT_CONFIG_PATH
    assert local_config_path("/srv/c/config.json") == Path("/srv/c/config.json")
    monkeypatch.setenv("HERDER_CONFIG", "etcds://10.0.0.1:2379/prod")
    assert local_config_path(None) == DEFAULT_CONFIG_PATH
    monkeypatch.setenv("HERDER_CONFIG", "/srv/c/config.json")
    assert local_config_path(None) == Path("/srv/c/config.json")
