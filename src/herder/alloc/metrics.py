"""The cluster score: a weighted sum of per-node statistics, kept incrementally.

Lower is better. Each online node contributes a vector of values (free memory fraction, disk
fraction, vCPU ratio, instance counts as load, ...). Most components enter as the population
standard deviation over online nodes, a few as plain sums; offline nodes only count the
instances still on them. ``Stats`` keeps per-component sums and sums of squares so the score
after changing a handful of nodes costs O(components), never a pass over the cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from herder.alloc.model import Instance, Node, inst_loc_score

# Components of the per-node vector, in this order.
#  0 free memory   1 free disk   2 N+1 failure count   3 reserved memory   4 vcpu ratio
#  5 cpu load      6 mem load    7 disk load           8 net load          9 exclusion tags
# 10 spindles     11 mem forth  12 disk forth         13 vcpu forth       14 spindles forth
# 15 location     16 reserved memory (sum)
NCOMP = 17
STD = (0, 1, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14)
SUM = (2, 9, 15, 16)
# (kind, index, weight) in the order the terms are added up.
TERMS: tuple[tuple[str, int, float], ...] = (
    ("std", 0, 0.5), ("std", 1, 0.5), ("sum", 2, 1.0), ("std", 3, 1.0),
    ("off_all", 0, 4.0), ("off_pri", 0, 16.0), ("std", 4, 0.5), ("std", 5, 1.0),
    ("std", 6, 1.0), ("std", 7, 1.0), ("std", 8, 1.0), ("sum", 9, 2.0), ("std", 10, 0.5),
    ("std", 11, 0.5), ("std", 12, 0.5), ("std", 13, 0.5), ("std", 14, 0.5),
    ("sum", 15, 1.0), ("locx", 0, 1.0), ("sum", 16, 0.25),
)
TERM_NAMES = (
    "free_mem_cv", "free_disk_cv", "n1_cnt", "reserved_mem_cv", "offline_all_cnt",
    "offline_pri_cnt", "vcpu_ratio_cv", "cpu_load_cv", "mem_load_cv", "disk_load_cv",
    "net_load_cv", "pri_tags_score", "spindles_cv", "free_mem_cv_forth", "free_disk_cv_forth",
    "vcpu_ratio_cv_forth", "spindles_cv_forth", "location_score", "location_exclusion_score",
    "reserved_mem_rtotal",
)

Vec = tuple[float, ...]
# TERMS' kinds as small ints, for Stats.score_change
_STD, _SUM, _CONST, _LOCX = range(4)
# a term of Stats.score_change: kind, component, weight, value now, shift, sum, sum of squares
BaseTerm = tuple[int, int, float, float, float, float, float]


def node_vec(n: Node) -> Vec:
    """The per-node values of an online node. A fraction of a zero total is 0.0 (a disk
    fraction 1.0); the divisions are written out (not a helper's call): this and ``_vec_of``
    run for every node of a cluster, several times per request."""
    t_mem = n.t_mem
    t_cpu = n.t_cpu
    hi_sp = n.hi_spindles
    if n.excl:
        p_dsk = n.f_spindles / n.t_spindles if n.t_spindles else 1.0
        p_dsk_f = p_dsk
    else:
        t_dsk = n.t_dsk
        p_dsk = n.f_dsk / t_dsk if t_dsk else 1.0
        p_dsk_f = n.f_dsk_forth / t_dsk if t_dsk else 1.0
    speed = n.cpu_speed or 1.0
    p_rem = n.r_mem / t_mem if t_mem else 0.0
    ptags = 0
    for c in n.ptags.values():
        if c > 1:
            ptags += c - 1
    ld = n.load
    return (
        n.unalloc / t_mem if t_mem else 0.0,
        p_dsk,
        float(len(n.plist) + len(n.slist)) if n.fail_n1 else 0.0,
        p_rem,
        (n.u_cpu / t_cpu if t_cpu else 0.0) / speed,
        ld[0], ld[1], ld[2], ld[3],
        float(ptags),
        n.inst_spindles / hi_sp if hi_sp else 0.0,
        n.f_mem_forth / t_mem if t_mem else 0.0,
        p_dsk_f,
        (n.u_cpu_forth / t_cpu if t_cpu else 0.0) / speed,
        n.inst_spindles_forth / hi_sp if hi_sp else 0.0,
        float(n.loc_score),
        p_rem,
    )


class Stats:
    """Aggregates of the node vectors of a set of nodes; scores them and changes of them."""

    __slots__ = ("base", "keys", "maps", "n", "off_all", "off_pri", "offc", "q", "s", "shift",
                 "total", "vecs")

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.s = [0.0] * NCOMP
        self.q = [0.0] * NCOMP
        self.n = 0
        self.off_all = 0
        self.off_pri = 0
        self.vecs: dict[int, Vec] = {}
        self.offc: dict[int, tuple[int, int]] = {}
        self.maps: dict[int, dict[tuple[str, str], int]] = {}
        # location-exclusion map: (location tag, exclusion tag) -> count
        self.total: dict[tuple[str, str], int] = {}
        self.keys = 0
        self.base: list[BaseTerm] | None = None  # see score_change
        # Sums are kept around a per-component shift (the mean at build time) so the variance
        # does not come from subtracting two large, nearly equal numbers.
        nodes = list(nodes)
        self.shift = [0.0] * NCOMP
        online = {n.idx: node_vec(n) for n in nodes if not n.offline}
        if online:
            columns = list(zip(*online.values(), strict=True))
            for k in STD:
                self.shift[k] = sum(columns[k]) / len(online)
        added: list[Vec] = []
        for node in nodes:
            vec = online.get(node.idx)
            if vec is None:
                self.add_node(node)
            else:
                self._count_online(node, vec)
                added.append(vec)
        # add_node's sums, a component at a time over the nodes (the same additions in the
        # same order, without a loop per node over the components)
        s, q, c = self.s, self.q, self.shift
        for k in range(NCOMP):
            ck, sk, qk = c[k], s[k], q[k]
            for v in added:
                x = v[k] - ck
                sk += x
                qk += x * x
            s[k], q[k] = sk, qk

    def add_node(self, node: Node, vec: Vec | None = None) -> None:
        """Count a node in; ``vec`` is its ``node_vec`` when the caller has it already."""
        if node.offline:
            a, p = len(node.plist) + len(node.slist), len(node.plist)
            self.off_all += a
            self.off_pri += p
            self.offc[node.idx] = (a, p)
            self.base = None
            return
        v = vec if vec is not None else node_vec(node)
        self._count_online(node, v)
        s, q, c = self.s, self.q, self.shift
        for k in range(NCOMP):
            x = v[k] - c[k]
            s[k] += x
            q[k] += x * x

    def _count_online(self, node: Node, v: Vec) -> None:
        """An online node's vector and location-exclusion counts, not yet in the sums."""
        self.base = None
        self.vecs[node.idx] = v
        self.n += 1
        if node.inst_map:
            self.maps[node.idx] = dict(node.inst_map)
            for key, count in node.inst_map.items():
                old = self.total.get(key, 0)
                self.total[key] = old + count
                if old <= 0 < old + count:
                    self.keys += 1

    def remove_node(self, node: Node) -> None:
        """Take out a node as it was when last added."""
        self.base = None
        if node.idx in self.offc:
            a, p = self.offc.pop(node.idx)
            self.off_all -= a
            self.off_pri -= p
            return
        v = self.vecs.pop(node.idx)
        self.n -= 1
        s, q, c = self.s, self.q, self.shift
        for k in range(NCOMP):
            x = v[k] - c[k]
            s[k] -= x
            q[k] -= x * x
        for key, count in self.maps.pop(node.idx, {}).items():
            old = self.total.get(key, 0)
            self.total[key] = old - count
            if old > 0 >= old - count:
                self.keys -= 1

    def update(self, node: Node) -> None:
        """Re-read a node after it changed."""
        self.remove_node(node)
        self.add_node(node)

    def delta(self, old: Vec, new: Vec) -> tuple[list[float], list[float]]:
        """One node's change as (sum, sum-of-squares) increments, for ``score_pair``."""
        c = self.shift
        ds = [0.0] * NCOMP
        dq = [0.0] * NCOMP
        for k in range(NCOMP):
            a = old[k] - c[k]
            b = new[k] - c[k]
            ds[k] = b - a
            dq[k] = b * b - a * a
        return ds, dq

    def score_pair(self, d1: tuple[list[float], list[float]],
                   d2: tuple[list[float], list[float]], extra: float) -> float:
        """Score after two precomputed node changes (the hot loop of pair placement)."""
        s, q, n = self.s, self.q, self.n
        ds1, dq1 = d1
        ds2, dq2 = d2
        total = 0.0
        nn = n * n
        for kind, k, w in TERMS:
            if kind == "std":
                if n:
                    sk = s[k] + ds1[k] + ds2[k]
                    var = (n * (q[k] + dq1[k] + dq2[k]) - sk * sk) / nn
                    if var > 1e-24:
                        total += w * math.sqrt(var)
            elif kind == "sum":
                total += w * (s[k] + ds1[k] + ds2[k])
            elif kind == "off_all":
                total += w * self.off_all
            elif kind == "off_pri":
                total += w * self.off_pri
            else:
                total += w * (self.locx() + extra)
        return total

    def score_change(self, old: Vec, new: Vec, locx_delta: float = 0.0) -> float:
        """``score_delta(((old, new),), locx_delta)``, bit for bit, for the hot loops that
        score one changed node per candidate (every node of a 10,000-node group): the terms of
        unchanged components are the current ones, computed once (``base``), and no sums are
        copied. The changed terms take exactly ``score_delta``'s float operations."""
        n = self.n
        if not n:
            return self.score_delta(((old, new),), locx_delta)
        base = self.base if self.base is not None else self._base_terms()
        nn = n * n
        total = 0.0
        for kind, k, w, now, ck, sk, qk in base:
            if kind == _STD:
                a = old[k]
                b = new[k]
                if a == b:
                    total += now
                    continue
                a -= ck
                b -= ck
                sk += b - a
                var = (n * (qk + (b * b - a * a)) - sk * sk) / nn
                total += w * (math.sqrt(var) if var > 1e-24 else 0.0)
            elif kind == _SUM:
                a = old[k]
                b = new[k]
                if a == b:
                    total += now
                else:
                    total += w * (sk + ((b - ck) - (a - ck)))
            elif kind == _LOCX:
                total += w * (now + locx_delta)
            else:
                total += now
        return total

    def _base_terms(self) -> list[BaseTerm]:
        """Each term as (kind, component, weight, its value now, and the component's shift,
        sum and sum of squares; for the location-exclusion term the count it weighs), for
        ``score_change``: read once per state, not once per candidate."""
        n = self.n
        s, q, c = self.s, self.q, self.shift
        base: list[BaseTerm] = []
        for kind, k, w in TERMS:
            if kind == "std":
                var = (n * q[k] - s[k] * s[k]) / (n * n)
                now = w * (math.sqrt(var) if var > 1e-24 else 0.0)
                base.append((_STD, k, w, now, c[k], s[k], q[k]))
            elif kind == "sum":
                base.append((_SUM, k, w, w * s[k], c[k], s[k], q[k]))
            elif kind == "off_all":
                base.append((_CONST, k, w, w * (self.off_all + 0), 0.0, 0.0, 0.0))
            elif kind == "off_pri":
                base.append((_CONST, k, w, w * (self.off_pri + 0), 0.0, 0.0, 0.0))
            else:
                base.append((_LOCX, k, w, self.locx(), 0.0, 0.0, 0.0))
        self.base = base
        return base

    def locx(self) -> float:
        total = 0
        for c in self.total.values():
            total += c
        return float(total - self.keys)

    def score(self) -> float:
        return self.score_delta(())

    def score_delta(self, changes: Sequence[tuple[Vec, Vec]], locx_delta: float = 0.0,
                    off_delta: tuple[int, int] = (0, 0)) -> float:
        """The score after replacing some online nodes' vectors (old, new)."""
        s = self.s
        q = self.q
        n = self.n
        if changes:
            s = list(s)
            q = list(q)
            c = self.shift
            for old, new in changes:
                for k in range(NCOMP):
                    a = old[k]
                    b = new[k]
                    if a != b:
                        a -= c[k]
                        b -= c[k]
                        s[k] += b - a
                        q[k] += b * b - a * a
        total = 0.0
        for kind, k, w in TERMS:
            if kind == "std":
                if n:
                    var = (n * q[k] - s[k] * s[k]) / (n * n)
                    total += w * (math.sqrt(var) if var > 1e-24 else 0.0)
            elif kind == "sum":
                total += w * s[k]
            elif kind == "off_all":
                total += w * (self.off_all + off_delta[0])
            elif kind == "off_pri":
                total += w * (self.off_pri + off_delta[1])
            else:
                total += w * (self.locx() + locx_delta)
        return total

    def detail(self) -> list[tuple[str, float, float]]:
        """(name, value, weight) of every term — what ``hbal -v -v -v`` calls coefficients."""
        out = []
        n = self.n
        for name, (kind, k, w) in zip(TERM_NAMES, TERMS, strict=True):
            if kind == "std":
                var = (n * self.q[k] - self.s[k] ** 2) / (n * n) if n else 0.0
                val = math.sqrt(var) if var > 1e-24 else 0.0
            elif kind == "sum":
                val = self.s[k]
            elif kind == "off_all":
                val = float(self.off_all)
            elif kind == "off_pri":
                val = float(self.off_pri)
            else:
                val = self.locx()
            out.append((name, val, w))
        return out


def locx_delta_pri(stats: Stats, node: Node, excl_tags: Sequence[str], sign: int) -> float:
    """Change of the location-exclusion term when an instance joins (+1)/leaves (-1) a node."""
    if not excl_tags or not node.loc_tags:
        return 0.0
    delta = 0.0
    for loc in node.loc_tags:
        for tag in excl_tags:
            cur = stats.total.get((loc, tag), 0)
            if sign > 0:
                delta += 0.0 if cur == 0 else 1.0
            else:
                delta -= 0.0 if cur <= 1 else 1.0
    return delta


def full_score(nodes: Iterable[Node]) -> float:
    return Stats(nodes).score()


def _vec_of(n: Node, unalloc: float, f_dsk: float, f_dsk_forth: float, f_spindles: float,
            n1: bool, count: int, r_mem: float, u_cpu: float, u_cpu_forth: float,
            load: Sequence[float], ptags: int, isp: float, isp_forth: float,
            f_mem_forth: float, loc: float, /) -> Vec:
    """A node's vector with some of its values changed (positional: once per candidate node,
    keywords cost a third of the call)."""
    t_mem = n.t_mem
    t_cpu = n.t_cpu
    hi_sp = n.hi_spindles
    if n.excl:
        p_dsk = f_spindles / n.t_spindles if n.t_spindles else 1.0
        p_dsk_f = p_dsk
    else:
        t_dsk = n.t_dsk
        p_dsk = f_dsk / t_dsk if t_dsk else 1.0
        p_dsk_f = f_dsk_forth / t_dsk if t_dsk else 1.0
    speed = n.cpu_speed or 1.0
    p_rem = r_mem / t_mem if t_mem else 0.0
    return (
        unalloc / t_mem if t_mem else 0.0, p_dsk, float(count) if n1 else 0.0, p_rem,
        (u_cpu / t_cpu if t_cpu else 0.0) / speed, load[0], load[1], load[2], load[3],
        float(ptags), isp / hi_sp if hi_sp else 0.0, f_mem_forth / t_mem if t_mem else 0.0,
        p_dsk_f, (u_cpu_forth / t_cpu if t_cpu else 0.0) / speed,
        isp_forth / hi_sp if hi_sp else 0.0, loc, p_rem,
    )


def _ptags_score(ptags: dict[str, int], extra: Sequence[str] = ()) -> int:
    total = 0
    for tag, c in ptags.items():
        if tag in extra:
            c += extra.count(tag)
        if c > 1:
            total += c - 1
    for tag in set(extra):
        if tag not in ptags:
            c = extra.count(tag)
            if c > 1:
                total += c - 1
    return total


def pri_vec(n: Node, inst: Instance) -> Vec:
    """``node_vec`` of ``n`` after ``add_pri(n, inst)``, without copying the node."""
    unalloc = n.unalloc - (inst.mem if inst.uses_memory else 0)
    f_dsk, f_dsk_forth, f_sp = n.f_dsk, n.f_dsk_forth, n.f_spindles
    isp, isp_f = n.inst_spindles, n.inst_spindles_forth
    if inst.local:
        f_dsk -= inst.dsk
        f_dsk_forth -= inst.dsk
        if n.excl:
            f_sp -= max(0, inst.disk_spindles)
        else:
            isp += 0 if inst.forthcoming else inst.spindle_use
            isp_f += inst.spindle_use
    vcpus = 0 if inst.offline else inst.vcpus
    u = inst.util
    ld = n.load
    return _vec_of(  # unalloc, f_dsk, f_dsk_forth, f_spindles, n1, count, r_mem, u_cpu,
        # u_cpu_forth, load, ptags, isp, isp_forth, f_mem_forth, loc
        n, unalloc, f_dsk, f_dsk_forth, f_sp, unalloc <= n.r_mem,
        len(n.plist) + len(n.slist) + 1, n.r_mem, n.u_cpu + (0 if inst.forthcoming else vcpus),
        n.u_cpu_forth + vcpus, (ld[0] + u[0], ld[1] + u[1], ld[2] + u[2], ld[3] + u[3]),
        _ptags_score(n.ptags, inst.excl_tags), isp, isp_f, n.f_mem_forth - inst.mem,
        float(n.loc_score + inst_loc_score(inst, n, None)),
    )


def sec_vec(n: Node, inst: Instance, pidx: int) -> Vec:
    """``node_vec`` of ``n`` after ``add_sec(n, inst, pidx)``, without copying the node."""
    r_mem = n.r_mem
    if inst.uses_sec_mem and not inst.forthcoming:
        r_mem = max(r_mem, n.peers.get(pidx, 0) + inst.mem)
    f_dsk_forth = n.f_dsk_forth - (0 if inst.forthcoming else inst.dsk)
    f_sp = n.f_spindles
    isp, isp_f = n.inst_spindles, n.inst_spindles_forth
    if n.excl:
        f_sp -= max(0, inst.disk_spindles)
    elif inst.local:
        isp += 0 if inst.forthcoming else inst.spindle_use
        isp_f += inst.spindle_use
    ld = n.load
    return _vec_of(  # as pri_vec's
        n, n.unalloc, n.f_dsk - inst.dsk, f_dsk_forth, f_sp, n.unalloc <= r_mem,
        len(n.plist) + len(n.slist) + 1, r_mem, n.u_cpu, n.u_cpu_forth,
        (ld[0], ld[1], ld[2] + inst.util[2], ld[3]), _ptags_score(n.ptags), isp, isp_f,
        n.f_mem_forth, float(n.loc_score),
    )
