"""Which master IP an etcd master brings up (`master_ip.floating_master_ip`), how the
takeover moves a master IP that is the master's own primary IP, and where noded keeps its
files on the etcd backend (`locations.local_config_path`), and that the master elected starts
its maintd once the master IP is up. The IP's move itself, on real
hosts, is tests/system/test_etcd_master_death_sim.py's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from herder.core import master_daemons
from herder.core.errors import HerderError
from herder.core.locations import DEFAULT_CONFIG_PATH, local_config_path
from herder.core.store import ConfigStore, FileStore
from herder.masterd import etcd_master, master_ip
from herder.masterd.etcd_master import candidacy_problem, take_over
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


class DaemonUtil:
    """What the elected masterd asked `herder daemon-util` on its host, in order (the
    supervisor's side is tests/ha/test_etcd_masterd.py's); the master IP's activation is
    refused `refusals` times (another host still answers for the address)."""

    def __init__(self, refusals: int = 0) -> None:
        self.calls: list[str] = []
        self.refusals = refusals

    def __call__(self, *args: str, timeout: float = 0) -> str:
        if args[0] == "activate-master-ip" and self.refusals:
            self.refusals -= 1
            self.calls.append("activate refused")
            raise HerderError("master IP address 192.0.2.2 is configured on another machine")
        self.calls.append(args[0])
        return "done"


def elected_with_floating_ip(store: FileStore) -> Elected:
    with store.update() as config:
        config.cluster.master_ip = "192.0.2.2"
        config.cluster.master_netdev = "br0"
        config.cluster.master_netmask = 24
    return Elected(NODE2, store)


def run_takeover_tasks(elected: Elected, wait: float, monkeypatch: pytest.MonkeyPatch,
                       util: DaemonUtil) -> None:
    """The master IP holder and maintd's start, as masterd runs them once elected."""
    monkeypatch.setattr(master_daemons, "daemon_util", util)
    monkeypatch.setattr(master_ip, "MASTER_IP_RETRY", 0.05)
    # this host plays the elected node's (its primary IP is a documentation address)
    monkeypatch.setattr(master_ip, "is_local_address", lambda ip: True)

    async def both() -> None:
        stop = asyncio.Event()
        holder = master_ip.MasterIpHolder(elected)
        await asyncio.gather(holder.hold(stop), etcd_master.start_maintd(NODE2, holder, wait))

    asyncio.run(both())


def test_maintd_starts_once_the_master_ip_is_up(store: FileStore,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """maintd listens on the master IP only when it is up as maintd starts: the old master's
    address refused twice, maintd still starts after the activation (CI saw `maintd status`
    at the master IP refused after a takeover: maintd had bound the primary IP)."""
    util = DaemonUtil(refusals=2)
    run_takeover_tasks(elected_with_floating_ip(store), 30.0, monkeypatch, util)
    assert util.calls == ["activate refused", "activate refused", "activate-master-ip",
                          "start-master"]


def test_maintd_starts_anyway_when_the_master_ip_stays_taken(
        store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    util = DaemonUtil(refusals=6)
    run_takeover_tasks(elected_with_floating_ip(store), 0.1, monkeypatch, util)
    assert "start-master" in util.calls
    assert util.calls.index("start-master") < util.calls.index("activate-master-ip")


def test_maintd_starts_at_once_without_a_floating_master_ip(
        store: FileStore, monkeypatch: pytest.MonkeyPatch) -> None:
    elected = Elected(NODE2, store)
    take_over(elected, epoch=1000)  # the master IP moves with the config: the node's own
    util = DaemonUtil()
    run_takeover_tasks(elected, 30.0, monkeypatch, util)
    assert util.calls == ["start-master"]


def test_a_deposed_master_starts_no_maintd(store: FileStore,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    elected = elected_with_floating_ip(store)
    elected.deposed = "the lease was lost"
    util = DaemonUtil()
    run_takeover_tasks(elected, 0.1, monkeypatch, util)
    assert util.calls == []


def test_a_node_that_is_no_master_candidate_does_not_take_over(store: FileStore) -> None:
    """Elected a moment after it was demoted (the standby reads its candidacy every second):
    the fenced write refuses, nothing changes."""
    with store.update() as config:
        (node2,) = (n for n in config.nodes.values() if n.name == NODE2)
        node2.master_candidate = False
    before = store.load()
    elected = Elected(NODE2, store)
    assert candidacy_problem(before, NODE2) == f"this node ({NODE2}) is not a master candidate"
    assert candidacy_problem(before, NODE1) is None  # the master
    assert candidacy_problem(before, "other.example.com") == \
        "this node (other.example.com) is not a node of the cluster"
    with pytest.raises(HerderError, match="is not a master candidate"):
        take_over(elected, epoch=1000)
    assert elected.became is None
    after = store.load()
    assert after.cluster.master_node == before.cluster.master_node
    assert after.serial_no == before.serial_no


@pytest.mark.parametrize("here", [True, False])
def test_a_standby_takes_down_a_master_ip_left_on_its_host(
        store: FileStore, monkeypatch: pytest.MonkeyPatch, here: bool) -> None:
    """A masterd that died as master (a crash: the simulated cluster saw a SIGSEGV right after
    a takeover) leaves the floating master IP up; restarted as a standby it takes it down
    before campaigning, else the elected master's activation is refused for as long as this
    host answers for the address. Not there: nothing is done."""
    elected = elected_with_floating_ip(store)
    util = DaemonUtil()
    monkeypatch.setattr(master_daemons, "daemon_util", util)
    monkeypatch.setattr(master_ip, "is_local_address", lambda ip: here and ip == "192.0.2.2")
    asyncio.run(master_ip.release_if_here(elected))
    assert util.calls == (["deactivate-master-ip"] if here else [])
