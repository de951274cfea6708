"""``allocate``: nodes for one new instance."""

from __future__ import annotations

from typing import Any

from herder.alloc.dedicated import (
    dedicated_multi_group,
    is_dedicated,
    relevant_groups,
    try_dedicated,
)
from herder.alloc.model import Cluster, Instance
from herder.alloc.placement import (
    GroupResult,
    alloc_in_group,
    alloc_multi_group,
    commit,
    describe,
)
from herder.alloc.protocol import Options, Response, get, request_instance


def place(cl: Cluster, inst: Instance, req: int, group_name: str | None,
          restrict: list[str] | None, opts: Options) -> tuple[GroupResult | None, str]:
    """Choose nodes for ``inst``; (result or None, info text). Raises LookupError for a group."""
    group = None
    if group_name is not None:
        group = cl.group_named(group_name)
        if group is None:
            raise LookupError(f"Wrong number of elems found with name {group_name}")
    if inst.template == "drbd" and req != 2:
        return None, f"disk template drbd needs 2 nodes, the request asks for {req}"
    if req not in (1, 2):
        return None, "Unsupported number of nodes, only one or two  supported"
    if is_dedicated(cl, relevant_groups(cl, group)):
        if group is not None:
            r = try_dedicated(cl, inst, req, group.idx, opts, restrict)
            return (r if r.best else None), describe(cl, r)
        best, msgs = dedicated_multi_group(cl, inst, req, opts, restrict)
    elif group is not None:
        r = alloc_in_group(cl, inst, req, group.idx, opts, restrict)
        return (r if r.best else None), describe(cl, r)
    else:
        best, msgs = alloc_multi_group(cl, inst, req, opts, restrict)
    if best is None:
        return None, ", ".join(msgs)
    return best, f"Selected group: {cl.groups[best.group].name}, " + ", ".join(msgs)


def alloc_args(cl: Cluster, req: dict[str, Any], ctx: str = "invalid request dict"
               ) -> tuple[Instance, int]:
    inst, required = request_instance(cl, req, ctx)
    return inst, required


def handle(cl: Cluster, req: dict[str, Any], opts: Options) -> Response:
    inst, required = alloc_args(cl, req)
    group_name = get(req, "group_name", "str", "invalid request dict", None)
    restrict = get(req, "restrict-to-nodes", "list", "invalid request dict", None)
    try:
        best, info = place(cl, inst, required, group_name, restrict, opts)
    except LookupError as err:
        return Response(False, str(err))
    if best is None or best.best is None:
        return Response(False, info)
    nodes = [cl.nodes[i].name for i in best.best.nodes]
    if not opts.dry_run:
        # the cluster object now shows the answer (what `herder alloc -S` saves)
        commit(cl, inst, best.best.nodes)
    return Response(True, info, nodes)
