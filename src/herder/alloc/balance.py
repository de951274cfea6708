"""Balancing: the sequence of instance moves that lowers the cluster score most (hbal's job).

Each step tries, for every movable instance and every target node of its group, the moves
Ganeti can run (failover, replace-secondary and their combinations, failover-to-any for shared
storage) and keeps the best one. Every candidate is scored from the per-node vectors of the
three or four nodes it touches, never by rescoring the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from herder.alloc.metrics import Stats, locx_delta_pri, node_vec
from herder.alloc.model import (
    EXTERNAL_MIRROR,
    Cluster,
    Fail,
    Instance,
    Node,
    add_pri,
    add_sec,
    check_pri,
    check_sec,
    remove_pri,
    remove_sec,
)

# Improvements below this are float noise of the running sums, not better placements.
EPS = 1e-9
TIE = 1e-10
# Groups larger than this are balanced from shortlists: the instances of the SHORTLIST fullest
# nodes, moved to the SHORTLIST emptiest ones (hbal tries every instance and node).
PRUNE_NODES = 64
SHORTLIST = 16


@dataclass
class BalanceOptions:
    max_moves: int = -1
    min_score: float = 1e-9
    min_gain: float = 0.01
    min_gain_limit: float = 0.1
    ignore_soft_errors: bool = False
    evac_mode: bool = False
    restricted_migration: bool = False
    disk_moves: bool = True
    instance_moves: bool = True
    # stop at the first move touching a node an earlier move touches: only the first set of
    # moves that can run in parallel (a caller that plans again after running them)
    first_set_only: bool = False


@dataclass
class Move:
    instance: str
    old: tuple[int, int]
    new: tuple[int, int]
    actions: list[str]  # e.g. ["f", "r:node-1"]
    score: float
    nodes: frozenset[int] = field(default_factory=frozenset)


def optimal_score(nodes: Sequence[Node]) -> float:
    online = [n for n in nodes if not n.offline]
    total = sum(n.t_mem for n in online)
    peer = float(sum(n.r_mem for n in online))
    big = max((n.t_mem for n in online), default=0.0)
    if total <= 0 or total - big <= 0:
        return 0.0
    return 0.25 * (peer / (total - big) - peer / total)


def _mig_ok(src: Node, dst: Node) -> bool:
    return src.mig_tags <= dst.rmig_tags


class Balancer:
    """Greedy hbal-style balancing of one group (mutates the cluster as moves are accepted)."""

    def __init__(self, cl: Cluster, group: int, opts: BalanceOptions) -> None:
        self.cl = cl
        self.opts = opts
        self.nodes = [n for n in cl.nodes if n.group == group]
        self.node_set = {n.idx for n in self.nodes}
        self.stats = Stats(self.nodes)
        self.insts = [i for i in cl.instances if i.pnode in self.node_set]

    def score(self) -> float:
        return self.stats.score()

    # candidate evaluation ------------------------------------------------------------------

    def _victims(self) -> list[Instance]:
        out = []
        for inst in self.insts:
            if not inst.movable or not inst.auto_balance:
                continue
            if inst.template not in EXTERNAL_MIRROR and inst.template != "drbd":
                continue
            if inst.snode >= 0 and inst.snode not in self.node_set:
                continue  # split across groups
            if self.opts.evac_mode:
                p_off = self.cl.nodes[inst.pnode].offline
                s_off = inst.snode >= 0 and self.cl.nodes[inst.snode].offline
                if not (p_off or s_off):
                    continue
            out.append(inst)
        return out

    def _moves_for(self, inst: Instance, t: Node | None) -> list[list[str]]:
        """Move programs for ``inst`` with target ``t`` (None: target-less failover)."""
        o = self.opts
        if inst.template in EXTERNAL_MIRROR:
            if t is None or not o.instance_moves:
                return []
            return [[f"fa:{t.name}"]]
        p = self.cl.nodes[inst.pnode]
        s = self.cl.nodes[inst.snode]
        use_sec = not s.offline and o.instance_moves
        if t is None:
            return [["f"]] if use_sec else []
        r = f"r:{t.name}"
        if not o.disk_moves:
            return []
        if not o.instance_moves:
            return [[r]]
        if o.restricted_migration and not p.offline:
            return [[r]]
        if use_sec and not o.restricted_migration:
            return [[r], [r, "f"], ["f", r, "f"], ["f", r]]
        if use_sec:
            return [[r], [r, "f"], ["f", r]]
        return [[r], [r, "f"]]

    def _evaluate(self, inst: Instance, prog: list[str]) -> tuple[float, tuple[int, int]] | None:
        """Score after running ``prog`` on ``inst``, or None when a check fails."""
        cl = self.cl
        p0, s0 = inst.pnode, inst.snode
        p, s = p0, s0
        chain_ok = True
        for act in prog:
            if act == "f":
                if not _mig_ok(cl.nodes[p], cl.nodes[s]):
                    chain_ok = False
                    break
                p, s = s, p
            elif act.startswith("r:"):
                s = cl.node_by_name[act[2:]]
            else:  # fa:
                t = cl.node_by_name[act[3:]]
                if not _mig_ok(cl.nodes[p], cl.nodes[t]):
                    chain_ok = False
                    break
                p = t
        if not chain_ok or p == s:
            return None
        touched = {i for i in (p0, s0, p, s) if i >= 0}
        copies = {i: cl.nodes[i].copy() for i in touched}
        old_p = copies[p0]
        old_s = copies[s0] if s0 >= 0 else None
        stats = self.stats
        lx = locx_delta_pri(stats, cl.nodes[p0], inst.excl_tags, -1) if p0 != p else 0.0
        remove_pri(old_p, inst, old_s)
        if old_s is not None:
            remove_sec(old_s, inst, p0)
        np_ = copies[p]
        ns = copies[s] if s >= 0 else None
        force = self.opts.ignore_soft_errors
        # moves away from an offline primary only need the hard checks (as hbal)
        strict = not (force or cl.nodes[p0].offline)
        # a primary keeping its role only has to pass the hard checks again
        bad: Fail | None = check_pri(np_, inst, strict and p != p0)
        if bad is None and old_s is not None and len(prog) == 3:
            # replace-primary runs on the old secondary for a while: it must host the instance
            bad = check_pri(old_s, inst, strict)
        if bad is None and ns is not None and (s != s0 or p != p0):
            s_off = s0 >= 0 and cl.nodes[s0].offline
            bad = check_sec(ns, inst, p, strict and not s_off)
        if bad is not None:
            return None
        if p0 != p:
            lx += locx_delta_pri(stats, cl.nodes[p], inst.excl_tags, +1)
        add_pri(np_, inst, ns)
        if ns is not None:
            add_sec(ns, inst, p)
        changes = []
        off_all = off_pri = 0
        for i in touched:
            node = cl.nodes[i]
            if node.offline:
                c = copies[i]
                a0, p_0 = stats.offc.get(i, (0, 0))
                off_all += len(c.plist) + len(c.slist) - a0
                off_pri += len(c.plist) - p_0
            else:
                changes.append((stats.vecs[i], node_vec(copies[i])))
        return stats.score_delta(changes, lx, (off_all, off_pri)), (p, s)

    def _shortlists(self, online: list[Node]) -> tuple[set[int] | None, list[Node]]:
        """Above PRUNE_NODES nodes: instances of the fullest nodes, the emptiest targets."""
        if len(online) <= PRUNE_NODES:
            return None, online

        def fill(n: Node) -> float:
            v = self.stats.vecs[n.idx]
            return v[5] + v[6] + v[7] + v[8] - v[0] - v[1]

        ranked = sorted(online, key=fill)
        sources = {n.idx for n in ranked[-SHORTLIST:]}
        sources |= {n.idx for n in self.nodes if n.offline}
        return sources, ranked[:SHORTLIST]

    def best_move(self, cur: float) -> Move | None:
        best: Move | None = None
        online = [n for n in self.nodes if not n.offline]
        sources, online = self._shortlists(online)
        for inst in self._victims():
            if sources is not None and inst.pnode not in sources and inst.snode not in sources:
                continue
            progs: list[list[str]] = list(self._moves_for(inst, None))
            for t in online:
                if t.idx in (inst.pnode, inst.snode):
                    continue
                progs.extend(self._moves_for(inst, t))
            for prog in progs:
                res = self._evaluate(inst, prog)
                if res is None:
                    continue
                score, new = res
                # hbal keeps the earlier of equal candidates; "equal" allows for rounding
                if (best is None and score < cur - EPS) or \
                        (best is not None and score < best.score - TIE):
                    best = Move(inst.name, (inst.pnode, inst.snode), new, prog, score,
                                frozenset(i for i in (inst.pnode, inst.snode, *new) if i >= 0))
        return best

    def apply(self, mv: Move) -> None:
        cl = self.cl
        inst = cl.instances[cl.inst_by_name[mv.instance]]
        p0, s0 = mv.old
        remove_pri(cl.nodes[p0], inst, cl.nodes[s0] if s0 >= 0 else None)
        if s0 >= 0:
            remove_sec(cl.nodes[s0], inst, p0)
        p, s = mv.new
        inst.pnode, inst.snode = p, s
        add_pri(cl.nodes[p], inst, cl.nodes[s] if s >= 0 else None)
        if s >= 0:
            add_sec(cl.nodes[s], inst, p)
        # rebuild the aggregates so rounding errors cannot pile up over many moves
        self.stats = Stats(self.nodes)

    def run(self) -> tuple[float, list[Move]]:
        """Balance; returns (initial score, accepted moves)."""
        o = self.opts
        ini = self.score()
        optimal = optimal_score(self.nodes)
        cur = ini
        moves: list[Move] = []
        touched: set[int] = set()
        while (o.max_moves < 0 or len(moves) < o.max_moves) and cur > optimal + o.min_score:
            mv = self.best_move(cur)
            if mv is None or not mv.score < cur - EPS:
                break
            if not (cur > o.min_gain_limit or cur - mv.score >= o.min_gain):
                break
            if o.first_set_only and mv.nodes & touched:
                break
            touched |= mv.nodes
            self.apply(mv)
            cur = self.stats.score()
            mv.score = cur
            moves.append(mv)
        return ini, moves


def job_sets(moves: Sequence[Move]) -> list[list[Move]]:
    """Consecutive moves touching disjoint node sets can run in parallel."""
    sets: list[list[Move]] = []
    used: set[int] = set()
    for mv in moves:
        if sets and not (used & mv.nodes):
            sets[-1].append(mv)
            used |= mv.nodes
        else:
            sets.append([mv])
            used = set(mv.nodes)
    return sets


def move_commands(mv: Move) -> list[str]:
    out = []
    for act in mv.actions:
        if act == "f":
            out.append(f"gnt-instance migrate -f {mv.instance}")
        elif act.startswith("r:"):
            out.append(f"gnt-instance replace-disks -n {act[2:]} {mv.instance}")
        else:
            out.append(f"gnt-instance migrate -f -n {act[3:]} {mv.instance}")
    return out


def move_opcodes(cl: Cluster, mv: Move) -> list[dict[str, object]]:
    from herder.alloc.evacuate import op_failover, op_replace

    inst = cl.instances[cl.inst_by_name[mv.instance]]
    ops: list[dict[str, object]] = []
    for act in mv.actions:
        if act == "f":
            ops.append(op_failover(inst))
        elif act.startswith("r:"):
            ops.append(op_replace(inst, act[2:]))
        else:
            ops.append(op_failover(inst, act[3:]))
    return ops


def policy_violating_nodes(nodes: Sequence[Node]) -> int:
    count = 0
    for n in nodes:
        if n.offline:
            continue
        if (n.hi_spindles and n.inst_spindles > n.hi_spindles) or \
                (n.t_cpu and n.vcpu_ratio >= 0 and n.u_cpu / n.t_cpu > n.vcpu_ratio):
            count += 1
    return count


def n1_bad(cl: Cluster, nodes: Sequence[Node]) -> tuple[int, int]:
    bad = [n for n in nodes if not n.offline and n.fail_n1]
    insts: set[int] = set()
    for n in bad:
        insts |= n.plist | n.slist
    return len(bad), len(insts)
