"""The cluster model: typed objects, validated once when decoded or changed.

Every object has a name and a UUID (design-2.1 "Introducing persistent UUIDs"): the UUID never
changes, a rename keeps it, and every lookup accepts either. References between objects are by
UUID. Every object carries serial_no, ctime and mtime.

The document is herder's own format (`FORMAT_VERSION`); `herder.cli.ganeti_import` turns a
Ganeti `config.data` into it. JSON field names follow Ganeti where Ganeti tools read them
(ipolicy's dashed keys, the maintenance section's keys).
"""

from __future__ import annotations

import ipaddress
import re
import sys
import time
import uuid as uuid_mod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar

import msgspec

from herder.core import (
    addrpool,
    backupsched,
    configindex,
    names,
    params,
    qfilter,
    reason,
    untrusted,
)
from herder.core.errors import AmbiguousError, ConfigError, NotFoundError

FORMAT_VERSION = 1
# the etcd master lease's TTL (`Cluster.master_lease_ttl`): etcd's own minimum grant is about
# its election timeout; an hour is long past any use
MASTER_LEASE_TTL_MIN, MASTER_LEASE_TTL_MAX = 2, 3600
MASTER_LEASE_TTL_DEFAULT = 10

AdminState = Literal["up", "down", "offline"]
AdminStateSource = Literal["admin", "user"]
AllocPolicy = Literal["preferred", "last_resort", "unallocable"]
DiskMode = Literal["rw", "ro"]

# iallocator request types that have a list of default iallocators (design-2.1).
IALLOCATOR_REQUEST_TYPES = (
    "allocate",
    "relocate",
    "node-evacuate",
    "change-group",
    "multi-allocate",
    "balance",
    "capacity",
)


def new_uuid() -> str:
    return str(uuid_mod.uuid4())


def now() -> float:
    return time.time()


class Base(msgspec.Struct, kw_only=True, omit_defaults=False, forbid_unknown_fields=True):
    """Common to every config object: versioning and timestamps."""

    serial_no: int = 1
    ctime: float = 0.0
    mtime: float = 0.0

    def touch(self, when: float | None = None) -> None:
        """Record a change of this object: serial +1, mtime now."""
        self.serial_no += 1
        self.mtime = now() if when is None else when


class Named(Base, kw_only=True):
    uuid: str
    name: str
    tags: list[str] = msgspec.field(default_factory=list)

    def check_name_and_tags(self, rule: Callable[[str, str], str], what: str) -> None:
        """The object's name by its rule (`herder.core.names`) and its tags (Ganeti's)."""
        rule(self.name, f"{what} name")
        for tag in self.tags:
            check_tag(tag)


# --- instance policy --------------------------------------------------------------------------


class ISpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One instance specification (Ganeti's ispec; dashed JSON keys as in the iallocator doc)."""

    memory_size: int = msgspec.field(name="memory-size")
    cpu_count: int = msgspec.field(name="cpu-count")
    disk_count: int = msgspec.field(name="disk-count")
    disk_size: int = msgspec.field(name="disk-size")
    nic_count: int = msgspec.field(name="nic-count")
    spindle_use: int = msgspec.field(name="spindle-use")

    def as_dict(self) -> dict[str, int]:
        fields: dict[str, int] = msgspec.to_builtins(self)
        return fields

    def __post_init__(self) -> None:
        for key, value in self.as_dict().items():
            if value < 0:
                raise ValueError(f"ispec {key} must not be negative, got {value}")


class MinMax(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    min: ISpec
    max: ISpec

    def __post_init__(self) -> None:
        lo, hi = self.min.as_dict(), self.max.as_dict()
        for key in lo:
            if lo[key] > hi[key]:
                raise ValueError(f"ipolicy min {key} ({lo[key]}) exceeds max ({hi[key]})")


class IPolicy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The instance policy: what instances may look like and how much nodes may be overcommitted."""

    minmax: list[MinMax]
    std: ISpec
    disk_templates: list[str] = msgspec.field(name="disk-templates")
    vcpu_ratio: float = msgspec.field(name="vcpu-ratio", default=4.0)
    spindle_ratio: float = msgspec.field(name="spindle-ratio", default=32.0)

    def __post_init__(self) -> None:
        if not self.minmax:
            raise ValueError("ipolicy minmax needs at least one min/max pair")
        for dt in self.disk_templates:
            if dt not in params.DISK_TEMPLATES:
                raise ValueError(f"ipolicy names unknown disk template {dt!r}")
        if self.vcpu_ratio <= 0 or self.spindle_ratio <= 0:
            raise ValueError("ipolicy vcpu-ratio and spindle-ratio must be positive")

    def check_std(self) -> None:
        """The std spec must fit some min/max range. Checked on the cluster's own policy only:
        a group may narrow the bounds without a std of its own (as in Ganeti)."""
        std = self.std.as_dict()
        if not any(
            all(mm.min.as_dict()[k] <= std[k] <= mm.max.as_dict()[k] for k in std)
            for mm in self.minmax
        ):
            raise ValueError("ipolicy std spec lies outside every min/max range")


class IPolicyOverride(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A group's partial instance policy: unset fields inherit the cluster's (no std: the
    standard spec is cluster-wide, as in Ganeti)."""

    minmax: list[MinMax] | None = None
    disk_templates: list[str] | None = msgspec.field(name="disk-templates", default=None)
    vcpu_ratio: float | None = msgspec.field(name="vcpu-ratio", default=None)
    spindle_ratio: float | None = msgspec.field(name="spindle-ratio", default=None)


def default_ipolicy() -> IPolicy:
    """Ganeti 3.0's default instance policy."""
    return IPolicy(
        minmax=[
            MinMax(
                min=ISpec(
                    memory_size=128, cpu_count=1, disk_count=1, disk_size=1024, nic_count=1,
                    spindle_use=1,
                ),
                max=ISpec(
                    memory_size=32768, cpu_count=8, disk_count=16, disk_size=1024 * 1024,
                    nic_count=8, spindle_use=12,
                ),
            )
        ],
        std=ISpec(
            memory_size=128, cpu_count=1, disk_count=1, disk_size=1024, nic_count=1, spindle_use=1
        ),
        disk_templates=["drbd", "plain", "sharedfile", "file", "diskless", "rbd", "ext"],
        vcpu_ratio=4.0,
        spindle_ratio=32.0,
    )


IPOLICY_FIELDS = ("minmax", "std", "disk_templates", "vcpu_ratio", "spindle_ratio")


def ipolicy_field(key: str, *, group: bool) -> str:
    """The attribute a change of `key` (Ganeti's dashed name, or the underscored one) sets;
    ConfigError for a key no policy has (and `std` for a group's, which has none)."""
    attr = key.replace("-", "_") if isinstance(key, str) else ""
    if attr not in IPOLICY_FIELDS or (group and attr == "std"):
        raise ConfigError(f"unknown or not settable ipolicy field {key!r}")
    return attr


def check_ipolicy_changes(changes: Mapping[str, Any], *, group: bool) -> None:
    """The edge's check of an ipolicy change (Ganeti's InstancePolicy.CheckParameterSyntax on
    what is given): known keys, ispecs of non-negative integers with min <= max, known disk
    templates, positive finite ratios. None resets a group's field. ConfigError otherwise."""
    for key, value in changes.items():
        attr = ipolicy_field(key, group=group)
        if value is None:
            if not group:
                raise ConfigError(f"ipolicy {key}: the cluster's policy cannot be unset")
            continue
        target: Any = {"minmax": list[MinMax], "std": ISpec, "disk_templates": list[str],
                       "vcpu_ratio": float, "spindle_ratio": float}[attr]
        try:
            converted = msgspec.convert(value, target)
        except msgspec.ValidationError as err:
            raise ConfigError(f"ipolicy {key}: {err}") from None
        if attr == "minmax" and not converted:
            raise ConfigError("ipolicy minmax needs at least one min/max pair")
        if attr == "disk_templates":
            unknown = [dt for dt in converted if dt not in params.DISK_TEMPLATES]
            if unknown:
                raise ConfigError(f"ipolicy names unknown disk template(s) {', '.join(unknown)}")
        if attr in ("vcpu_ratio", "spindle_ratio") and not (converted > 0
                                                             and converted < float("inf")):
            raise ConfigError(f"ipolicy {key} must be a positive number, got {value!r}")


def fill_ipolicy(cluster: IPolicy, group: IPolicyOverride | None) -> IPolicy:
    if group is None:
        return cluster
    changes = {
        f: getattr(group, f)
        for f in ("minmax", "disk_templates", "vcpu_ratio", "spindle_ratio")
        if getattr(group, f) is not None
    }
    return msgspec.structs.replace(cluster, **changes) if changes else cluster


# --- disks and NICs ---------------------------------------------------------------------------

# Interning: decoding gives every string its own object, so the references and names repeated
# across objects (node and group UUIDs in instances, disks and nodes; disk templates, VGs,
# hypervisors, OSes, disk/N) cost a copy each: 6 MB at 10,000 instances, half the strings.
# Each object's `__post_init__` (run by every decode: the snapshot, a journal record, an etcd
# object, a writer's private copy) interns its own; equal values, one object.


def _interned(value: str) -> str:
    return sys.intern(value) if type(value) is str else value  # (no subclass can be interned)


class PlainId(msgspec.Struct, tag="plain", kw_only=True, forbid_unknown_fields=True):
    """An LVM logical volume."""

    vg: str
    lv: str

    def __post_init__(self) -> None:
        self.vg = _interned(self.vg)  # the same few VGs in every disk


class DrbdId(msgspec.Struct, tag="drbd", kw_only=True, forbid_unknown_fields=True):
    """A DRBD device: its two nodes (primary first), TCP port, one minor per node, secret."""

    nodes: list[str]
    port: int
    minors: list[int]
    secret: str

    def __post_init__(self) -> None:
        if len(self.nodes) != 2 or len(self.minors) != 2:
            raise ValueError("a DRBD logical id needs exactly two nodes and two minors")
        self.nodes = [_interned(node) for node in self.nodes]
        if self.nodes[0] == self.nodes[1]:
            raise ValueError("a DRBD disk's two nodes must differ")
        if not 0 < self.port < 65536:
            raise ValueError(f"DRBD port {self.port} out of range")
        if any(m < 0 for m in self.minors):
            raise ValueError("DRBD minors must not be negative")


class FileId(msgspec.Struct, tag="file", kw_only=True, forbid_unknown_fields=True):
    """A file-backed disk (file, sharedfile, gluster)."""

    driver: str
    path: str


class ExtId(msgspec.Struct, tag="ext", kw_only=True, forbid_unknown_fields=True):
    """A disk provided by something outside herder (rbd, ext, blockdev): a pool/provider + name."""

    provider: str
    name: str


LogicalId = PlainId | DrbdId | FileId | ExtId


class Disk(Base, kw_only=True):
    uuid: str
    name: str | None = None
    dev_type: str
    size: int  # MiB
    mode: DiskMode = "rw"
    spindles: int | None = None
    logical_id: LogicalId | None = None
    children: list[Disk] = msgspec.field(default_factory=list)
    iv_name: str = ""
    params: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dev_type not in params.DISK_TEMPLATES:
            raise ValueError(f"disk {self.uuid}: unknown disk template {self.dev_type!r}")
        self.dev_type = _interned(self.dev_type)
        self.iv_name = _interned(self.iv_name)
        names.device_name(self.name, "disk")
        if self.size < 0:
            raise ValueError(f"disk {self.uuid}: negative size")
        if self.spindles is not None and self.spindles < 0:
            raise ValueError(f"disk {self.uuid}: negative spindles")
        if self.dev_type == "drbd" and not isinstance(self.logical_id, DrbdId):
            raise ValueError(f"disk {self.uuid}: a drbd disk needs a drbd logical id")
        self.params = params.validate(params.disk_family(self.dev_type), self.params)


class NIC(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    uuid: str
    name: str | None = None
    mac: str
    ip: str | None = None
    network: str | None = None  # network UUID
    nicparams: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.nicparams = params.validate(params.NIC_FAMILY, self.nicparams)
        self.mac = self.mac.lower()
        if self.network is not None:
            self.network = _interned(self.network)
        if not re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", self.mac):
            raise ValueError(f"NIC {self.uuid}: invalid MAC address {self.mac!r}")
        if self.ip is not None:
            try:
                ipaddress.ip_address(self.ip)
            except ValueError:
                raise ValueError(f"NIC {self.uuid}: invalid IP address {self.ip!r}") from None
        names.device_name(self.name, "NIC")


# --- nodes, groups, instances, networks -------------------------------------------------------


class Node(Named, kw_only=True):
    primary_ip: str
    secondary_ip: str | None = None
    group: str  # node group UUID
    master_candidate: bool = False
    master_capable: bool = True
    vm_capable: bool = True
    offline: bool = False
    drained: bool = False
    powered: bool = True
    ndparams: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check_name_and_tags(names.hostname, "node")
        self.group = _interned(self.group)
        self.ndparams = params.validate(params.ND_FAMILY, self.ndparams)
        if self.offline and self.master_candidate:
            raise ValueError(f"node {self.name}: an offline node cannot be a master candidate")
        if self.drained and self.master_candidate:
            raise ValueError(f"node {self.name}: a drained node cannot be a master candidate")
        if self.master_candidate and not self.master_capable:
            raise ValueError(f"node {self.name}: a master candidate must be master capable")


class NetworkLink(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How a group connects a network: its NIC mode, link and VLAN there (Ganeti's
    netparams)."""

    mode: str
    link: str
    vlan: str = ""

    def __post_init__(self) -> None:
        if self.mode not in params.NIC_MODES:
            raise ValueError(f"unknown NIC mode {self.mode!r}")
        params.validate(params.NIC_FAMILY, {"vlan": self.vlan})


class NodeGroup(Named, kw_only=True):
    alloc_policy: AllocPolicy = "preferred"
    ndparams: dict[str, Any] = msgspec.field(default_factory=dict)
    diskparams: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    ipolicy: IPolicyOverride = msgspec.field(default_factory=IPolicyOverride)
    networks: dict[str, NetworkLink] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check_name_and_tags(names.object_name, "node group")
        self.ndparams = params.validate(params.ND_FAMILY, self.ndparams)
        self.diskparams = {
            dt: params.validate(params.disk_family(dt), values)
            for dt, values in self.diskparams.items()
        }


class Network(Named, kw_only=True):
    network: str  # an IPv4 subnet, /16 to /30 (Ganeti's)
    gateway: str | None = None
    network6: str | None = None
    gateway6: str | None = None
    mac_prefix: str | None = None
    # the IP pool (core.addrpool): one 0/1 per address of `network`, as Ganeti keeps them
    reservations: str | None = None
    ext_reservations: str | None = None

    def __post_init__(self) -> None:
        self.check_name_and_tags(names.object_name, "network")
        subnet = addrpool.subnet(self.network)
        addrpool.check_bits(subnet, self.reservations, "reservations")
        addrpool.check_bits(subnet, self.ext_reservations, "ext_reservations")
        if self.gateway is not None and ipaddress.ip_address(self.gateway) not in subnet:
            raise ValueError(f"network {self.name}: gateway {self.gateway} is not in "
                             f"{self.network}")
        if self.network6 is not None:
            ipaddress.IPv6Network(self.network6)
        if self.gateway6 is not None:
            ipaddress.IPv6Address(self.gateway6)
        if self.mac_prefix is not None:
            self.mac_prefix = names.mac_prefix(self.mac_prefix)

    def pool(self) -> addrpool.AddressPool:
        return addrpool.AddressPool(self.network, self.reservations, self.ext_reservations)

    def keep(self, pool: addrpool.AddressPool) -> None:
        """Store `pool`'s reservations (Ganeti's AddressPool.Update)."""
        state = pool.state()
        self.reservations, self.ext_reservations = state.reservations, state.ext_reservations


class SnapshotVolume(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One disk's part of an instance snapshot: the disk (its UUID) and the snapshot's own
    volume as the device type named it (`blockdev_snapshot`'s answer)."""

    disk: str
    logical_id: LogicalId


class InstanceSnapshot(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A snapshot of all of an instance's disks, taken together (herder's own, compat B63)."""

    name: str
    ctime: float
    volumes: list[SnapshotVolume]

    def __post_init__(self) -> None:
        names.snapshot_name(self.name)


class Instance(Named, kw_only=True):
    primary_node: str  # node UUID
    os: str  # "name" or "name+variant"
    hypervisor: str
    admin_state: AdminState = "down"
    admin_state_source: AdminStateSource = "admin"
    disks: list[Disk] = msgspec.field(default_factory=list)
    disks_active: bool = False
    nics: list[NIC] = msgspec.field(default_factory=list)
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams: dict[str, str] = msgspec.field(default_factory=dict)
    # The console's TCP port from the cluster's port pool (Ganeti's network_port; VNC display
    # = port - 5900); None for a hypervisor that needs none (masterd.portpool).
    network_port: int | None = None
    # herder's snapshots of the instance's disks, oldest first (`masterd.lu.snapshots`)
    snapshots: list[InstanceSnapshot] = msgspec.field(default_factory=list)
    # while a rollback to a snapshot runs: the disks' content kept aside before it (one
    # volume per disk), so the queue's recovery can put them back when the master died in it
    rollback_aside: list[SnapshotVolume] = msgspec.field(default_factory=list)
    # True from the moment a remote import records the instance until its disks have been
    # received: a master that dies in between leaves it True, and the queue's recovery then
    # removes this half-made instance (OP_INSTANCE_REMOVE `cleanup`), and never one that is
    # not marked so (an instance of that name that existed before the interrupted job)
    incomplete: bool = False

    def __post_init__(self) -> None:
        self.check_name_and_tags(names.hostname, "instance")
        if len({snap.name for snap in self.snapshots}) != len(self.snapshots):
            raise ValueError(f"instance {self.name}: two snapshots of the same name")
        if self.os != "none":
            names.os_name(self.os, f"instance {self.name}: OS")
        self.primary_node = _interned(self.primary_node)
        self.os = _interned(self.os)
        self.hypervisor = _interned(self.hypervisor)
        self.hvparams = params.validate(
            params.hv_family(self.hypervisor), self.hvparams, instance_level=True
        )
        self.beparams = params.validate(params.BE_FAMILY, self.beparams)
        templates = {d.dev_type for d in self.disks}
        if len(templates) > 1:
            raise ValueError(
                f"instance {self.name}: mixed disk templates {sorted(templates)} are not supported"
            )

    @property
    def os_name(self) -> str:
        return self.os.split("+", 1)[0]

    @property
    def os_variant(self) -> str | None:
        _, sep, variant = self.os.partition("+")
        return variant if sep else None

    @property
    def disk_template(self) -> str:
        return self.disks[0].dev_type if self.disks else "diskless"

    def snapshot(self, name: str) -> InstanceSnapshot | None:
        """The snapshot called `name`, if the instance has one."""
        return next((snap for snap in self.snapshots if snap.name == name), None)

    @property
    def secondary_nodes(self) -> list[str]:
        """Node UUIDs holding a mirror of this instance's disks (DRBD peers)."""
        result: list[str] = []
        for disk in self.disks:
            if isinstance(disk.logical_id, DrbdId):
                for node in disk.logical_id.nodes:
                    if node != self.primary_node and node not in result:
                        result.append(node)
        return result

    @property
    def all_nodes(self) -> list[str]:
        return [self.primary_node, *self.secondary_nodes]


# --- cluster-level settings -------------------------------------------------------------------


# Ganeti's default data collector interval (constants.MOND_TIME_INTERVAL, seconds): what a new
# Ganeti cluster gives every collector, and what herder gives one outside the table below.
MOND_TIME_INTERVAL = 5.0


class CollectorSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How mond schedules one data collector. Intervals in seconds.

    Adaptive scheduling may move a collector's interval between `min_interval` and
    `max_interval`; when unset they default from `interval` (half and four times it).
    """

    active: bool = True
    interval: float = MOND_TIME_INTERVAL
    min_interval: float | None = None
    max_interval: float | None = None

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError("a collector interval must be positive")
        if self.min_interval is None:
            self.min_interval = self.interval / 2
        if self.max_interval is None:
            self.max_interval = self.interval * 4
        if not 0 < self.min_interval <= self.interval <= self.max_interval:
            raise ValueError(
                "collector intervals must satisfy 0 < min_interval <= interval <= max_interval"
            )


# Collectors herder's mond offers, with their default interval (seconds): the one source of
# these defaults — a new cluster config is filled from it (and so what masterd's RAPI and confd
# answer), and mond's collectors use it on a node without the config or a confd answer. The
# collectors Ganeti also has keep its default (MOND_TIME_INTERVAL); herder's own storage ones
# run less often (LVM and ceph queries), the static ones (node-os, hypervisor, one per herder
# daemon) too.
DEFAULT_COLLECTOR_INTERVALS: dict[str, float] = {
    "node-os": 10.0,
    "cpu-avg-load": MOND_TIME_INTERVAL,
    "diskstats": MOND_TIME_INTERVAL,
    "drbd": MOND_TIME_INTERVAL,
    "lv": MOND_TIME_INTERVAL,
    "plain": 30.0,
    "file": 30.0,
    "rbd": 60.0,
    "inst-status": MOND_TIME_INTERVAL,
    "hypervisor": 10.0,
    **dict.fromkeys(("mond", "masterd", "noded", "confd", "maintd", "instmon"), 10.0),
    "diagnose": 60.0,
}


def default_data_collectors() -> dict[str, CollectorSettings]:
    return {
        name: CollectorSettings(interval=iv) for name, iv in DEFAULT_COLLECTOR_INTERVALS.items()
    }


# herder's: "node-failed" (a node that died: herder.maintd.nodefail fences it and recovers its
# instances), "notify" (a node incident only shown to the operator, e.g. failed storage),
# then the instance incidents' (instmon's failure notifications and unwell instances mond
# reports; see herder.maintd.instances and herder.maintd.vmhealth)
RepairAction = Literal["Ok", "live-repair", "evacuate", "evacuate-failover", "notify",
                       "restart", "relocate", "drain-relocate", "stop-stray", "node-failed"]
RepairStatus = Literal["noted", "pending", "canceled", "failed", "completed"]


class Incident(Base, kw_only=True):
    """A repair incident tracked by maintd (field names as Ganeti's maintd serves them)."""

    uuid: str
    node: str
    original: Any = None
    action: RepairAction = "Ok"
    jobs: list[int] = msgspec.field(default_factory=list)
    repair_status: RepairStatus = msgspec.field(name="repair-status", default="noted")
    tag: str = ""
    # herder: the instance (UUID) of an instance incident; None for a node incident (then
    # `node` is the node to repair; for an instance incident it is the node it failed on)
    instance: str | None = None


class MaintdIntent(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A job maintd is about to submit (written before submitting, so a crash in between is
    recognised and the job is never submitted twice)."""

    key: str
    event: str
    step: str


# maintenance nodeFailureTime's bounds (seconds): the lease time (noded.fence.LEASE_TIME) at
# least, as maintd's --node-failure-time
NODE_FAILURE_TIME_MIN = 6.0
NODE_FAILURE_TIME_MAX = 600.0


class Maintenance(Base, kw_only=True):
    """The maintenance daemon's persistent state (keys as in Ganeti's config `maintenance`)."""

    enabled: bool = True
    harep: bool = False  # herder: harep-style instance repairs in maintd's rounds
    round_delay: int = msgspec.field(name="roundDelay", default=300)
    jobs: list[int] = msgspec.field(default_factory=list)
    balance: bool = False
    balance_threshold: float = msgspec.field(name="balanceThreshold", default=0.1)
    # herder: balancing may move secondaries (hbal's default) or only swap/migrate primaries
    balance_disk_moves: bool = msgspec.field(name="balanceDiskMoves", default=True)
    # herder: use the agents' cpu-avg-load as dynamic load in the balance score (hbal --mond)
    balance_dynamic_load: bool = msgspec.field(name="balanceDynamicLoad", default=False)
    # herder: maintd handles dead nodes (fence, recover: maintd.nodefail); the cluster's off
    # switch beside maintd's --no-node-recovery
    node_recovery: bool = msgspec.field(name="nodeRecovery", default=True)
    # herder: seconds without a lease renewal before maintd suspects a node (None: maintd's
    # --node-failure-time, 12 s); at least the lease time (6 s). What an operator tunes: a
    # shorter time detects sooner, a longer one rides out a busy network
    node_failure_time: float | None = msgspec.field(name="nodeFailureTime", default=None)
    evacuated: list[str] = msgspec.field(default_factory=list)
    incidents: list[Incident] = msgspec.field(default_factory=list)
    diagnose_command: str = msgspec.field(name="diagnoseCommand", default="")
    intents: list[MaintdIntent] = msgspec.field(default_factory=list)
    # node UUID -> [timestamp_ns, hmac] of the newest diagnose report accepted (replay check)
    seen: dict[str, tuple[int, str]] = msgspec.field(default_factory=dict)
    # herder: scheduled backups (core.backupsched; maintd runs them) and maintd's records of
    # their runs (the newest backupsched.RUNS_KEPT)
    backup_schedules: list[backupsched.BackupSchedule] = msgspec.field(
        name="backupSchedules", default_factory=list)
    backup_runs: list[backupsched.BackupRun] = msgspec.field(name="backupRuns",
                                                              default_factory=list)

    def __post_init__(self) -> None:
        if self.round_delay < 0:
            raise ValueError("maintenance roundDelay must not be negative")
        if self.node_failure_time is not None and not (
                NODE_FAILURE_TIME_MIN <= self.node_failure_time <= NODE_FAILURE_TIME_MAX):
            raise ValueError(f"maintenance nodeFailureTime must be {NODE_FAILURE_TIME_MIN:g} to "
                             f"{NODE_FAILURE_TIME_MAX:g} seconds (the lease time, 6 s, at least)")


# --- job filter rules (Ganeti's `filters` section, gnt-filter) ----------------------------------

FilterPredicateName = Literal["jobid", "opcode", "reason"]
# The fields each predicate's expression may use: a job's `id`; a reason trail entry's three;
# an opcode's fields are those it has (`OP_ID` and every parameter), so any name
FILTER_PREDICATE_FIELDS: dict[str, frozenset[str] | None] = {
    "jobid": frozenset({"id"}),
    "opcode": None,
    "reason": frozenset({"source", "reason", "timestamp"}),
}
FilterActionName = Literal["ACCEPT", "PAUSE", "REJECT", "CONTINUE"]
# Ganeti's wire form: the name, or ["RATE_LIMIT", n]
FilterAction = FilterActionName | tuple[Literal["RATE_LIMIT"], int]


class FilterRule(msgspec.Struct, kw_only=True, omit_defaults=False, forbid_unknown_fields=True):
    """A job filter rule (Ganeti's `objects.Filter`, the fields as its config and RAPI have
    them): jobs not yet started that its predicates all match get its action, the rules taken
    by `priority` (lower first), then `watermark`, then `uuid` (herder.masterd.jobs.filters)."""

    uuid: str
    watermark: int = 0  # the highest job id when the rule was added or replaced
    priority: int = 0
    predicates: list[tuple[FilterPredicateName, Any]] = msgspec.field(default_factory=list)
    action: FilterAction = "CONTINUE"
    reason_trail: list[list[Any]] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.priority < 0:
            raise ValueError(f"a filter's priority must not be negative, got {self.priority}")
        if self.watermark < 0:
            raise ValueError(f"a filter's watermark must not be negative, got {self.watermark}")
        if isinstance(self.action, tuple) and self.action[1] < 1:
            raise ValueError(f"RATE_LIMIT needs a positive number of jobs, got {self.action[1]}")
        for index, (name, expression) in enumerate(self.predicates):
            try:
                qfilter.check(expression, FILTER_PREDICATE_FIELDS[name])
            except ValueError as err:
                raise ValueError(f"predicate {index} ({name}): {err}") from None
        self.reason_trail = reason.validate(self.reason_trail)


class Cluster(Base, kw_only=True):
    uuid: str
    name: str
    tags: list[str] = msgspec.field(default_factory=list)
    master_node: str  # node UUID
    # Raised by every master failover; masterd signs its node RPCs with it and nodes refuse an
    # older one, so a former master cannot act on the nodes (docs/ha.md "Master failover").
    master_epoch: int = 0
    # herder, etcd backend: the master lease's TTL in seconds. A master that dies is replaced
    # within about this time; too short and a master stalled that long (a busy machine, an etcd
    # election) loses the lease and the cluster its master for a moment (docs/ha.md).
    master_lease_ttl: int = MASTER_LEASE_TTL_DEFAULT
    # Each node's certificate (node UUID -> SHA-256 of its DER form), issued by the cluster CA:
    # noded accepts only these callers (ssconf `herder_node_certs`); `node remove` drops one
    # (`core.node_certs`). Ganeti's `candidate_certs` lists candidates' digests only.
    node_certs: dict[str, str] = msgspec.field(default_factory=dict)
    # During `cluster renew-crypto`: the new certificates' digests, listed beside `node_certs`
    # by every redistribution until the rotation ends, so a redistribution running meanwhile
    # never takes the new certificates' acceptance away (masterd.renew)
    node_certs_renewing: dict[str, str] = msgspec.field(default_factory=dict)
    # The CAs every node's libvirtd trusts (PEM certificates; two while a new one replaces the
    # old): libvirt's own CA, whose key only the master holds, issuing one certificate per
    # current node (ssconf `herder_libvirt_cas`, `masterd.libvirt_trust`); none on a cluster
    # made before it (libvirtd then trusts the cluster CA until `renew-crypto`)
    libvirt_cas: list[str] = msgspec.field(default_factory=list)
    master_ip: str
    master_netdev: str = "eth0"
    master_netmask: int = 32
    primary_ip_family: Literal[4, 6] = 4
    mac_prefix: str = "aa:00:00"
    volume_group_name: str | None = "xenvg"
    file_storage_dir: str = "/srv/herder/file-storage"
    shared_file_storage_dir: str = "/srv/herder/shared-file-storage"
    enabled_hypervisors: list[str] = msgspec.field(default_factory=lambda: ["kvm"])
    enabled_disk_templates: list[str] = msgspec.field(
        default_factory=lambda: ["drbd", "plain", "file", "diskless"]
    )
    hvparams: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    os_hvp: dict[str, dict[str, dict[str, Any]]] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)
    diskparams: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    nicparams: dict[str, Any] = msgspec.field(default_factory=dict)
    ndparams: dict[str, Any] = msgspec.field(default_factory=dict)
    ipolicy: IPolicy = msgspec.field(default_factory=default_ipolicy)
    uid_pool: list[tuple[int, int]] = msgspec.field(default_factory=list)
    default_iallocators: dict[str, list[str]] = msgspec.field(default_factory=dict)
    default_iallocator_params: dict[str, str] = msgspec.field(default_factory=dict)
    data_collectors: dict[str, CollectorSettings] = msgspec.field(
        default_factory=default_data_collectors
    )
    candidate_pool_size: int = 10
    tcpudp_port_pool: list[int] = msgspec.field(default_factory=list)
    highest_used_port: int = 11000
    drbd_usermode_helper: str | None = "/bin/true"
    reserved_lvs: list[str] = msgspec.field(default_factory=list)
    blacklisted_os: list[str] = msgspec.field(default_factory=list)
    hidden_os: list[str] = msgspec.field(default_factory=list)
    # GET requests on the RAPI answered without credentials (Ganeti's RAPI answers every
    # reader; htools send no credentials). Off unless the operator turns it on
    # (docs/compat.md row 54); secrets are redacted for such readers as for read-only users.
    rapi_anonymous_reads: bool = False

    def __post_init__(self) -> None:
        names.hostname(self.name, "cluster name")
        for tag in self.tags:
            check_tag(tag)
        if not params.is_interface_name(self.master_netdev):
            raise ValueError(f"master_netdev {self.master_netdev!r} is not a network interface "
                             "name")
        self.ipolicy.check_std()
        for hv in self.enabled_hypervisors:
            params.hv_family(hv)
        for dt in self.enabled_disk_templates:
            params.disk_family(dt)
        self.hvparams = {
            hv: params.validate(params.hv_family(hv), values)
            for hv, values in self.hvparams.items()
        }
        self.os_hvp = {
            os_name: {
                hv: params.validate(params.hv_family(hv), values, instance_level=True)
                for hv, values in per_hv.items()
            }
            for os_name, per_hv in self.os_hvp.items()
        }
        self.beparams = params.validate(params.BE_FAMILY, self.beparams)
        self.ndparams = params.validate(params.ND_FAMILY, self.ndparams)
        self.nicparams = params.validate(params.NIC_FAMILY, self.nicparams)
        self.diskparams = {
            dt: params.validate(params.disk_family(dt), values)
            for dt, values in self.diskparams.items()
        }
        for kind in self.default_iallocators:
            if kind not in IALLOCATOR_REQUEST_TYPES:
                raise ValueError(
                    f"default iallocators for unknown request type {kind!r} "
                    f"(known: {', '.join(IALLOCATOR_REQUEST_TYPES)})"
                )
        for lo, hi in self.uid_pool:
            if not 0 <= lo <= hi:
                raise ValueError(f"bad uid pool range {lo}-{hi}")
        if self.candidate_pool_size < 1:
            raise ValueError("candidate_pool_size must be at least 1")
        if self.master_epoch < 0:
            raise ValueError("master_epoch must not be negative")
        if not MASTER_LEASE_TTL_MIN <= self.master_lease_ttl <= MASTER_LEASE_TTL_MAX:
            raise ValueError(f"master_lease_ttl must be {MASTER_LEASE_TTL_MIN}-"
                             f"{MASTER_LEASE_TTL_MAX} seconds, not {self.master_lease_ttl}")


class ConfigData(Base, kw_only=True, dict=True):
    """The whole cluster configuration: one JSON document.

    `dict=True` lets the config carry its `index()` (not a field: never encoded)."""

    version: int = FORMAT_VERSION
    cluster: Cluster
    nodegroups: dict[str, NodeGroup] = msgspec.field(default_factory=dict)
    nodes: dict[str, Node] = msgspec.field(default_factory=dict)
    instances: dict[str, Instance] = msgspec.field(default_factory=dict)
    networks: dict[str, Network] = msgspec.field(default_factory=dict)
    maintenance: Maintenance = msgspec.field(default_factory=Maintenance)
    # Ganeti's top-level `filters`: filter rule UUID -> rule
    filters: dict[str, FilterRule] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.version != FORMAT_VERSION:
            raise ValueError(
                f"config format version {self.version} is not supported "
                f"(this herder reads version {FORMAT_VERSION})"
            )
        for kind, table in (
            ("node group", self.nodegroups),
            ("node", self.nodes),
            ("instance", self.instances),
            ("network", self.networks),
        ):
            for key, obj in table.items():
                if key is obj.uuid:
                    continue
                if key != obj.uuid:
                    raise ValueError(f"{kind} {obj.name!r} is filed under {key!r}, not its UUID")
                obj.uuid = key  # one string for the key and the object's UUID (`_interned`)
        check_filters(self.filters)
        check_nics(self)

    # --- lookups: a name (or unique short name) or a UUID --------------------------------------

    def find_node(self, key: str) -> Node:
        return self._find("node", self.nodes, key, lambda index: index.nodes)

    def find_group(self, key: str) -> NodeGroup:
        return self._find("node group", self.nodegroups, key, lambda index: index.groups)

    def find_instance(self, key: str) -> Instance:
        return self._find("instance", self.instances, key, lambda index: index.instances)

    def find_network(self, key: str) -> Network:
        return self._find("network", self.networks, key, lambda index: index.networks)

    def _find(self, kind: str, table: Mapping[str, _T], key: str,
              names_of: Callable[[configindex.ConfigIndex], configindex.NameTable]) -> _T:
        if key in table:
            return table[key]
        found = _find_indexed(kind, table, key, names_of(self._lookup_index()))
        if found is None:  # the index may predate a rename in this very change: scan
            found = _find_scan(kind, table, key)
        return found

    def _lookup_index(self) -> configindex.ConfigIndex:
        """The index for name lookups: while the config is being changed, the one of the
        config the change started from (every hit is checked against the object, a miss
        scans), so a lookup in a change costs no index build."""
        if self.__dict__.get("_changing"):
            started = self.__dict__.get("_lookup")
            if isinstance(started, configindex.ConfigIndex):
                return started
        return self.index()

    # --- indexes ------------------------------------------------------------------------------

    def index(self, *, fresh: bool = False) -> configindex.ConfigIndex:
        """The config's indexes (`herder.core.configindex`), built once in O(nodes + instances)
        and kept while the config is unchanged. A config being changed (`changing()`, inside a
        store's update) gets a fresh index each time; a kept one is also dropped when the
        number of objects or the serial moves."""
        guard = (len(self.nodes), len(self.instances), len(self.nodegroups),
                 len(self.networks), self.serial_no, id(self.nodes), id(self.instances))
        cached = self.__dict__.get("_index")
        if (not fresh and cached is not None and cached[0] == guard
                and not self.__dict__.get("_changing")
                and isinstance(cached[1], configindex.ConfigIndex)):
            return cached[1]
        index = configindex.ConfigIndex.build(self)
        self.__dict__["_index"] = (guard, index)
        return index

    def keep_index(self, index: configindex.ConfigIndex) -> None:
        """Adopt `index` (one that followed this config's changes) as its kept index."""
        guard = (len(self.nodes), len(self.instances), len(self.nodegroups),
                 len(self.networks), self.serial_no, id(self.nodes), id(self.instances))
        self.__dict__["_index"] = (guard, index)

    def changing(self, active: bool = True,
                 lookup: configindex.ConfigIndex | None = None) -> None:
        """Mark the config as being changed (no kept index until the change ends; `lookup`:
        the index of the config the change started from, for name lookups only)."""
        self.__dict__["_changing"] = active
        self.__dict__.pop("_lookup", None)
        if active:
            self.__dict__.pop("_index", None)
            if lookup is not None:
                self.__dict__["_lookup"] = lookup

    def primary_instances(self, node_uuid: str) -> list[Instance]:
        """The node's primary instances, by name."""
        index = self.index()
        return sorted((self.instances[u] for u in list(index.primary_uuids(node_uuid))
                       if u in self.instances), key=lambda i: i.name)

    def secondary_instances(self, node_uuid: str) -> list[Instance]:
        """The instances with a mirror (DRBD secondary) on the node, by name."""
        index = self.index()
        return sorted((self.instances[u] for u in list(index.secondary_uuids(node_uuid))
                       if u in self.instances), key=lambda i: i.name)

    def group_nodes(self, group_uuid: str) -> list[Node]:
        """The group's nodes, by name."""
        index = self.index()
        return sorted((self.nodes[u] for u in list(index.group_nodes.get(group_uuid, ()))
                       if u in self.nodes), key=lambda n: n.name)

    def group_node_names(self, group_uuid: str) -> list[str]:
        """The names of the group's nodes in the order Ganeti 3.0's queries give a group's
        `node_list`: by node UUID (its config's node map), not by name."""
        return [n.name for n in sorted(self.group_nodes(group_uuid), key=lambda n: n.uuid)]

    def find_instance_by_name(self, name: str) -> Instance | None:
        """The instance named exactly `name` (no UUID or short name), or None."""
        for uuid in self._lookup_index().instances.by_name.get(name, ()):
            inst = self.instances.get(uuid)
            if inst is not None and inst.name == name:
                return inst
        return next((i for i in self.instances.values() if i.name == name), None)

    @property
    def master(self) -> Node | None:
        return self.nodes.get(self.cluster.master_node)

    def node_name(self, node_uuid: str) -> str:
        node = self.nodes.get(node_uuid)
        return node.name if node else node_uuid

    def instances_on(self, node_uuid: str) -> Iterator[Instance]:
        """The node's primary and secondary instances, each once (primaries first)."""
        for uuid in self.index().instance_uuids_on(node_uuid):  # a copy: see primary_instances
            inst = self.instances.get(uuid)
            if inst is not None and node_uuid in inst.all_nodes:
                yield inst

    # --- filled (resolved) parameters ---------------------------------------------------------

    def filled_hvparams(self, inst: Instance) -> params.Params:
        c = self.cluster
        return params.fill(
            params.hv_family(inst.hypervisor).defaults(),
            c.hvparams.get(inst.hypervisor),
            c.os_hvp.get(inst.os_name, {}).get(inst.hypervisor),
            inst.hvparams,
        )

    def filled_beparams(self, inst: Instance) -> params.Params:
        return params.fill(params.BE_FAMILY.defaults(), self.cluster.beparams, inst.beparams)

    def filled_osparams(self, inst: Instance) -> params.Params:
        return params.fill(
            self.cluster.osparams.get(inst.os_name, {}),
            self.cluster.osparams.get(inst.os, {}),
            inst.osparams,
        )

    def filled_ndparams(self, node: Node) -> params.Params:
        group = self.nodegroups.get(node.group)
        return params.fill(
            params.ND_FAMILY.defaults(),
            self.cluster.ndparams,
            group.ndparams if group else None,
            node.ndparams,
        )

    def filled_diskparams(self, template: str, group: NodeGroup | None = None) -> params.Params:
        return params.fill(
            params.disk_family(template).defaults(),
            self.cluster.diskparams.get(template),
            group.diskparams.get(template) if group else None,
        )

    def filled_nicparams(self, nic: NIC, group: NodeGroup | None = None) -> params.Params:
        """NIC parameters: defaults < cluster < the network's link in the group < the NIC."""
        net_layer: Mapping[str, Any] | None = None
        if nic.network and group is not None and nic.network in group.networks:
            link = group.networks[nic.network]
            net_layer = {"mode": link.mode, "link": link.link}
        return params.fill(params.NIC_FAMILY.defaults(), self.cluster.nicparams, net_layer,
                           nic.nicparams)

    def filled_ipolicy(self, group: NodeGroup | None) -> IPolicy:
        return fill_ipolicy(self.cluster.ipolicy, group.ipolicy if group else None)

    def instance_group(self, inst: Instance) -> NodeGroup | None:
        node = self.nodes.get(inst.primary_node)
        return self.nodegroups.get(node.group) if node else None


def check_filters(filters: Mapping[str, FilterRule]) -> None:
    for key, rule in filters.items():
        if key != rule.uuid:
            raise ValueError(f"filter rule {rule.uuid!r} is filed under {key!r}, not its UUID")


def check_nics(config: ConfigData) -> None:
    """A routed NIC must have an IP (design-2.1 "Non bridged instances")."""
    check_instance_nics(config, config.instances.values())


def check_instance_nics(config: ConfigData, instances: Iterable[Instance]) -> None:
    """`check_nics` for some of the config's instances (those a change touched)."""
    for inst in instances:
        group = config.instance_group(inst)
        for index, nic in enumerate(inst.nics):
            filled = config.filled_nicparams(nic, group)
            if filled["mode"] == params.NIC_MODE_ROUTED and not nic.ip:
                raise ValueError(
                    f"instance {inst.name}: NIC {index} is in routed mode and needs an IP"
                )


_T = TypeVar("_T", bound=Named)


def _find_scan(kind: str, table: Mapping[str, _T], key: str) -> _T:
    """Look up by exact name, or a unique short name, scanning every object."""
    exact = [obj for obj in table.values() if obj.name == key]
    if exact:
        return exact[0]
    prefix = [obj for obj in table.values() if obj.name.split(".", 1)[0] == key]
    if len(prefix) == 1:
        return prefix[0]
    if len(prefix) > 1:
        names = ", ".join(sorted(o.name for o in prefix))
        raise AmbiguousError(f"{kind} {key!r} is ambiguous: it matches {names}")
    raise NotFoundError(f"{kind} {key!r} not found (give a name or a UUID)")


def _find_indexed(kind: str, table: Mapping[str, _T], key: str,
                  names_index: configindex.NameTable) -> _T | None:
    """Look up by exact name, or a unique short name (the part before the first dot), through
    the index; None when not found (or the index is stale: every hit is checked)."""
    exact = [table[u] for u in names_index.by_name.get(key, ()) if u in table]
    if exact and all(obj.name == key for obj in exact):
        return exact[0]
    prefix = [table[u] for u in names_index.by_short.get(key, ()) if u in table]
    if any(obj.name.split(".", 1)[0] != key for obj in prefix):
        return None
    if len(prefix) == 1:
        return prefix[0]
    if len(prefix) > 1:
        names = ", ".join(sorted(o.name for o in prefix))
        raise AmbiguousError(f"{kind} {key!r} is ambiguous: it matches {names}")
    return None


# --- encoding and decoding at the edge ---------------------------------------------------------

_ENCODER = msgspec.json.Encoder(order="sorted")
_DECODER = msgspec.json.Decoder(ConfigData)
CONFIG_MAX_BYTES = 1 << 30  # a config of tens of thousands of instances is tens of MiB


def encode(config: ConfigData) -> bytes:
    """The document as stable, sorted JSON (diffs of config files stay readable)."""
    return msgspec.json.format(_ENCODER.encode(config), indent=1) + b"\n"


def decode(raw: bytes | str) -> ConfigData:
    """Decode and validate a document; any problem is a ConfigError naming it."""
    try:
        untrusted.check(raw, what="config", max_bytes=CONFIG_MAX_BYTES)
        return _DECODER.decode(raw)
    except untrusted.BadDocument as err:
        raise ConfigError(str(err)) from None
    except msgspec.ValidationError as err:
        raise ConfigError(f"invalid config: {err}") from None
    except msgspec.DecodeError as err:
        raise ConfigError(f"config is not valid JSON: {err}") from None


def from_builtins(data: Any) -> ConfigData:
    try:
        return msgspec.convert(data, ConfigData)
    except msgspec.ValidationError as err:
        raise ConfigError(f"invalid config: {err}") from None


def revalidate(config: ConfigData) -> ConfigData:
    """Round-trip through builtins so every __post_init__ check runs on the changed document."""
    return from_builtins(msgspec.to_builtins(config))


def to_builtins(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


def tags_add(obj: Named | Cluster, tags: Iterable[str]) -> None:
    for tag in tags:
        check_tag(tag)
        if tag not in obj.tags:
            obj.tags.append(tag)


def tags_remove(obj: Named | Cluster, tags: Iterable[str]) -> None:
    missing = [t for t in tags if t not in obj.tags]
    if missing:
        raise NotFoundError(f"tag(s) not present: {', '.join(missing)}")
    obj.tags = [t for t in obj.tags if t not in set(tags)]


MAX_TAG_LEN = 128


def check_tag(tag: str) -> None:
    """Ganeti's tag rules: 1-128 characters from a safe set."""
    if not tag or len(tag) > MAX_TAG_LEN:
        raise ConfigError(f"tag {tag!r}: must be 1 to {MAX_TAG_LEN} characters")
    if not re.fullmatch(r"[\w.+*/:@-]+", tag):
        raise ConfigError(f"tag {tag!r}: only letters, digits and . + * / : @ - _ are allowed")
