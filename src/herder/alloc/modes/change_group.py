"""``change-group``: move instances to (the best of) other node groups."""

from __future__ import annotations

from typing import Any

from herder.alloc.evacuate import EvacError, Opcode, change_all, change_primary_any
from herder.alloc.metrics import Stats
from herder.alloc.model import Cluster
from herder.alloc.modes.node_evacuate import evac_result, lookup_instances
from herder.alloc.placement import alloc_multi_group
from herder.alloc.protocol import InputError, Options, Response, get


def handle(cl: Cluster, req: dict[str, Any], opts: Options) -> Response:
    ctx = "invalid request dict"
    insts = lookup_instances(cl, get(req, "instances", "list", ctx))
    targets_raw = get(req, "target_groups", "list", ctx)
    targets: list[int] = []
    for key in targets_raw:
        g = cl.group_named(key) if isinstance(key, str) else None
        if g is None:
            raise InputError(f"Wrong number of elems found with name {key}")
        targets.append(g.idx)
    if not targets:
        targets = [g.idx for g in cl.groups]
    current = {cl.nodes[i.pnode].group for i in insts}
    allowed = [g for g in targets if g not in current]
    moved: list[list[Any]] = []
    failed: list[list[str]] = []
    jobs: list[list[Opcode]] = []
    for inst in insts:
        if not allowed:
            names = [cl.groups[g].name for g in targets]
            failed.append([inst.name, "no groups for evacuation: allowed groups was "
                           f"{names}, all groups: {[g.name for g in cl.groups]}"])
            continue
        if inst.template in ("plain", "file"):
            failed.append([inst.name, f"Instances of type {inst.template} cannot be relocated"])
            continue
        probe = inst.copy()
        probe.idx = -1
        probe.pnode = probe.snode = -1
        probe.name = inst.name + "\0probe"
        req_nodes = 2 if inst.template == "drbd" else 1
        best, msgs = alloc_multi_group(cl, probe, req_nodes, opts, None, allowed)
        if best is None:
            failed.append([inst.name, ", ".join(msgs)])
            continue
        gidx = best.group
        members = [n for n in cl.nodes if n.group == gidx]
        stats = Stats(members)
        avail = [n for n in members if not n.offline]
        try:
            if inst.template == "drbd":
                ops = change_all(cl, inst, avail, stats, False)
            else:
                ops = change_primary_any(cl, inst, avail, stats, False)
        except EvacError as err:
            failed.append([inst.name, str(err)])
            continue
        nodes = [cl.nodes[inst.pnode].name]
        if inst.snode >= 0:
            nodes.append(cl.nodes[inst.snode].name)
        moved.append([inst.name, cl.groups[gidx].name, nodes])
        jobs.append(ops)
    return evac_result(moved, failed, jobs)
