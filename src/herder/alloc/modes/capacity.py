"""``capacity`` (herder extension): how many more instances of a spec fit (hspace's job).

Request keys: ``spec`` ``{"memory", "disk", "vcpus", "spindle_use" (1), "disk_template"
("drbd")}``, ``tiered`` (bool, default false: start from the spec and shrink it along the most
frequent failure, as hspace's tiered mode), ``max_instances`` (int, default no limit).
Result: ``{"count", "fail_reason", "placements": [[name, [nodes]], ...], "specs":
[[{"memory", "disk", "vcpus", "spindles"}, count], ...]}`` in placement order. Nothing is
changed: the cluster in the request is only simulated.
"""

from __future__ import annotations

from typing import Any

from herder.alloc.capacity import Capacity, CapacityRun, prepare, spec_instance
from herder.alloc.model import DISK_TEMPLATES, Cluster
from herder.alloc.protocol import InputError, Options, Response, get


def handle(cl: Cluster, req: dict[str, Any], opts: Options) -> Response:
    ctx = "invalid request dict"
    spec = get(req, "spec", "obj", ctx)
    sctx = "invalid capacity spec"
    template = get(spec, "disk_template", "str", sctx, "drbd")
    if template not in DISK_TEMPLATES:
        raise InputError(f"{sctx}: key 'disk_template': unknown disk template '{template}'")
    su = get(spec, "spindle_use", "int", sctx, 1)
    proto = spec_instance("", get(spec, "memory", "int", sctx), get(spec, "disk", "int", sctx),
                          get(spec, "vcpus", "int", sctx), su, template, su)
    limit = get(req, "max_instances", "int", ctx, -1)
    tiered = bool(get(req, "tiered", "bool", ctx, False))
    work = cl.copy()
    cap = Capacity(work, prepare(work, opts, False, False), opts)
    run = CapacityRun()
    if tiered:
        cap.tiered(proto, None if limit < 0 else limit, run)
    else:
        cap.iterate(proto, None if limit < 0 else limit, run)
    specs: list[list[Any]] = []
    for p in run.placed:
        d = {"memory": p.spec[0], "disk": p.spec[1], "vcpus": p.spec[2], "spindles": p.spec[3]}
        if specs and specs[-1][0] == d:
            specs[-1][1] += 1
        else:
            specs.append([d, 1])
    reason = max(sorted(run.fails), key=lambda f: run.fails[f]).label if run.fails else None
    placements = [[p.name, [work.nodes[i].name for i in p.nodes]] for p in run.placed]
    return Response(True, f"{len(run.placed)} instances fit",
                    {"count": len(run.placed), "fail_reason": reason,
                     "placements": placements, "specs": specs})
