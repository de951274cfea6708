"""``multi-allocate``: several new instances, placed in request order."""

from __future__ import annotations

from typing import Any

from herder.alloc.model import Cluster
from herder.alloc.modes.allocate import alloc_args, place
from herder.alloc.placement import commit
from herder.alloc.protocol import InputError, Options, Response, get


def handle(cl: Cluster, req: dict[str, Any], opts: Options) -> Response:
    ctx = "invalid request dict"
    items = get(req, "instances", "list", ctx)
    group_name = get(req, "group_name", "str", ctx, None)
    parsed = []
    for item in items:
        if not isinstance(item, dict):
            raise InputError(f"{ctx}: key 'instances': Unable to read JSObject")
        parsed.append(alloc_args(cl, item, ctx))
    allocated: list[list[Any]] = []
    failed: list[str] = []
    for inst, required in parsed:
        try:
            best, _info = place(cl, inst, required, group_name, None, opts)
        except LookupError as err:
            return Response(False, str(err))
        if best is None or best.best is None:
            failed.append(inst.name)
            continue
        commit(cl, inst, best.best.nodes)
        allocated.append([inst.name, [cl.nodes[i].name for i in best.best.nodes]])
    info = (f"{len(failed)} instances failed to allocate and {len(allocated)} were allocated "
            "successfully")
    return Response(True, info, [allocated, failed])
