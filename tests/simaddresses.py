"""The loopback addresses each simulated-cluster test module publishes its cluster on
(127.0.0.N: the cluster, then one per node), in one table so that no two modules can collide.

xdist runs a module on one worker (`--dist loadfile`), so two modules may run at once on two
workers: each module has a block of `SLOTS` spans, one per worker (modulo `SLOTS`), and the
blocks do not overlap (tests/unit/test_sim_addresses.py checks it). 10-13 are the peers'
vcluster's and 11-15 `make run`'s (`herder cluster simulate` by default)."""

from __future__ import annotations

import os

SLOTS = 4  # distinct spans per module: workers gw0..gw3 (gw4 shares gw0's, and so on)

# module -> (first address, addresses per worker: the cluster's one + one per node, or more)
BLOCKS: dict[str, tuple[int, int]] = {
    "node_failure": (20, 4),
    "console_browser": (36, 4),
    "console_streams": (52, 3),
    "simulated_cluster": (64, 5),
    "trust_sim": (84, 4),
    "disk_data": (100, 4),
    "real_guests": (116, 3),
    "maintd_e2e": (128, 4),
    "node_join": (144, 6),
    "merge": (168, 6),  # two clusters of two nodes: 3 addresses each
    "redist": (192, 5),
    "instmon_e2e": (212, 4),
    "rbd_guests": (228, 3),
    "ha_failover": (240, 4),
}


def worker_index() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def first_ip(module: str, worker: int | None = None) -> int:
    """The first address (127.0.0.N: N) of `module`'s span for this xdist worker."""
    start, span = BLOCKS[module]
    index = worker_index() if worker is None else worker
    return start + span * (index % SLOTS)
