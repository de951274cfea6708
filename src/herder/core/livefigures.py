"""A node's live figures and its instances' run states: what noded's `node_info` RPC answers
(the wire format between noded and masterd), and the one rule more than one component computes
from them (memory free for allocation, used by masterd's iallocator input and maintd's
balancing).

Units are Ganeti's: memory and storage in MiB, CPUs as counts. The names are those of Ganeti's
`node_info` RPC (`memory_total`, `memory_free`, `memory_dom0`, `cpu_total`, `cpu_dom0`,
`cpu_nodes`, `cpu_sockets`, `bootid`, storage units with `storage_size`/`storage_free`), which
its query code turns into the RAPI fields `mtotal`, `mfree`, `mnode`, `ctotal`, `cnos`,
`cnodes`, `csockets`, `bootid`, `dtotal`/`dfree` and `sptotal`/`spfree`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

# Ganeti's storage types (constants.ST_*) whose units report space (constants.STS_REPORT)
STORAGE_FILE = "file"
STORAGE_LVM_VG = "lvm-vg"
STORAGE_LVM_PV = "lvm-pv"
STORAGE_REPORTING = frozenset({STORAGE_FILE, STORAGE_LVM_VG, STORAGE_LVM_PV})
# Which storage type holds a disk template's disks (constants.MAP_DISK_TEMPLATE_STORAGE_TYPE)
TEMPLATE_STORAGE = {"blockdev": "blockdev", "diskless": "diskless", "drbd": STORAGE_LVM_VG,
                    "ext": "ext", "file": STORAGE_FILE, "gluster": "gluster",
                    "plain": STORAGE_LVM_VG, "rbd": "rados", "sharedfile": "sharedfile"}

# Domain states (libvirt's words) in which an instance's hypervisor process exists: Ganeti's
# all_instances_info lists an instance exactly then (a KVM process that is alive).
LIVE_STATES = frozenset({"running", "blocked", "paused", "shutdown", "pmsuspended"})


# The answer's Structs ignore fields they do not declare (msgspec's default): in a rolling
# upgrade the nodes run the newer build before the master does, and an older masterd must
# still read a newer noded's figures (docs/architecture.md "Node RPC", "Mixed builds"). A
# field the master needs that is missing or of the wrong type is still refused.
class StorageUnit(msgspec.Struct, frozen=True):
    """The space of one storage unit (a volume group, a directory) in MiB."""

    type: str  # a Ganeti storage type: file, lvm-vg, lvm-pv, ...
    name: str  # the volume group's name, the directory's path
    storage_size: int
    storage_free: int


class InstanceRun(msgspec.Struct, frozen=True):
    """An instance whose hypervisor process exists on the node (Ganeti's all_instances_info
    entry): its state as the hypervisor says, and what it really has."""

    state: str  # one of LIVE_STATES
    memory: int  # MiB
    vcpus: int
    uptime: float | None = None  # seconds since this node started it (None: unknown)


class KvmVerdict(msgspec.Struct, kw_only=True):
    """The node's KVM probe: does hardware KVM run guests here, and why (one line)."""

    usable: bool
    reason: str
    seconds: float


class NodeInfo(msgspec.Struct, frozen=True):
    """One node's answer to `node_info`."""

    bootid: str  # renewed at every boot of the node
    memory_total: int  # MiB
    memory_free: int  # MiB available for instances now
    memory_dom0: int  # MiB the node itself uses
    cpu_total: int
    cpu_dom0: int  # CPUs the node's own OS uses (Ganeti: all of them under KVM)
    cpu_nodes: int  # NUMA domains
    cpu_sockets: int
    storage: tuple[StorageUnit, ...] = ()
    # asked with {"instances": true}: instance name -> its run state (live instances only)
    instances: dict[str, InstanceRun] | None = None
    # the KVM probe's verdict (None: a node that does not say, e.g. an older version)
    kvm: KvmVerdict | None = None
    # the herder build the node's noded runs (None: a noded before builds had versions)
    herder_version: str | None = None


def decode_node_info(answer: object) -> NodeInfo:
    """A node_info answer (decoded JSON) as NodeInfo; ValueError with the reason."""
    try:
        return msgspec.convert(answer, NodeInfo)
    except msgspec.ValidationError as err:
        raise ValueError(f"malformed node_info answer: {err}") from None


def default_unit(units: Sequence[StorageUnit],
                 templates: Sequence[str] = ()) -> StorageUnit | None:
    """The unit Ganeti's `dtotal`/`dfree` describe: the first unit (in the order of the
    cluster's enabled disk templates) that is not an lvm-pv; else the first such unit."""
    for template in templates:
        wanted = TEMPLATE_STORAGE.get(template)
        for unit in units:
            if unit.type == wanted and unit.type != STORAGE_LVM_PV:
                return unit
    return next((u for u in units if u.type != STORAGE_LVM_PV), None)


def unit_for_template(units: Sequence[StorageUnit], template: str) -> StorageUnit | None:
    """The unit holding `template`'s disks; None when the template's storage reports no space
    (diskless, sharedfile, rbd, ...) or the node has no such unit."""
    wanted = TEMPLATE_STORAGE.get(template)
    if wanted not in STORAGE_REPORTING:
        return None
    return next((u for u in units if u.type == wanted), None)


def cluster_storage_units(templates: Sequence[str], volume_group: str | None,
                          file_storage_dir: str) -> list[tuple[str, str]]:
    """What the master asks each node's figures of (Ganeti's GetStorageUnitsOfCluster): per
    enabled disk template, in order, its reporting unit: the volume group for plain/drbd, the
    file-storage directory for file."""
    units: list[tuple[str, str]] = []
    for template in templates:
        kind = TEMPLATE_STORAGE.get(template)
        name = volume_group if kind == STORAGE_LVM_VG else \
            file_storage_dir if kind == STORAGE_FILE else None
        if kind is not None and kind in STORAGE_REPORTING and name \
                and (kind, name) not in units:
            units.append((kind, name))
    return units


def spindles(units: Sequence[StorageUnit]) -> StorageUnit | None:
    """The lvm-pv unit (spindles of exclusive storage), when the node reports one."""
    return next((u for u in units if u.type == STORAGE_LVM_PV), None)


def free_memory_for_allocation(memory_free: int,
                               primaries: Iterable[tuple[int, bool, int | None]]) -> int:
    """Ganeti's iallocator rule (masterd/iallocator `_ComputeInstanceMemory`): the node's free
    memory less what its admin-up primary instances may still take, `maxmem` minus what each
    uses now (nothing when it does not run). `primaries`: (maxmem, admin up, memory in use or
    None when not running)."""
    free = memory_free
    for maxmem, admin_up, used in primaries:
        if admin_up:
            free -= max(0, maxmem - (used or 0))
    return free
