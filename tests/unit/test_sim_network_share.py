"""Two simulated clusters in one network (`cluster simulate --network`), started at once: the
addresses each picks are reserved from the moment it picks them (`_reserve_addresses`, before
its hosts and master IP are recorded anywhere else), and the shared /etc/hosts keeps the
clusters' names when hosts are added or removed (`HostSimulation.write_hosts`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from herder.sim import cluster
from herder.sim.host import HostSimulation


class Network:
    """What address picking reads of a simulation: its directory, its record (hosts and
    published ports) and its addresses."""

    def __init__(self, directory: Path, hosts: dict[str, str] | None = None) -> None:
        self.directory = directory
        self.record = SimpleNamespace(
            hosts={name: SimpleNamespace(address=ip) for name, ip in (hosts or {}).items()},
            published={})

    def address(self, host: int) -> str:
        return f"198.18.7.{host}"


def reserve(sim: Any, directory: Path, count: int) -> tuple[str, list[str]]:
    return cluster._reserve_addresses(sim, directory, count)


def test_clusters_picking_at_once_get_disjoint_addresses(tmp_path: Path) -> None:
    sim = Network(tmp_path)
    directories = [tmp_path / f"cluster{i}" for i in range(6)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        picked = list(pool.map(lambda d: reserve(sim, d, 2), directories))
    masters = [master for master, _ in picked]
    nodes = [ip for _, ips in picked for ip in ips]
    assert len(set(masters)) == 6 and len(set(nodes)) == 12
    assert not set(masters) & set(nodes)
    assert all(m.rsplit(".", 1)[1] in {str(i) for i in cluster.MASTER_SLOTS} for m in masters)


def test_a_recorded_host_and_a_reservation_are_both_taken(tmp_path: Path) -> None:
    sim = Network(tmp_path, {"node1.a.sim.herder.test": "198.18.7.11"})
    a = reserve(sim, tmp_path / "a", 1)
    b = reserve(sim, tmp_path / "b", 2)
    assert a == ("198.18.7.2", ["198.18.7.12"])
    assert b == ("198.18.7.3", ["198.18.7.13", "198.18.7.14"])


def test_released_addresses_are_free_again_and_a_restart_replaces_its_own(
        tmp_path: Path) -> None:
    sim = Network(tmp_path)
    a = reserve(sim, tmp_path / "a", 2)
    assert reserve(sim, tmp_path / "a", 2) == a  # the same cluster started again
    b = reserve(sim, tmp_path / "b", 1)
    assert b == ("198.18.7.3", ["198.18.7.13"])
    release: Any = cluster._release_addresses
    release(sim, tmp_path / "a")
    assert reserve(sim, tmp_path / "c", 2) == a


class HostsOnly(HostSimulation):
    """A simulation whose record holds only hosts (no registry): what write_hosts reads."""

    def __init__(self, directory: Path, hosts: dict[str, str]) -> None:
        self.directory = directory
        self.hosts_now = hosts

    @property
    def record(self) -> Any:
        return SimpleNamespace(hosts={n: SimpleNamespace(name=n, address=ip)
                                      for n, ip in self.hosts_now.items()})


def test_hosts_added_for_one_cluster_keep_the_clusters_names(tmp_path: Path) -> None:
    sim = HostsOnly(tmp_path, {"node1.a.sim.herder.test": "198.18.7.11"})
    sim.write_hosts([("198.18.7.2", ["cluster.a.sim.herder.test"])])
    # cluster B's hosts are added (add_hosts rewrites the file without names of its own)
    sim.hosts_now["node1.b.sim.herder.test"] = "198.18.7.12"
    sim.write_hosts()
    text = sim.hosts_file.read_text()
    assert "198.18.7.2\tcluster.a.sim.herder.test\n" in text
    assert "198.18.7.12\tnode1.b.sim.herder.test node1\n" in text
    sim.write_hosts([])  # the last cluster forgotten
    assert "cluster.a" not in sim.hosts_file.read_text()
