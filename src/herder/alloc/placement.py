"""Choosing nodes for one new instance: candidates, checks, score, N+1, groups.

The engine scores every candidate incrementally (only the one or two changed nodes are
re-read) and keeps the lowest score; on equal scores the later candidate in input order wins,
as hail does. For large groups the pair search is pruned to the best primaries and secondaries
by their own contribution (the cross term of a pair is O(1/n²) of the score).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from herder.alloc.metrics import Stats, locx_delta_pri, pri_vec, sec_vec
from herder.alloc.model import (
    LOCAL_STORAGE,
    MEM_STATES,
    SHARED_FAILOVER,
    Cluster,
    Fail,
    Instance,
    Node,
    add_pri,
    add_sec,
    check_pri,
    check_sec,
    policy_check,
    remove_pri,
    remove_sec,
)
from herder.alloc.protocol import Options

EXHAUSTIVE_PAIRS = 32  # groups up to this size try every (primary, secondary) pair
TOP_K = 24


@dataclass
class Solution:
    nodes: tuple[int, ...]
    score: float
    metric: str  # the score as printed
    key: tuple[object, ...] = ()  # comparison key when the metric is not a plain score


@dataclass
class GroupResult:
    group: int
    best: Solution | None = None
    successes: int = 0
    fails: Counter[Fail] = field(default_factory=Counter)
    error: str | None = None


def fail_text(fails: Counter[Fail]) -> str:
    return ", ".join(f"{f.label}: {fails[f]}" for f in sorted(fails) if fails[f])


def describe(cl: Cluster, r: GroupResult, with_policy: bool = True) -> str:
    g = cl.groups[r.group]
    head = f"Group {g.name} ({g.alloc_policy})" if with_policy else f"Group {g.name}"
    if r.error is not None:
        return f"Group {g.name}: error {r.error}"
    if r.best is None:
        reasons = fail_text(r.fails) or "unknown reasons"
        return f"{head}: No valid allocation solutions, failure reasons: {reasons}"
    total = sum(r.fails.values())
    names = "/".join(cl.nodes[i].name for i in r.best.nodes)
    return (f"{head}: score: {r.best.metric}, successes {r.successes}, failures {total} "
            f"({fail_text(r.fails)}) for node(s) {names}")


def online_candidates(cl: Cluster, opts: Options, restrict: Sequence[str] | None) -> list[Node]:
    names = opts.restrict_to if opts.restrict_to is not None else restrict
    allowed = None if names is None else set(names)
    return [n for n in cl.nodes if not n.offline and (allowed is None or n.name in allowed)]


# --- global N+1: every node's instances must have somewhere to go ---------------------------


def evacuable(cl: Cluster, x: Node, online_by_group: dict[int, list[Node]]) -> bool:
    """Can every primary instance of ``x`` run elsewhere (hard checks only)?"""
    if not x.plist:
        return True
    mem_taken: dict[int, int] = {}
    dsk_taken: dict[int, int] = {}
    others: list[Instance] = []
    shared: list[Instance] = []
    instances, nodes = cl.instances, cl.nodes
    for i in x.plist:  # every instance of the cluster, once per N+1 check: kept tight
        inst = instances[i]
        if inst.template == "drbd":
            snode = inst.snode
            if snode < 0:
                return False
            if inst.status not in MEM_STATES or inst.forthcoming:  # not inst.uses_memory
                continue
            s = nodes[snode]
            taken = mem_taken.get(snode, 0) + inst.mem
            if s.offline or s.unalloc - taken <= 0:
                return False
            mem_taken[snode] = taken
        elif inst.template in SHARED_FAILOVER:
            shared.append(inst)
        else:
            others.append(inst)
    others.sort(key=lambda i: -i.mem)
    pol = cl.groups[x.group].ipolicy
    for inst in others:
        # re-created instances must fit the group policy
        if policy_check(inst, pol, False) is not None:
            return False
    targets = online_by_group.get(x.group, [])
    for inst in shared + others:
        need_mem = inst.mem if inst.uses_memory else 0
        need_dsk = inst.dsk if inst.template in LOCAL_STORAGE else 0
        best: Node | None = None
        best_free = 0
        for t in targets:
            if t.unalloc <= best_free:
                break  # sorted by free memory: nobody further down can beat it
            if t is x:
                continue
            free = t.unalloc - mem_taken.get(t.idx, 0)
            if free - need_mem <= 0 or free <= best_free:
                continue
            if need_dsk and t.f_dsk - dsk_taken.get(t.idx, 0) - need_dsk <= 0:
                continue
            best, best_free = t, free
        if best is None:
            return False
        mem_taken[best.idx] = mem_taken.get(best.idx, 0) + need_mem
        if need_dsk:
            dsk_taken[best.idx] = dsk_taken.get(best.idx, 0) + need_dsk
    return True


def n1_ok(cl: Cluster, scope: Sequence[Node]) -> bool:
    by_group: dict[int, list[Node]] = {}
    for n in cl.nodes:
        if not n.offline:
            by_group.setdefault(n.group, []).append(n)
    for lst in by_group.values():
        lst.sort(key=lambda n: -n.unalloc)
    return all(evacuable(cl, x, by_group) for x in scope)


def _apply(cl: Cluster, inst: Instance, nodes: tuple[int, ...]) -> None:
    p = cl.nodes[nodes[0]]
    s = cl.nodes[nodes[1]] if len(nodes) > 1 else None
    inst.pnode = p.idx
    inst.snode = s.idx if s is not None else -1
    add_pri(p, inst, s)
    if s is not None:
        add_sec(s, inst, p.idx)


def _unapply(cl: Cluster, inst: Instance, nodes: tuple[int, ...]) -> None:
    p = cl.nodes[nodes[0]]
    s = cl.nodes[nodes[1]] if len(nodes) > 1 else None
    remove_pri(p, inst, s)
    if s is not None:
        remove_sec(s, inst, p.idx)
    inst.pnode = inst.snode = -1


def placement_n1_ok(cl: Cluster, inst: Instance, nodes: tuple[int, ...],
                    scope: Sequence[Node]) -> bool:
    """Global N+1 after placing ``inst`` on ``nodes`` (temporarily added to the cluster)."""
    added = inst.idx < 0 or inst.idx >= len(cl.instances) or cl.instances[inst.idx] is not inst
    if added:
        cl.add_instance(inst)
    _apply(cl, inst, nodes)
    try:
        return n1_ok(cl, scope)
    finally:
        _unapply(cl, inst, nodes)
        if added:
            cl.instances.pop()
            del cl.inst_by_name[inst.name]
            inst.idx = -1


# --- scoring candidates ------------------------------------------------------------------


def _pri_trial(p: Node, inst: Instance, stats: Stats) -> tuple[tuple[float, ...], float]:
    return pri_vec(p, inst), locx_delta_pri(stats, p, inst.excl_tags, +1)


def _sec_trial(s: Node, inst: Instance, pidx: int) -> tuple[float, ...]:
    return sec_vec(s, inst, pidx)


def try_alloc(cl: Cluster, inst: Instance, req: int, cands: Sequence[Node], stats: Stats,
              opts: Options, n1_scope: Sequence[Node] | None, gidx: int) -> GroupResult:
    """Best placement of ``inst`` on ``cands`` (nodes of one group)."""
    res = GroupResult(gidx)
    strict = not opts.ignore_soft_errors
    scored: list[tuple[float, int, tuple[int, ...]]] = []
    order = 0
    if req == 1:
        for p in cands:
            bad = policy_check(inst, cl.groups[p.group].ipolicy, p.excl) or \
                check_pri(p, inst, strict)
            if bad is not None:
                res.fails[bad] += 1
                continue
            vec, lx = _pri_trial(p, inst, stats)
            score = stats.score_change(stats.vecs[p.idx], vec, lx)
            scored.append((score, order, (p.idx,)))
            order += 1
    elif req == 2:
        scored = _pairs(cl, inst, cands, stats, strict, res)
    else:
        res.error = "Unsupported number of nodes, only one or two  supported"
        return res
    res.successes = len(scored)
    if req == 2 and res.successes == 0 and res.fails.total() == 0 and len(cands) < 2:
        res.error = "Not enough online nodes" if cands else "No online nodes"
        return res
    if req == 1 and not cands:
        res.error = "No online nodes"
        return res
    # lowest score first; on equal scores the later candidate
    scored.sort(key=lambda t: (t[0], -t[1]))
    for score, _, nodes in scored:
        if n1_scope is not None and opts.capacity_checks and \
                not placement_n1_ok(cl, inst, nodes, n1_scope):
            res.fails[Fail.N1] += 1
            res.successes -= 1
            if _base_n1_bad(cl, n1_scope):
                # nothing placed can make an already failing cluster pass
                res.fails[Fail.N1] += res.successes
                res.successes = 0
                break
            continue
        res.best = Solution(nodes, score, f"{score:.8f}")
        break
    return res


def _base_n1_bad(cl: Cluster, scope: Sequence[Node]) -> bool:
    return not n1_ok(cl, scope)


def _pairs(cl: Cluster, inst: Instance, cands: Sequence[Node], stats: Stats, strict: bool,
           res: GroupResult, only_primary: int | None = None
           ) -> list[tuple[float, int, tuple[int, ...]]]:
    by_group: dict[int, list[Node]] = {}
    for n in cands:
        by_group.setdefault(n.group, []).append(n)
    out: list[tuple[float, int, tuple[int, ...]]] = []
    order = 0
    for nodes in by_group.values():
        pri: dict[int, tuple[tuple[float, ...], float] | Fail] = {}
        for p in nodes:
            if only_primary is not None and p.idx != only_primary:
                continue
            bad = policy_check(inst, cl.groups[p.group].ipolicy, p.excl) or \
                check_pri(p, inst, strict)
            pri[p.idx] = bad if bad is not None else _pri_trial(p, inst, stats)
        sec_generic: dict[int, tuple[float, ...] | Fail] = {}
        for s in nodes:
            bad = check_sec(s, inst, -1, True)
            sec_generic[s.idx] = bad if bad is not None else _sec_trial(s, inst, -1)
        big = len(nodes) > EXHAUSTIVE_PAIRS and only_primary is None
        if big:
            # the trials that passed, by node index (narrowed once for the type checker)
            pri_ok = {i: t for i, t in pri.items() if not isinstance(t, Fail)}
            sec_ok = {i: t for i, t in sec_generic.items() if not isinstance(t, Fail)}
            okp = [p for p in nodes if p.idx in pri_ok]
            oks = [s for s in nodes if s.idx in sec_ok]
            for p in nodes:
                pri_fail = pri[p.idx]
                if isinstance(pri_fail, Fail):
                    res.fails[pri_fail] += len(nodes) - 1
            for s in nodes:
                sec_fail = sec_generic[s.idx]
                if isinstance(sec_fail, Fail):
                    res.fails[sec_fail] += len(okp) - (s in okp)

            pkey = {p.idx: stats.score_change(stats.vecs[p.idx], pri_ok[p.idx][0],
                                              pri_ok[p.idx][1]) for p in okp}
            skey = {s.idx: stats.score_change(stats.vecs[s.idx], sec_ok[s.idx]) for s in oks}

            okp.sort(key=lambda n: (pkey[n.idx], -n.idx))
            oks.sort(key=lambda n: (skey[n.idx], -n.idx))
            prims = sorted(okp[:TOP_K], key=lambda n: n.idx)
            secs = sorted(oks[:TOP_K], key=lambda n: n.idx)
        else:
            prims = [p for p in nodes if p.idx in pri]
            secs = list(nodes)
        sdelta = {s.idx: stats.delta(stats.vecs[s.idx], trial) for s in secs
                  if not isinstance(trial := sec_generic[s.idx], Fail)}
        for p in prims:
            ptrial = pri[p.idx]
            if isinstance(ptrial, Fail):
                res.fails[ptrial] += len(nodes) - 1
                continue
            pvec, lx = ptrial
            pold = stats.vecs[p.idx]
            pdelta = stats.delta(pold, pvec)
            for s in secs:
                if s is p:
                    continue
                if p.idx in s.peers:
                    bad = check_sec(s, inst, p.idx, True)
                    if bad is not None:
                        if not big:
                            res.fails[bad] += 1
                        continue
                    svec = _sec_trial(s, inst, p.idx)
                    extra = 0.0
                    if p.loc_tags and s.loc_tags:
                        extra = float(len(p.loc_tags & s.loc_tags))
                    score = stats.score_delta(((pold, pvec), (stats.vecs[s.idx], svec)), lx) \
                        + extra
                else:
                    sg = sec_generic[s.idx]
                    if isinstance(sg, Fail):
                        if not big:
                            res.fails[sg] += 1
                        continue
                    extra = 0.0
                    if p.loc_tags and s.loc_tags:
                        extra = float(len(p.loc_tags & s.loc_tags))
                    score = stats.score_pair(pdelta, sdelta[s.idx], lx) + extra
                out.append((score, order, (p.idx, s.idx)))
                order += 1
    return out


# --- across groups -----------------------------------------------------------------------


def alloc_in_group(cl: Cluster, inst: Instance, req: int, gidx: int, opts: Options,
                   restrict: Sequence[str] | None) -> GroupResult:
    """Allocation restricted to one group: its nodes, score and N+1 scope."""
    members = [n for n in cl.nodes if n.group == gidx]
    stats = Stats(members)
    cands = [n for n in online_candidates(cl, opts, restrict) if n.group == gidx]
    scope = members if opts.capacity_checks else None
    return try_alloc(cl, inst, req, cands, stats, opts, scope, gidx)


def group_results(cl: Cluster, inst: Instance, req: int, opts: Options,
                  restrict: Sequence[str] | None, groups: Sequence[int] | None = None,
                  stats: Stats | None = None, scope: Sequence[Node] | None = None
                  ) -> tuple[list[GroupResult], list[str]]:
    """Try every (allowed, network-connected) group; the results and the network messages."""
    msgs: list[str] = []
    stats = stats if stats is not None else Stats(cl.nodes)
    cands = online_candidates(cl, opts, restrict)
    if scope is None:
        scope = cl.nodes
    n1_scope = scope if opts.capacity_checks else None
    results: list[GroupResult] = []
    present = sorted({n.group for n in cl.nodes})
    for gidx in present:
        if groups is not None and gidx not in groups:
            continue
        g = cl.groups[gidx]
        missing = [net for net in inst.nets if net not in g.networks]
        if missing:
            msgs.append(f"group {g.name} is not connected to a network required by instance "
                        f"{inst.name}")
            continue
        gc = [n for n in cands if n.group == gidx]
        results.append(try_alloc(cl, inst, req, gc, stats, opts, n1_scope, gidx))
    return results, msgs


def choose_group(cl: Cluster, results: list[GroupResult]) -> GroupResult | None:
    ok = [(r, r.best) for r in results if r.best is not None and r.error is None
          and cl.groups[r.group].alloc_policy != "unallocable"]
    if not ok:
        return None
    ok.reverse()
    ok.sort(key=lambda pair: (cl.groups[pair[0].group].policy_rank, pair[1].score))
    return ok[0][0]


def alloc_multi_group(cl: Cluster, inst: Instance, req: int, opts: Options,
                      restrict: Sequence[str] | None, groups: Sequence[int] | None = None,
                      stats: Stats | None = None) -> tuple[GroupResult | None, list[str]]:
    """hail's group choice: every group tried, best (policy, score) wins, later on ties."""
    results, msgs = group_results(cl, inst, req, opts, restrict, groups, stats)
    msgs.extend(describe(cl, r) for r in results)
    return choose_group(cl, results), msgs


def commit(cl: Cluster, inst: Instance, nodes: tuple[int, ...]) -> None:
    """Place ``inst`` for good (it becomes part of the cluster)."""
    if inst.idx < 0 or inst.idx >= len(cl.instances) or cl.instances[inst.idx] is not inst:
        cl.add_instance(inst)
    _apply(cl, inst, nodes)
