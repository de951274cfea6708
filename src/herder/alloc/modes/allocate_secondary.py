"""``allocate-secondary``: a DRBD secondary for an instance that has only a primary."""

from __future__ import annotations

from typing import Any

from herder.alloc.metrics import Stats
from herder.alloc.model import Cluster, remove_pri
from herder.alloc.placement import GroupResult, _pairs, describe
from herder.alloc.protocol import InputError, Options, Response, get


def handle(cl: Cluster, req: dict[str, Any], opts: Options) -> Response:
    name = get(req, "name", "str", "invalid request dict")
    if name not in cl.inst_by_name:
        raise InputError(f"Unknown instance '{name}'")
    inst = cl.instances[cl.inst_by_name[name]]
    if inst.snode >= 0:
        return Response(False, f"Instance {name} already has a secondary node")
    p = cl.nodes[inst.pnode]
    remove_pri(p, inst, None)
    cand = inst.copy()
    cand.template = "drbd"
    cand.idx = -1
    members = [n for n in cl.nodes if n.group == p.group]
    stats = Stats(members)
    res = GroupResult(p.group)
    cands = [n for n in members if not n.offline or n is p]
    scored = _pairs(cl, cand, cands, stats, not opts.ignore_soft_errors, res, p.idx)
    res.successes = len(scored)
    if not scored:
        return Response(False, describe(cl, res).split(": ", 1)[1])
    scored.sort(key=lambda t: (t[0], -t[1]))
    from herder.alloc.placement import Solution

    score, _, nodes = scored[0]
    res.best = Solution(nodes, score, f"{score:.8f}")
    text = describe(cl, res).split(": ", 1)[1]
    return Response(True, text, cl.nodes[nodes[1]].name)
