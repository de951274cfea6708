"""The cluster's TCP/UDP port pool (Ganeti's `tcpudp_port_pool`, `highest_used_port` and
`ConfigWriter.AllocatePort`): the consoles' `network_port` of instances whose hypervisor needs
one (Ganeti's `HTS_REQ_PORT`: kvm, xen-hvm) and the DRBD disks' ports come from it.

As Ganeti: a port of the pool first (the pool holds ports released by removed instances and
those an administrator added), otherwise one above `highest_used_port`, which moves up; past
Ganeti's last DRBD port (14999) allocation stops with a clear error. Unlike Ganeti, a port some
instance already uses (a config imported or merged with duplicates) is never handed out again.
Pure functions on the config; callers run them inside `store.update()`.
"""

from __future__ import annotations

from herder.core import model
from herder.core.errors import OpPrereqError

HYPERVISORS_NEEDING_PORT = frozenset({"kvm", "xen-hvm"})  # Ganeti's HTS_REQ_PORT
FIRST_PORT = 11000  # Ganeti's FIRST_DRBD_PORT: a new cluster's highest_used_port + 1
LAST_PORT = 14999  # Ganeti's LAST_DRBD_PORT


def needs_port(hypervisor: str) -> bool:
    return hypervisor in HYPERVISORS_NEEDING_PORT


def ports_in_use(config: model.ConfigData) -> set[int]:
    """Every port an instance holds: consoles' network ports and DRBD disks' ports."""
    used: set[int] = set()
    for inst in config.instances.values():
        if inst.network_port is not None:
            used.add(inst.network_port)
        for disk in inst.disks:
            if isinstance(disk.logical_id, model.DrbdId):
                used.add(disk.logical_id.port)
    return used


def allocate(config: model.ConfigData, taken: set[int] | frozenset[int] = frozenset()) -> int:
    """A free port, taken out of the pool or above `highest_used_port` (moved up to it);
    `taken`: ports chosen in the same change but not yet in the config."""
    used = ports_in_use(config) | set(taken)
    pool = config.cluster.tcpudp_port_pool
    for port in sorted(pool):
        if port not in used:
            pool.remove(port)
            return port
    port = max(config.cluster.highest_used_port, FIRST_PORT - 1) + 1
    while port in used:
        port += 1
    if port > LAST_PORT:
        raise OpPrereqError(
            f"no free TCP/UDP port: the cluster's port pool has no free port and the next port "
            f"above the highest used one ({config.cluster.highest_used_port}) would be past "
            f"{LAST_PORT}; remove instances or add free ports to the cluster's tcpudp_port_pool",
            "insufficient_resources")
    config.cluster.highest_used_port = port
    return port


def release(config: model.ConfigData, port: int | None) -> None:
    """Give a removed instance's port back to the pool (Ganeti's RemoveInstance)."""
    if port is not None and port not in config.cluster.tcpudp_port_pool:
        config.cluster.tcpudp_port_pool.append(port)
