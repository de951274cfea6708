"""``balance`` (herder extension): the moves that improve the cluster score most (hbal's job).

Request keys: ``max_moves`` (int, default -1 = no limit), ``group`` (name or UUID; default:
every node group in turn), ``ignore_soft_errors`` (bool), ``evac_mode`` (bool: only move
instances off offline/drained nodes), ``min_gain`` / ``min_gain_limit`` (floats, hbal's),
``disk_moves`` (bool, default true; false: hbal's ``--no-disk-moves``, primaries only),
``first_set_only`` (bool: in each group, stop at the first move that touches a node an earlier
move touches — the moves that can run at once, for a caller that plans again after them, as
maintd), ``mond_data`` (node name -> that node's MonD reports, hbal's ``--mond-data``: the
``cpu-avg-load`` reports enter the score only when every node has one).
Result: ``{"initial_score", "final_score", "moves": [...], "jobs": [[job, ...], ...],
"warnings": [...], "dynamic_load"}``; each move is ``{"instance", "from": [p, s], "to": [p, s],
"actions": ["f", "r:node"], "score"}`` and each job the opcode list of one move; moves of one
inner list can run in parallel. ``dynamic_load``: whether ``mond_data`` entered the score;
``warnings``: why it did not.
"""

from __future__ import annotations

from typing import Any

from herder.alloc.balance import BalanceOptions, Balancer, Move, job_sets, move_opcodes
from herder.alloc.metrics import Stats
from herder.alloc.model import Cluster
from herder.alloc.mond import MondOptions, apply_mond
from herder.alloc.protocol import InputError, Options, Response, get


def handle(cl: Cluster, req: dict[str, Any], opts: Options) -> Response:
    ctx = "invalid request dict"
    max_moves = get(req, "max_moves", "int", ctx, -1)
    group = get(req, "group", "str", ctx, None)
    bopts = BalanceOptions(
        max_moves=max_moves,
        ignore_soft_errors=bool(get(req, "ignore_soft_errors", "bool", ctx, False))
        or opts.ignore_soft_errors,
        evac_mode=bool(get(req, "evac_mode", "bool", ctx, False)),
        min_gain=get(req, "min_gain", "num", ctx, 0.01),
        min_gain_limit=get(req, "min_gain_limit", "num", ctx, 0.1),
        disk_moves=bool(get(req, "disk_moves", "bool", ctx, True)),
        first_set_only=bool(get(req, "first_set_only", "bool", ctx, False)),
    )
    warnings: list[str] = []
    mond_data = get(req, "mond_data", "obj", ctx, None)
    dynamic_load = False
    if mond_data is not None:
        dynamic_load = apply_mond(cl, MondOptions(enabled=True, data=_reports(mond_data, ctx)),
                                  warnings.append)
    if group is not None:
        g = cl.group_named(group)
        if g is None:
            return Response(False, f"Wrong number of elems found with name {group}")
        groups = [g.idx]
    else:
        groups = sorted({n.group for n in cl.nodes})
    ini = Stats(cl.nodes).score()
    moves: list[Move] = []
    for gidx in groups:
        left = -1 if max_moves < 0 else max_moves - len(moves)
        if left == 0:
            break
        bopts.max_moves = left
        _, found = Balancer(cl, gidx, bopts).run()
        moves.extend(found)

    def names(pair: tuple[int, int]) -> list[str]:
        return [cl.nodes[i].name for i in pair if i >= 0]

    out_moves = [{"instance": m.instance, "from": names(m.old), "to": names(m.new),
                  "actions": m.actions, "score": round(m.score, 8)} for m in moves]
    jobs = [[move_opcodes(cl, m) for m in js] for js in job_sets(moves)]
    fin = Stats(cl.nodes).score()
    info = f"{len(moves)} moves, score {ini:.8f} -> {fin:.8f}"
    return Response(True, info, {"initial_score": round(ini, 8), "final_score": round(fin, 8),
                                 "moves": out_moves, "jobs": jobs, "warnings": warnings,
                                 "dynamic_load": dynamic_load})


def _reports(data: dict[str, Any], ctx: str) -> dict[str, list[dict[str, Any]]]:
    """``mond_data`` checked: every node's entry a list of report objects."""
    for node, reports in data.items():
        if not isinstance(reports, list) or not all(isinstance(r, dict) for r in reports):
            raise InputError(f"{ctx}: key 'mond_data': node {node}: Unable to read a list of "
                             "JSObject")
    return data
