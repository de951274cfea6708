"""The loopback addresses each simulated-cluster test module publishes its cluster on
(127.0.0.N: the cluster, then one per node), in one table so that no two modules can collide.

xdist runs a whole module on one worker (`--dist loadfile`), so a module never meets itself:
each module needs one span of its own, and two modules running at once on two workers must not
share an address (tests/unit/test_sim_addresses.py checks the spans never overlap). 10-15 are
the peers' vcluster's and `make run`'s (`herder cluster simulate` by default)."""

from __future__ import annotations

# module -> (first address, how many: the cluster's one + one per node, or more)
BLOCKS: dict[str, tuple[int, int]] = {
    "hotplug": (16, 3),
    "node_failure": (20, 4),
    "console_browser": (24, 4),
    "console_streams": (28, 3),
    "simulated_cluster": (32, 5),
    "shared_ceph": (38, 1),  # tests/cephshare.py: the bare Ceph two modules share (no cluster)
    "trust_sim": (40, 4),
    "disk_data": (44, 4),
    "real_guests": (48, 3),
    "maintd_e2e": (52, 4),
    "node_join": (56, 6),
    "merge": (64, 6),  # two clusters of two nodes: 3 addresses each
    "redist": (72, 5),
    "instmon_e2e": (80, 4),
    "rbd_guests": (84, 3),
    "ha_failover": (88, 4),
    "chaos": (92, 4),
    "chaos_bench": (96, 4),  # bench/chaos.py: may run beside the suite
    "master_ip_restart": (100, 3),
    "move_cluster": (104, 6),  # two clusters of two nodes: 3 addresses each
    "debian_hosts": (110, 4),
    "upgrade_debian": (114, 3),  # test_upgrade_sim's cluster of Debian hosts
    "upgrade_etcd": (117, 4),  # test_upgrade_sim's cluster on the etcd store
    # free from 121 to 139
    "etcd_master_death": (140, 4),
    # free from 144 to 179
    "ttl_soak_bench": (180, 4),  # bench/etcd_ttl_soak.py: an hour beside the suite
    # free from 184 to 199
    "htools_rapi": (200, 4),
    # free from 204 to 243
    "upgrade": (244, 4),
    # free from 248 to 255
}


def first_ip(module: str) -> int:
    """The first address (127.0.0.N: N) of `module`'s span."""
    return BLOCKS[module][0]
