"""``node-evacuate``: move instances off their nodes (primary-only, secondary-only, all)."""

from __future__ import annotations

from typing import Any

from herder.alloc.evacuate import EvacError, Opcode, evacuate_instance
from herder.alloc.metrics import Stats
from herder.alloc.model import Cluster, Instance
from herder.alloc.protocol import InputError, Options, Response, get

EVAC_MODES = ("primary-only", "secondary-only", "all")


def lookup_instances(cl: Cluster, names: list[Any]) -> list[Instance]:
    out = []
    for name in names:
        if not isinstance(name, str):
            raise InputError("invalid request dict: key 'instances': Unable to read String")
        if name not in cl.inst_by_name:
            raise InputError(f"Unknown instance '{name}'")
        out.append(cl.instances[cl.inst_by_name[name]])
    return out


def evac_result(moved: list[list[Any]], failed: list[list[str]], jobs: list[list[Opcode]]
                ) -> Response:
    info = f"{len(failed)} instances failed to move and {len(moved)} were moved successfully"
    return Response(True, info, [moved, failed, jobs])


def handle(cl: Cluster, req: dict[str, Any], opts: Options) -> Response:
    ctx = "invalid request dict"
    insts = lookup_instances(cl, get(req, "instances", "list", ctx))
    mode = get(req, "evac_mode", "str", ctx)
    if mode not in EVAC_MODES:
        raise InputError(f"{ctx}: key 'evac_mode': Invalid string value for type EvacMode: "
                         f"\"{mode}\"")
    excluded: set[int] = {n.idx for n in cl.nodes if n.offline}
    for inst in insts:
        if mode in ("primary-only", "all"):
            excluded.add(inst.pnode)
        if mode in ("secondary-only", "all") and inst.snode >= 0:
            excluded.add(inst.snode)
    moved: list[list[Any]] = []
    failed: list[list[str]] = []
    jobs: list[list[Opcode]] = []
    stats_by_group: dict[int, Stats] = {}
    for inst in insts:
        gidx = cl.nodes[inst.pnode].group
        stats = stats_by_group.get(gidx)
        if stats is None:
            stats = stats_by_group[gidx] = Stats(n for n in cl.nodes if n.group == gidx)
        avail = [n for n in cl.nodes if n.group == gidx and n.idx not in excluded
                 and n.idx != inst.pnode]
        try:
            ops = evacuate_instance(cl, inst, mode, avail, stats, opts.ignore_soft_errors)
        except EvacError as err:
            failed.append([inst.name, str(err)])
            continue
        nodes = [cl.nodes[inst.pnode].name]
        if inst.snode >= 0:
            nodes.append(cl.nodes[inst.snode].name)
        moved.append([inst.name, cl.groups[cl.nodes[inst.pnode].group].name, nodes])
        jobs.append(ops)
    return evac_result(moved, failed, jobs)
