"""``relocate``: a new secondary (DRBD) or primary (shared storage) for one instance."""

from __future__ import annotations

from typing import Any

from herder.alloc.evacuate import EvacError, change_primary_any, change_secondary
from herder.alloc.metrics import Stats
from herder.alloc.model import EXTERNAL_MIRROR, Cluster
from herder.alloc.protocol import InputError, Options, Response, get


def handle(cl: Cluster, req: dict[str, Any], opts: Options) -> Response:
    ctx = "invalid request dict"
    name = get(req, "name", "str", ctx)
    required = get(req, "required_nodes", "int", ctx)
    rfrom = get(req, "relocate_from", "list", ctx)
    if name not in cl.inst_by_name:
        raise InputError(f"Unknown instance '{name}'")
    for node in rfrom:
        if node not in cl.node_by_name:
            raise InputError(f"Wrong number of elems found with name {node}")
    inst = cl.instances[cl.inst_by_name[name]]
    if required != 1:
        return Response(False, f"Exchange {required} nodes mode is not implemented")
    if inst.template not in EXTERNAL_MIRROR and inst.template != "drbd":
        return Response(False, "Can't relocate non-mirrored instances")
    current = inst.snode if inst.template == "drbd" else inst.pnode
    excluded = [cl.node_by_name[n] for n in rfrom]
    if excluded != [current]:
        return Response(False, "Unsupported request: excluded nodes not equal to instance's "
                        f"{'secondary' if inst.template == 'drbd' else 'primary'}"
                        f"({current} versus {excluded})")
    gidx = cl.nodes[inst.pnode].group
    members = [n for n in cl.nodes if n.group == gidx]
    stats = Stats(members)
    avail = [n for n in members if not n.offline and n.idx not in (inst.pnode, inst.snode)]
    try:
        if inst.template == "drbd":
            change_secondary(cl, inst, avail, stats, opts.ignore_soft_errors)
            return Response(True, "success", [cl.nodes[inst.snode].name])
        change_primary_any(cl, inst, avail, stats, opts.ignore_soft_errors)
        return Response(True, "success", [cl.nodes[inst.pnode].name])
    except EvacError as err:
        return Response(False, str(err))
