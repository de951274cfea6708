"""Capacity: how many more instances of a spec fit, and where (hspace's job).

Standard mode places copies of one spec until the first failure. Tiered mode starts from the
biggest spec the policy allows and shrinks it along the most frequent failure reason whenever
nothing more fits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from herder.alloc.metrics import Stats
from herder.alloc.model import Cluster, Fail, Group, Instance, ISpec, Node
from herder.alloc.placement import choose_group, commit, group_results, n1_ok
from herder.alloc.protocol import Options

UNIT_MEM = 64
UNIT_DSK = 256
UNIT_CPU = 1


@dataclass
class Placed:
    name: str
    nodes: tuple[int, ...]
    spec: tuple[int, int, int, int]  # mem, disk, vcpus, spindles


@dataclass
class CapacityRun:
    placed: list[Placed] = field(default_factory=list)
    fails: Counter[Fail] = field(default_factory=Counter)
    stopped_by_limit: bool = False


@dataclass
class Setup:
    """Which groups may receive instances and which nodes the N+1 check covers."""

    allowed: list[int]
    scope: list[Node]
    bad_nodes: list[Node]
    bad_groups: list[Group]
    blocked: bool  # existing N+1 errors and no option to accept them


def prepare(cl: Cluster, opts: Options, accept_existing: bool, independent: bool) -> Setup:
    bad_nodes = [n for n in cl.nodes if not n.offline and n.fail_n1]
    unalloc = {g.idx for g in cl.groups if g.alloc_policy == "unallocable"}
    bad_groups: list[Group] = []
    if opts.capacity_checks:
        for g in cl.groups:
            members = [n for n in cl.nodes if n.group == g.idx]
            if members and not n1_ok(cl, members):
                bad_groups.append(g)
    if not accept_existing:
        unalloc |= {n.group for n in bad_nodes}
    scope = list(cl.nodes)
    if accept_existing:
        # existing errors accepted: offline nodes need not be evacuable
        scope = [n for n in scope if not n.offline]
    if independent:
        unalloc |= {g.idx for g in bad_groups}
        bad = {g.idx for g in bad_groups}
        scope = [n for n in scope if n.group not in bad]
    allowed = [g.idx for g in cl.groups if g.idx not in unalloc]
    blocked = bool(bad_nodes) and not (accept_existing or independent)
    return Setup(allowed, scope, bad_nodes, bad_groups, blocked)


def spec_instance(name: str, mem: int, disk: int, vcpus: int, spindles: int, template: str,
                  spindle_use: int) -> Instance:
    """A new instance of a spec: one disk carrying ``spindles``, ``spindle_use`` for policy."""
    return Instance(name=name, mem=mem, dsk=disk, vcpus=vcpus, template=template,
                    disks=[(disk, spindles)], spindle_use=spindle_use)


def inst_spec(inst: Instance, excl: bool) -> tuple[int, int, int, int]:
    sp = inst.disks[0][1] if inst.disks and inst.disks[0][1] is not None else inst.spindle_use
    return (inst.mem, inst.dsk, inst.vcpus, sp)


def required_nodes(template: str) -> int:
    return 2 if template == "drbd" else 1


class Capacity:
    def __init__(self, cl: Cluster, setup: Setup, opts: Options) -> None:
        self.cl = cl
        self.setup = setup
        self.opts = opts
        self.stats = Stats(cl.nodes)
        self.counter = 0
        self.version = 0
        self.dead_ends: set[tuple[object, ...]] = set()
        self.cache: dict[tuple[object, ...], tuple[tuple[int, ...] | None, Counter[Fail]]] = {}
        self.excl = any(n.excl for n in cl.nodes)

    def attempt(self, proto: Instance, commit_it: bool) -> tuple[tuple[int, ...] | None,
                                                                   Counter[Fail]]:
        """Try to place one instance of ``proto``'s spec (results cached per cluster state)."""
        cl = self.cl
        key = (self.version, proto.mem, proto.dsk, proto.vcpus, tuple(proto.disks),
               proto.spindle_use, proto.template)
        hit = self.cache.get(key)
        if hit is None:
            inst = proto.copy()
            inst.name = f"new-{self.counter}"
            inst.idx = -1
            cl.prepare_instance(inst)
            req = required_nodes(inst.template)
            opts = self.opts
            if inst.template == "drbd" and opts.capacity_checks:
                opts = Options(ignore_soft_errors=opts.ignore_soft_errors, capacity_checks=False)
            results, _ = group_results(cl, inst, req, opts, None, self.setup.allowed,
                                       self.stats, self.setup.scope)
            fails: Counter[Fail] = Counter()
            for r in results:
                fails.update(r.fails)
            best = choose_group(cl, results)
            nodes = best.best.nodes if best is not None and best.best is not None else None
            hit = (nodes, fails)
            self.cache[key] = hit
        nodes, fails = hit
        if nodes is None or not commit_it:
            return nodes, fails
        inst = proto.copy()
        inst.name = f"new-{self.counter}"
        inst.idx = -1
        cl.prepare_instance(inst)
        commit(cl, inst, nodes)
        for i in nodes:
            self.stats.update(cl.nodes[i])
        self.counter += 1
        self.version += 1
        self.cache.clear()
        return nodes, fails

    def iterate(self, proto: Instance, limit: int | None, run: CapacityRun) -> None:
        while limit is None or len(run.placed) < limit:
            if self.setup.blocked:
                run.fails = Counter({Fail.N1: 1})
                return
            nodes, fails = self.attempt(proto, True)
            if nodes is None:
                run.fails = fails
                return
            run.placed.append(Placed(self.cl.instances[-1].name, nodes,
                                     inst_spec(proto, self.excl)))
        run.stopped_by_limit = True

    def tiered(self, proto: Instance, limit: int | None, run: CapacityRun) -> None:
        """hspace's tiered allocation: shrink along the most frequent failure reason."""
        pending: list[tuple[Instance, list[Fail]]] = []  # levels whose fallback is still open
        cur: Instance | None = proto
        while cur is not None:
            before = len(run.placed)
            self.iterate(cur, limit, run)
            if run.stopped_by_limit or self.setup.blocked:
                return
            order = sorted(((f, run.fails.get(f, 0)) for f in Fail), key=lambda t: t[1])
            modes = [f for f, c in order if c > 0]
            if len(run.placed) > before:
                pending = []
            pending.append((cur, modes))
            nxt = shrink(cur, modes[-1], self.excl) if modes else None
            if nxt is not None:
                cur = nxt
                continue
            cur = None
            while pending and cur is None:
                inst, lvl_modes = pending.pop()
                for mode in reversed(lvl_modes):
                    cur = self.suffices(inst, mode)
                    if cur is not None:
                        break
            pending = []

    def suffices(self, inst: Instance, mode: Fail) -> Instance | None:
        """Shrink along ``mode`` while that failure persists, until the spec fits."""
        seen: list[tuple[object, ...]] = []
        cur: Instance | None = shrink(inst, mode, self.excl)
        result: Instance | None = None
        while cur is not None:
            key = (self.version, mode, cur.mem, cur.dsk, cur.vcpus, tuple(cur.disks))
            if key in self.dead_ends:
                break
            seen.append(key)
            nodes, fails = self.attempt(cur, False)
            if nodes is not None:
                result = cur
                break
            if fails.get(mode, 0) == 0:
                break
            cur = shrink(cur, mode, self.excl)
        if result is None:
            self.dead_ends.update(seen)
        return result


def shrink(inst: Instance, mode: Fail, excl: bool) -> Instance | None:
    out = inst.copy()
    if mode == Fail.MEM:
        out.mem -= UNIT_MEM
        return out if out.mem >= UNIT_MEM else None
    if mode == Fail.DISK:
        out.disks = [(s - UNIT_DSK, sp) for s, sp in inst.disks]
        out.dsk -= UNIT_DSK * len(inst.disks)
        return None if any(s < UNIT_DSK for s, _ in out.disks) else out
    if mode == Fail.CPU:
        out.vcpus -= UNIT_CPU
        return out if out.vcpus >= UNIT_CPU else None
    if mode == Fail.SPINDLES and len(inst.disks) == 1:
        size, sp = inst.disks[0]
        if sp is None or sp < 2:
            return None
        out.disks = [(size, sp - 1)]
        return out
    return None


def tspec(placed: Sequence[Placed]) -> str:
    runs: list[tuple[tuple[int, int, int, int], int]] = []  # (spec, how many in a row)
    for p in placed:
        if runs and runs[-1][0] == p.spec:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((p.spec, 1))
    return " ".join(f"{','.join(map(str, spec))}={count}" for spec, count in runs)


def standard_spec(spec: ISpec) -> tuple[int, int, int, int]:
    return (spec.memory, spec.disk_size, spec.cpus, spec.spindle_use)
