"""Allocation on exclusive-storage ("dedicated") clusters: keep big slots free.

When every node of the relevant groups has exclusive storage, the balanced score is replaced by
a lexicographic metric: how many minimum-size instances of each policy range (biggest first) a
placement makes impossible, then the free disk left. Lower is better; later candidates win ties.
"""

from __future__ import annotations

from collections.abc import Sequence

from herder.alloc.model import (
    Cluster,
    Fail,
    Group,
    Instance,
    IPolicy,
    Node,
    add_pri,
    add_sec,
    check_pri,
    check_sec,
    policy_check,
)
from herder.alloc.placement import GroupResult, Solution, online_candidates
from herder.alloc.protocol import Options

MAX_COPIES = 100_000


def relevant_groups(cl: Cluster, group: Group | None) -> list[int]:
    if group is not None:
        return [group.idx]
    return [g.idx for g in cl.groups if g.alloc_policy != "unallocable"]


def is_dedicated(cl: Cluster, groups: Sequence[int]) -> bool:
    rel = set(groups)
    return all(n.excl or n.group not in rel for n in cl.nodes)


def test_instances(pol: IPolicy) -> list[Instance]:
    tests = [Instance(name="", mem=lo.memory, dsk=lo.disk_size, vcpus=lo.cpus, template="plain",
                      disks=[], spindle_use=lo.spindle_use) for lo, _ in pol.minmax]
    tests.sort(key=lambda i: -i.dsk)
    return tests


def alloc_vector(node: Node, tests: Sequence[Instance]) -> list[int]:
    out = []
    for t in tests:
        q = node.copy()
        count = 0
        while count < MAX_COPIES and check_pri(q, t, True) is None:
            add_pri(q, t)
            count += 1
        out.append(count)
    return out


def try_dedicated(cl: Cluster, inst: Instance, req: int, gidx: int, opts: Options,
                  restrict: Sequence[str] | None) -> GroupResult:
    res = GroupResult(gidx)
    pol = cl.groups[gidx].ipolicy
    tests = test_instances(pol)
    strict = not opts.ignore_soft_errors
    cands = [n for n in online_candidates(cl, opts, restrict) if n.group == gidx]
    if not cands:
        res.error = "No online nodes"
        return res
    before = {n.idx: alloc_vector(n, tests) for n in cands}
    best: tuple[tuple[list[int], int], tuple[int, ...]] | None = None

    def consider(metric: tuple[list[int], int], nodes: tuple[int, ...]) -> None:
        nonlocal best
        res.successes += 1
        if best is None or metric <= best[0]:
            best = (metric, nodes)

    if req == 1:
        for p in cands:
            bad = policy_check(inst, pol, p.excl) or check_pri(p, inst, strict)
            if bad is not None:
                res.fails[bad] += 1
                continue
            q = p.copy()
            add_pri(q, inst)
            after = alloc_vector(q, tests)
            lost = [a - b for a, b in zip(before[p.idx], after, strict=True)]
            consider((lost, q.f_dsk), (p.idx,))
    elif req == 2:
        for p in cands:
            bad = policy_check(inst, pol, p.excl) or check_pri(p, inst, strict)
            if bad is not None:
                res.fails[bad] += max(1, len(cands) - 1)
                continue
            q = p.copy()
            add_pri(q, inst)
            pafter = alloc_vector(q, tests)
            for s in cands:
                if s is p:
                    continue
                bad = check_sec(s, inst, p.idx, True)
                if bad is not None:
                    res.fails[bad] += 1
                    continue
                r = s.copy()
                add_sec(r, inst, p.idx)
                safter = alloc_vector(r, tests)
                lost = [b1 - a1 + b2 - a2 for b1, a1, b2, a2 in
                        zip(before[p.idx], pafter, before[s.idx], safter, strict=True)]
                consider((lost, q.f_dsk + r.f_dsk), (p.idx, s.idx))
    else:
        res.error = "Unsupported number of nodes, only one or two  supported"
        return res
    if best is not None:
        (lost, dsk), nodes = best
        res.best = Solution(nodes, 0.0, f"([{','.join(map(str, lost))}],{dsk})", (lost, dsk))
    return res


def dedicated_multi_group(cl: Cluster, inst: Instance, req: int, opts: Options,
                          restrict: Sequence[str] | None) -> tuple[GroupResult | None, list[str]]:
    from herder.alloc.placement import describe

    results = []
    msgs: list[str] = []
    for gidx in sorted({n.group for n in cl.nodes}):
        g = cl.groups[gidx]
        if [net for net in inst.nets if net not in g.networks]:
            msgs.append(f"group {g.name} is not connected to a network required by instance "
                        f"{inst.name}")
            continue
        results.append(try_dedicated(cl, inst, req, gidx, opts, restrict))
    msgs.extend(describe(cl, r) for r in results)
    ok = [(r, r.best) for r in results if r.best is not None
          and cl.groups[r.group].alloc_policy != "unallocable"]
    if not ok:
        return None, msgs
    ok.reverse()
    ok.sort(key=lambda pair: (cl.groups[pair[0].group].policy_rank, pair[1].key))
    return ok[0][0], msgs


__all__ = ["Fail", "dedicated_multi_group", "is_dedicated", "relevant_groups", "try_dedicated"]
