"""Moving existing instances: failover, replace-secondary, change of both nodes.

Used by relocate, node-evacuate and change-group (and the N+1-aware balancer). Each function
picks the best target by the group score, applies the move to the cluster when it succeeds and
returns the opcodes Ganeti runs for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

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
from herder.alloc.placement import GroupResult, _pairs

Opcode = dict[str, Any]


class EvacError(Exception):
    """This instance cannot be moved (reason in the message)."""


def op_failover(inst: Instance, target: str | None = None) -> Opcode:
    if inst.forthcoming:
        op: Opcode = {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": inst.name,
                      "shutdown_timeout": 120, "ignore_consistency": False}
        if target is not None:
            op["target_node"] = target
        op.update({"ignore_ipolicy": False, "cleanup": False})
        return op
    op = {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": inst.name}
    if target is not None:
        op["target_node"] = target
    op.update({"allow_runtime_changes": False, "ignore_ipolicy": False, "cleanup": False,
               "allow_failover": True, "ignore_hvversions": True})
    return op


def op_replace(inst: Instance, node: str) -> Opcode:
    return {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": inst.name,
            "early_release": False, "ignore_ipolicy": False, "mode": "replace_new_secondary",
            "disks": [], "remote_node": node}


def _fail_list(fails: list[tuple[Node, Fail]]) -> str:
    return "Can't find any good node:  " + "".join(
        f"Node {n.name} failed: {f.label}; " for n, f in fails).rstrip()


def _detach(cl: Cluster, inst: Instance) -> tuple[int, int]:
    p, s = inst.pnode, inst.snode
    pn = cl.nodes[p]
    sn = cl.nodes[s] if s >= 0 else None
    remove_pri(pn, inst, sn)
    if sn is not None:
        remove_sec(sn, inst, p)
    return p, s


def _attach(cl: Cluster, inst: Instance, p: int, s: int) -> None:
    inst.pnode, inst.snode = p, s
    sn = cl.nodes[s] if s >= 0 else None
    add_pri(cl.nodes[p], inst, sn)
    if sn is not None:
        add_sec(sn, inst, p)


def failover(cl: Cluster, inst: Instance, force: bool, stats: Stats | None = None
             ) -> list[Opcode]:
    """DRBD: swap primary and secondary."""
    if cl.nodes[inst.snode].offline:
        raise EvacError(f"Can't find any good node:  Node {cl.nodes[inst.snode].name} failed: "
                        "secondary node is offline or drained")
    p, s = _detach(cl, inst)
    sn = cl.nodes[s]
    pn = cl.nodes[p]
    bad = check_pri(sn, inst, not force)
    if bad is None and not pn.offline:
        bad = check_sec(pn, inst, s, not (force or pn.offline))
    if bad is not None:
        _attach(cl, inst, p, s)
        raise EvacError(f"Can't find any good node:  Node {sn.name} failed: {bad.label};")
    _attach(cl, inst, s, p)
    _refresh(stats, cl, (p, s))
    return [op_failover(inst)]


def _refresh(stats: Stats | None, cl: Cluster, idxs: Sequence[int]) -> None:
    if stats is None:
        return
    for i in idxs:
        if i >= 0 and (i in stats.vecs or i in stats.offc):
            stats.update(cl.nodes[i])


def change_secondary(cl: Cluster, inst: Instance, avail: Sequence[Node], stats: Stats,
                     force: bool) -> list[Opcode]:
    """DRBD: new secondary on the best node of ``avail``."""
    p, s = inst.pnode, inst.snode
    old = cl.nodes[s]
    q = old.copy()
    remove_sec(q, inst, p)
    changes_old = () if old.offline else ((stats.vecs[old.idx], node_vec(q)),)
    off = (-1, 0) if old.offline else (0, 0)
    best: tuple[float, Node] | None = None
    fails: list[tuple[Node, Fail]] = []
    for t in avail:
        if t.idx in (p, s):
            continue
        bad = check_sec(t, inst, p, not force)
        if bad is not None:
            fails.append((t, bad))
            continue
        r = t.copy()
        add_sec(r, inst, p)
        score = stats.score_delta((*changes_old, (stats.vecs[t.idx], node_vec(r))),
                                  off_delta=off)
        if best is None or score <= best[0]:
            best = (score, t)
    if best is None:
        if not fails:
            raise EvacError("Can't find any good nodes for relocation: no nodes available")
        raise EvacError(_fail_list(fails))
    t = best[1]
    remove_sec(old, inst, p)
    add_sec(t, inst, p)
    inst.snode = t.idx
    _refresh(stats, cl, (s, t.idx))
    return [op_replace(inst, t.name)]


def change_primary_any(cl: Cluster, inst: Instance, avail: Sequence[Node], stats: Stats,
                       force: bool) -> list[Opcode]:
    """Shared storage: fail over to the best node of ``avail``."""
    p = inst.pnode
    old = cl.nodes[p]
    q = old.copy()
    remove_pri(q, inst, None)
    # the old node counts in the score only when the stats hold it (change-group: the stats
    # are the target group's, the old node is in another)
    counted = not old.offline and old.idx in stats.vecs
    changes_old = ((stats.vecs[old.idx], node_vec(q)),) if counted else ()
    lx_old = locx_delta_pri(stats, old, inst.excl_tags, -1) if counted else 0.0
    off = (-1, -1) if old.offline else (0, 0)
    best: tuple[float, Node] | None = None
    fails: list[tuple[Node, Fail]] = []
    for t in avail:
        if t.idx == p:
            continue
        bad = check_pri(t, inst, not force)
        if bad is not None:
            fails.append((t, bad))
            continue
        r = t.copy()
        add_pri(r, inst, None)
        lx = lx_old + locx_delta_pri(stats, t, inst.excl_tags, +1)
        score = stats.score_delta((*changes_old, (stats.vecs[t.idx], node_vec(r))), lx, off)
        if best is None or score <= best[0]:
            best = (score, t)
    if best is None:
        if not fails:
            raise EvacError("Can't find any good nodes for relocation: no nodes available")
        raise EvacError(_fail_list(fails))
    t = best[1]
    remove_pri(old, inst, None)
    add_pri(t, inst, None)
    inst.pnode = t.idx
    _refresh(stats, cl, (p, t.idx))
    return [op_failover(inst, t.name)]


def change_all(cl: Cluster, inst: Instance, avail: Sequence[Node], stats: Stats,
               force: bool) -> list[Opcode]:
    """DRBD: new primary and new secondary (replace-disks, migrate, replace-disks)."""
    if len(avail) < 1:
        raise EvacError("Can't find any good nodes for relocation: no nodes available")
    p_off = cl.nodes[inst.pnode].offline
    p, s = _detach(cl, inst)
    _refresh(stats, cl, (p, s))
    res = GroupResult(-1)
    scored = _pairs(cl, inst, avail, stats, not force, res)
    if not scored:
        _attach(cl, inst, p, s)
        _refresh(stats, cl, (p, s))
        if not res.fails:
            raise EvacError("Can't find any good nodes for relocation: no nodes available")
        common = Counter(res.fails).most_common(1)[0][0]
        raise EvacError("Can't find any good nodes for relocation: Allocation failed: "
                        f"Changing secondary to new primary: {common.label}")
    scored.sort(key=lambda t: (t[0], -t[1]))
    np_, ns = scored[0][2]
    _attach(cl, inst, np_, ns)
    _refresh(stats, cl, (np_, ns))
    ops = [op_replace(inst, cl.nodes[np_].name), op_failover(inst),
           op_replace(inst, cl.nodes[ns].name)]
    if p_off:
        ops.insert(0, op_failover(inst))
    return ops


def evacuate_instance(cl: Cluster, inst: Instance, mode: str, avail: Sequence[Node],
                      stats: Stats, force: bool) -> list[Opcode]:
    """One instance of a node-evacuate/change-group; ``mode``: primary-only|secondary-only|all."""
    t = inst.template
    if t in ("plain", "file"):
        raise EvacError(f"Instances of type {t} cannot be relocated")
    if t in EXTERNAL_MIRROR:
        if mode == "secondary-only":
            raise EvacError(f"Instances with disk template '{t}' can't execute change secondary")
        return change_primary_any(cl, inst, avail, stats, force)
    if mode == "primary-only":
        return failover(cl, inst, force, stats)
    if mode == "secondary-only":
        return change_secondary(cl, inst, avail, stats, force)
    return change_all(cl, inst, avail, stats, force)
