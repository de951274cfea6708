"""The placement model: groups, nodes, instances, instance policies and the per-node checks.

This is herder's own model of what Ganeti's htools call a cluster: resources as the iallocator
message (or the htools text format) reports them, plus the bookkeeping needed to place and move
instances (memory reserved for N+1 failover, spindles, exclusion and location tags). The rules
follow the behaviour documented in ``docs/allocator.md``; nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import get_args

from herder.alloc import wire


class Fail(IntEnum):
    """Why a node cannot take an instance; the order is the order used in messages."""

    # Values start at 1 so that every failure is truthy.
    MEM = 1
    DISK = 2
    CPU = 3
    N1 = 4
    TAGS = 5
    MIG = 6
    DISKCOUNT = 7
    SPINDLES = 8
    INTERNAL = 9

    @property
    def label(self) -> str:
        return FAIL_LABELS[self]


FAIL_LABELS = {
    Fail.MEM: "FailMem",
    Fail.DISK: "FailDisk",
    Fail.CPU: "FailCPU",
    Fail.N1: "FailN1",
    Fail.TAGS: "FailTags",
    Fail.MIG: "FailMig",
    Fail.DISKCOUNT: "FailDiskCount",
    Fail.SPINDLES: "FailSpindles",
    Fail.INTERNAL: "FailInternal",
}

DISK_TEMPLATES: tuple[str, ...] = get_args(wire.DiskTemplate)
LOCAL_STORAGE = frozenset({"drbd", "plain"})
# Templates whose instances can change primary without copying data (shared storage).
EXTERNAL_MIRROR = frozenset({"diskless", "sharedfile", "blockdev", "rbd", "ext", "gluster"})
# Templates an hbal/evacuation may move at all.
MOVABLE = frozenset({"drbd", "blockdev", "sharedfile", "gluster", "rbd", "ext"})
# Templates the N+1 check fails over to any node of the group (the rest are re-created).
SHARED_FAILOVER = frozenset({"diskless", "sharedfile", "rbd", "ext", "gluster"})
HYPERVISORS: tuple[str, ...] = get_args(wire.Hypervisor)
MEM_STATES = frozenset({"running", "ERROR_up", "ERROR_nodedown", "ERROR_nodeoffline",
                        "ERROR_wrongnode"})


@dataclass(frozen=True, slots=True)
class ISpec:
    memory: int = 128
    cpus: int = 1
    disk_size: int = 1024
    disk_count: int = 1
    nic_count: int = 1
    spindle_use: int = 1


@dataclass(frozen=True, slots=True)
class IPolicy:
    minmax: tuple[tuple[ISpec, ISpec], ...] = (
        (ISpec(128, 1, 1024, 1, 1, 1), ISpec(32768, 8, 1048576, 16, 8, 12)),
    )
    std: ISpec = ISpec()
    disk_templates: tuple[str, ...] = (
        "sharedfile", "diskless", "plain", "blockdev", "drbd", "file", "rbd",
    )
    vcpu_ratio: float = 4.0
    spindle_ratio: float = 32.0


DEFAULT_IPOLICY = IPolicy()


@dataclass(slots=True)
class Group:
    name: str
    uuid: str
    idx: int
    alloc_policy: str = "preferred"  # preferred | last_resort | unallocable
    networks: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    ipolicy: IPolicy = DEFAULT_IPOLICY

    @property
    def policy_rank(self) -> int:
        return {"preferred": 0, "last_resort": 1}.get(self.alloc_policy, 2)


@dataclass(slots=True)
class Instance:
    name: str
    mem: int
    dsk: int  # node disk used (disk_space_total)
    vcpus: int
    template: str
    disks: list[tuple[int, int | None]] = field(default_factory=list)
    status: str = "running"
    pnode: int = -1
    snode: int = -1
    tags: tuple[str, ...] = ()
    spindle_use: int = 1
    forthcoming: bool = False
    auto_balance: bool = True
    nets: tuple[str, ...] = ()
    nic_count: int = 0
    idx: int = -1
    excl_tags: tuple[str, ...] = ()
    desired: tuple[str, ...] = ()
    util: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    # Instance moves are only proposed for these (hbal --exclude-instances etc. clear it).
    movable: bool = True

    @property
    def uses_memory(self) -> bool:
        return self.status in MEM_STATES and not self.forthcoming

    @property
    def offline(self) -> bool:
        return self.status == "ADMIN_offline"

    @property
    def uses_sec_mem(self) -> bool:
        return not self.offline and self.auto_balance

    @property
    def local(self) -> bool:
        return self.template in LOCAL_STORAGE

    @property
    def disk_spindles(self) -> int:
        """Spindles the disks need on exclusive storage (-1 when unknown)."""
        total = 0
        for _, sp in self.disks:
            if sp is None:
                return -1
            total += sp
        return total

    def copy(self) -> Instance:
        other = Instance.__new__(Instance)
        for name in Instance.__slots__:
            setattr(other, name, getattr(self, name))
        other.disks = list(self.disks)
        return other


class Node:
    """One node's resources and the bookkeeping the checks and the score need."""

    __slots__ = (
        "cpu_speed", "drained", "excl", "f_dsk", "f_dsk_forth", "f_mem", "f_mem_forth",
        "f_spindles", "fail_n1", "group", "hi_spindles", "idx", "inst_map", "inst_spindles",
        "inst_spindles_forth", "load", "loc_score", "loc_tags", "master", "mig_tags", "n_cpu",
        "n_mem", "name", "offline", "peers", "plist", "ptags", "r_mem", "rmig_tags", "slist",
        "t_cpu", "t_dsk", "t_mem", "t_spindles", "tags", "u_cpu", "u_cpu_forth", "unalloc",
        "vcpu_ratio", "x_mem",
    )

    def __init__(self, name: str, idx: int, group: int) -> None:
        self.name = name
        self.idx = idx
        self.group = group
        self.offline = False
        self.drained = False
        self.master = False
        self.t_mem = 0.0
        self.n_mem = 0
        self.f_mem = 0
        self.t_dsk = 0.0
        self.f_dsk = 0
        self.t_cpu = 0.0
        self.n_cpu = 0
        self.u_cpu = 0
        self.cpu_speed = 1.0
        self.excl = False
        self.t_spindles = 0
        self.f_spindles = 0
        self.hi_spindles = 0.0
        self.vcpu_ratio = 4.0
        self.inst_spindles = 0
        self.plist: set[int] = set()
        self.slist: set[int] = set()
        self.peers: dict[int, int] = {}
        self.r_mem = 0
        self.unalloc = 0
        self.x_mem = 0
        self.fail_n1 = False
        self.f_mem_forth = 0
        self.f_dsk_forth = 0
        self.u_cpu_forth = 0
        self.inst_spindles_forth = 0
        self.load = [0.0, 0.0, 0.0, 0.0]
        self.ptags: dict[str, int] = {}
        self.tags: tuple[str, ...] = ()
        self.loc_tags: frozenset[str] = frozenset()
        self.loc_score = 0
        self.inst_map: dict[tuple[str, str], int] = {}
        self.mig_tags: frozenset[str] = frozenset()
        self.rmig_tags: frozenset[str] = frozenset()

    def copy(self) -> Node:
        other = Node.__new__(Node)
        for name in Node.__slots__:
            setattr(other, name, getattr(self, name))
        other.plist = set(self.plist)
        other.slist = set(self.slist)
        other.peers = dict(self.peers)
        other.load = list(self.load)
        other.ptags = dict(self.ptags)
        other.inst_map = dict(self.inst_map)
        return other

    @property
    def avail_mem(self) -> int:
        return max(0, self.unalloc - self.r_mem)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Node({self.name!r}, unalloc={self.unalloc}, f_dsk={self.f_dsk})"


# --- per-node checks and updates -----------------------------------------------------------


def policy_check(inst: Instance, pol: IPolicy, excl: bool) -> Fail | None:
    """The instance must fit one min/max pair of the (primary's group) policy."""
    if inst.template not in pol.disk_templates:
        return Fail.DISK
    first: Fail | None = None
    for lo, hi in pol.minmax:
        bad = _spec_check(inst, lo, hi, excl)
        if bad is None:
            return None
        if first is None:
            first = bad
    return first


def _spec_check(inst: Instance, lo: ISpec, hi: ISpec, excl: bool) -> Fail | None:
    if not lo.memory <= inst.mem <= hi.memory:
        return Fail.MEM
    for size, _ in inst.disks:
        if not lo.disk_size <= size <= hi.disk_size:
            return Fail.DISK
    if not lo.cpus <= inst.vcpus <= hi.cpus:
        return Fail.CPU
    if excl:
        sp = inst.disk_spindles
        if sp < 0:
            return Fail.SPINDLES
        if not lo.spindle_use <= sp <= hi.spindle_use:
            return Fail.SPINDLES
    elif not lo.spindle_use <= inst.spindle_use <= hi.spindle_use:
        return Fail.SPINDLES
    if inst.template != "diskless" and not lo.disk_count <= len(inst.disks) <= hi.disk_count:
        return Fail.DISKCOUNT
    return None


def check_pri(node: Node, inst: Instance, strict: bool) -> Fail | None:
    """Can ``inst`` become a primary instance of ``node``? None when it can."""
    new_mem = node.unalloc - (inst.mem if inst.uses_memory else 0)
    if new_mem <= 0:
        return Fail.MEM
    local = inst.local
    if local:
        if node.f_dsk - inst.dsk <= 0:
            return Fail.DISK
        if node.excl and node.f_spindles - inst.disk_spindles < 0:
            return Fail.SPINDLES
        if node.excl and inst.disk_spindles < 0:
            return Fail.SPINDLES
        if strict and not node.excl and node.inst_spindles + inst.spindle_use > node.hi_spindles:
            return Fail.DISK
    if not strict:
        return None
    if new_mem <= node.r_mem and not node.fail_n1:
        return Fail.MEM
    vcpus = 0 if inst.offline else inst.vcpus
    if node.vcpu_ratio >= 0 and node.t_cpu > 0 and (node.u_cpu + vcpus) / node.t_cpu > \
            node.vcpu_ratio:
        return Fail.CPU
    if node.t_cpu <= 0 and vcpus > 0:
        return Fail.CPU
    for tag in inst.excl_tags:
        if node.ptags.get(tag, 0) > 0:
            return Fail.TAGS
    # the same checks on the resources that forthcoming instances will take
    if node.f_mem_forth - inst.mem <= 0:
        return Fail.MEM
    if local and node.f_dsk_forth - inst.dsk <= 0:
        return Fail.DISK
    if node.t_cpu > 0 and node.vcpu_ratio >= 0 and \
            (node.u_cpu_forth + vcpus) / node.t_cpu > node.vcpu_ratio:
        return Fail.CPU
    if local and not node.excl and \
            node.inst_spindles_forth + inst.spindle_use > node.hi_spindles:
        return Fail.DISK
    return None


def check_sec(node: Node, inst: Instance, pidx: int, strict: bool) -> Fail | None:
    """Can ``node`` hold the DRBD secondary of ``inst`` whose primary is node ``pidx``?"""
    if inst.template != "drbd":
        return Fail.DISK
    if node.f_dsk - inst.dsk <= 0:
        return Fail.DISK
    if node.excl and (inst.disk_spindles < 0 or node.f_spindles - inst.disk_spindles < 0):
        return Fail.SPINDLES
    if not strict:
        return None
    if not node.excl and node.inst_spindles + inst.spindle_use > node.hi_spindles:
        return Fail.DISK
    sec_mem = inst.mem if inst.uses_sec_mem else 0
    if sec_mem >= node.unalloc:
        return Fail.MEM
    if node.unalloc <= max(node.r_mem, node.peers.get(pidx, 0) + sec_mem) and not node.fail_n1:
        return Fail.MEM
    if node.f_dsk_forth - inst.dsk <= 0:
        return Fail.DISK
    if not node.excl and node.inst_spindles_forth + inst.spindle_use > node.hi_spindles:
        return Fail.DISK
    return None


def add_pri(node: Node, inst: Instance, snode: Node | None = None) -> None:
    """Make ``inst`` a primary of ``node`` (no checks)."""
    if inst.uses_memory:
        node.unalloc -= inst.mem
    node.fail_n1 = node.unalloc <= node.r_mem
    node.f_mem_forth -= inst.mem
    if inst.local:
        node.f_dsk -= inst.dsk
        node.f_dsk_forth -= inst.dsk
        if node.excl:
            node.f_spindles -= max(0, inst.disk_spindles)
        else:
            node.inst_spindles += 0 if inst.forthcoming else inst.spindle_use
            node.inst_spindles_forth += inst.spindle_use
    if not node.excl:
        node.f_spindles = 0  # Ganeti's calcNewFreeSpindles: 0 on non-exclusive nodes
    _set_pri_common(node, inst, snode, +1)


def remove_pri(node: Node, inst: Instance, snode: Node | None = None) -> None:
    if inst.uses_memory:
        node.unalloc += inst.mem
    node.fail_n1 = node.unalloc <= node.r_mem
    node.f_mem_forth += inst.mem
    if inst.local:
        node.f_dsk += inst.dsk
        node.f_dsk_forth += inst.dsk
        if node.excl:
            node.f_spindles += max(0, inst.disk_spindles)
        else:
            node.inst_spindles -= 0 if inst.forthcoming else inst.spindle_use
            node.inst_spindles_forth -= inst.spindle_use
    if not node.excl:
        node.f_spindles = 0
    _set_pri_common(node, inst, snode, -1)


def _set_pri_common(node: Node, inst: Instance, snode: Node | None, sign: int) -> None:
    if sign > 0:
        node.plist.add(inst.idx)
    else:
        node.plist.discard(inst.idx)
    vcpus = 0 if inst.offline else inst.vcpus
    if not inst.forthcoming:
        node.u_cpu += sign * vcpus
    node.u_cpu_forth += sign * vcpus
    u = inst.util
    ld = node.load
    ld[0] += sign * u[0]
    ld[1] += sign * u[1]
    ld[2] += sign * u[2]
    ld[3] += sign * u[3]
    node.loc_score += sign * inst_loc_score(inst, node, snode)
    for tag in inst.excl_tags:
        node.ptags[tag] = node.ptags.get(tag, 0) + sign
        for loc in node.loc_tags:
            key = (loc, tag)
            node.inst_map[key] = node.inst_map.get(key, 0) + sign


def inst_loc_score(inst: Instance, pnode: Node, snode: Node | None) -> int:
    score = 0
    if snode is not None and pnode.loc_tags:
        score = len(pnode.loc_tags & snode.loc_tags)
    for want in inst.desired:
        if want not in pnode.loc_tags:
            score += 1
    return score


def add_sec(node: Node, inst: Instance, pidx: int) -> None:
    node.slist.add(inst.idx)
    if inst.uses_sec_mem and not inst.forthcoming:
        node.peers[pidx] = node.peers.get(pidx, 0) + inst.mem
        node.r_mem = max(node.r_mem, node.peers[pidx])
    node.fail_n1 = node.unalloc <= node.r_mem
    node.f_dsk -= inst.dsk
    if not inst.forthcoming:  # a forthcoming secondary's disk is not tracked (as at load)
        node.f_dsk_forth -= inst.dsk
    if node.excl:
        node.f_spindles -= max(0, inst.disk_spindles)
    else:
        node.f_spindles = 0
        if inst.local:
            node.inst_spindles += 0 if inst.forthcoming else inst.spindle_use
            node.inst_spindles_forth += inst.spindle_use
    node.load[2] += inst.util[2]


def remove_sec(node: Node, inst: Instance, pidx: int) -> None:
    node.slist.discard(inst.idx)
    if inst.uses_sec_mem and not inst.forthcoming and pidx in node.peers:
        left = node.peers[pidx] - inst.mem
        if left > 0:
            node.peers[pidx] = left
        else:
            del node.peers[pidx]
        node.r_mem = max(node.peers.values(), default=0)
    node.fail_n1 = node.unalloc <= node.r_mem
    node.f_dsk += inst.dsk
    if not inst.forthcoming:
        node.f_dsk_forth += inst.dsk
    if node.excl:
        node.f_spindles += max(0, inst.disk_spindles)
    else:
        node.f_spindles = 0
        if inst.local:
            node.inst_spindles -= 0 if inst.forthcoming else inst.spindle_use
            node.inst_spindles_forth -= inst.spindle_use
    node.load[2] -= inst.util[2]


# --- the whole cluster ----------------------------------------------------------------------


@dataclass
class Cluster:
    groups: list[Group]
    nodes: list[Node]
    instances: list[Instance]
    cluster_tags: tuple[str, ...] = ()
    ipolicy: IPolicy = DEFAULT_IPOLICY
    hypervisor: str | None = None
    excl_prefixes: tuple[str, ...] = ()
    desired_prefixes: tuple[str, ...] = ()
    loc_prefixes: tuple[str, ...] = ()
    node_by_name: dict[str, int] = field(default_factory=dict)
    inst_by_name: dict[str, int] = field(default_factory=dict)

    def group_named(self, key: str) -> Group | None:
        for g in self.groups:
            if key in (g.name, g.uuid):
                return g
        return None

    def group_nodes(self, gidx: int) -> list[Node]:
        return [n for n in self.nodes if n.group == gidx]

    def prepare_instance(self, inst: Instance) -> None:
        """Derive exclusion and desired-location tags of an instance from the cluster tags."""
        inst.excl_tags = tuple(t for t in inst.tags
                               if any(t.startswith(p) for p in self.excl_prefixes))
        inst.desired = tuple(t for t in inst.tags
                             if any(t.startswith(p) for p in self.desired_prefixes))

    def copy(self) -> Cluster:
        other = Cluster(
            groups=self.groups, nodes=[n.copy() for n in self.nodes],
            instances=[i.copy() for i in self.instances], cluster_tags=self.cluster_tags,
            ipolicy=self.ipolicy, hypervisor=self.hypervisor, excl_prefixes=self.excl_prefixes,
            desired_prefixes=self.desired_prefixes, loc_prefixes=self.loc_prefixes,
            node_by_name=self.node_by_name, inst_by_name=dict(self.inst_by_name),
        )
        return other

    def add_instance(self, inst: Instance) -> None:
        inst.idx = len(self.instances)
        self.instances.append(inst)
        self.inst_by_name[inst.name] = inst.idx


def tag_prefixes(cluster_tags: Iterable[str], marker: str) -> tuple[str, ...]:
    return tuple(t[len(marker):] for t in cluster_tags if t.startswith(marker))


def finish_load(cl: Cluster, static_kvm_mem: int = 4096) -> None:
    """Everything derived after reading: tags, primaries/secondaries, peers, memory model."""
    cl.excl_prefixes = tag_prefixes(cl.cluster_tags, "htools:iextags:")
    cl.desired_prefixes = tag_prefixes(cl.cluster_tags, "htools:desiredlocation:")
    cl.loc_prefixes = tag_prefixes(cl.cluster_tags, "htools:nlocation:")
    mig_prefixes = tag_prefixes(cl.cluster_tags, "htools:migration:")
    allow = [t[len("htools:allowmigration:"):].split("::", 1) for t in cl.cluster_tags
             if t.startswith("htools:allowmigration:") and "::" in t]
    for node in cl.nodes:
        node.loc_tags = frozenset(t for t in node.tags
                                  if any(t.startswith(p + ":") for p in cl.loc_prefixes))
        node.mig_tags = frozenset(t for t in node.tags
                                  if any(t.startswith(p + ":") for p in mig_prefixes))
        node.rmig_tags = node.mig_tags | frozenset(a for a, b in allow if b in node.tags)
        pol = cl.groups[node.group].ipolicy
        node.vcpu_ratio = pol.vcpu_ratio
        node.hi_spindles = pol.spindle_ratio * node.t_spindles
        node.u_cpu = node.n_cpu
        node.u_cpu_forth = node.n_cpu
        node.f_mem_forth = node.f_mem
        node.f_dsk_forth = node.f_dsk
    i_mem = _load_instances(cl)
    for node in cl.nodes:
        node.r_mem = max(node.peers.values(), default=0)
        if static_kvm_mem > 0 and cl.hypervisor == "kvm":
            node.n_mem = static_kvm_mem
        recorded = math.trunc(node.t_mem) - node.n_mem - i_mem[node.idx]
        node.x_mem = recorded - node.f_mem
        node.unalloc = recorded - max(0, node.x_mem)
        node.fail_n1 = node.f_mem < node.r_mem
        if node.offline:
            node.fail_n1 = False


NO_UTIL = (0.0, 0.0, 0.0, 0.0)


def _load_instances(cl: Cluster) -> list[int]:
    """Each instance on its nodes (``finish_load``), once per instance of a cluster read in:
    the properties it reads (``uses_memory``, ``local``, ...) inlined, the tag work skipped
    where the cluster has no such tags. Returns the memory of each node's running
    primaries."""
    nodes = cl.nodes
    prepare = bool(cl.excl_prefixes or cl.desired_prefixes)
    i_mem = [0] * len(nodes)
    for inst in cl.instances:
        if prepare:
            cl.prepare_instance(inst)
        forthcoming = inst.forthcoming
        if forthcoming:
            inst.util = NO_UTIL  # not running anywhere yet
        idx = inst.idx
        p = nodes[inst.pnode]
        s = nodes[inst.snode] if inst.snode >= 0 else None
        # the reported free disk/memory already include existing instances
        p.plist.add(idx)
        status = inst.status
        vcpus = 0 if status == "ADMIN_offline" else inst.vcpus
        if not forthcoming:  # forthcoming instances only count "forth"
            p.u_cpu += vcpus
        p.u_cpu_forth += vcpus
        util = inst.util
        load = p.load
        load[0] += util[0]
        load[1] += util[1]
        load[2] += util[2]
        load[3] += util[3]
        local = inst.template in LOCAL_STORAGE
        spindle_use = inst.spindle_use
        if local and not p.excl:
            if not forthcoming:
                p.inst_spindles += spindle_use
            p.inst_spindles_forth += spindle_use
        if inst.desired or (s is not None and p.loc_tags):
            p.loc_score += inst_loc_score(inst, p, s)
        for tag in inst.excl_tags:
            p.ptags[tag] = p.ptags.get(tag, 0) + 1
            for loc in p.loc_tags:
                p.inst_map[(loc, tag)] = p.inst_map.get((loc, tag), 0) + 1
        if status in MEM_STATES and not forthcoming:
            i_mem[p.idx] += inst.mem
        else:
            p.f_mem_forth -= inst.mem
        if forthcoming and local:
            p.f_dsk_forth -= inst.dsk
        if s is not None:
            s.slist.add(idx)
            s.load[2] += util[2]
            if local and not s.excl:
                if not forthcoming:
                    s.inst_spindles += spindle_use
                s.inst_spindles_forth += spindle_use
            if status != "ADMIN_offline" and inst.auto_balance and not forthcoming:
                s.peers[p.idx] = s.peers.get(p.idx, 0) + inst.mem
    return i_mem
