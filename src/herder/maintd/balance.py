"""Balancing steps of a round (issue 7, design-maintd "Mode of operation"): pure.

When the cluster's maintenance setting `balance` is true, after the repairs: ask the allocator
(its request/answer API `herder.alloc.answer_message`, request type `balance` with
`first_set_only`) for the first set of moves that lower the cluster score and can run in
parallel (as Ganeti's maintd). Every step must gain at least `balanceThreshold` unless the
score is at least ten times that (Ganeti's `algMinGain`/`algMinGainLimit`). Only healthy nodes
take part — not offline, drained or part of an incident (active or failed), with the instances
living on them alone (Ganeti's `algAllowedNodes`) — and a move is left out when a node it
touches is used by another job of the round. The next round plans again from the cluster as
it then is.

The iallocator message is built from RAPI data: the nodes' live figures (`mtotal`, `mnode`,
`mfree`, `dtotal`, `dfree`, `ctotal`, `cnos`) and the instances' run states (`status`,
`oper_ram`), as Ganeti's masterd builds its iallocator input: a node's free memory less what its
admin-up primaries may still take (`herder.core.livefigures.free_memory_for_allocation`). A node
without figures (its daemon did not answer) is left out with its instances, as an unhealthy
one, and a note says so.

Settings `balanceDiskMoves` (false: hbal --no-disk-moves, primaries only) and
`balanceDynamicLoad` (true: hbal --mond — every node's agent is asked for cpu-avg-load; as in
Ganeti, the load is used only when every node answered, else a note says why it was ignored).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from herder.core import livefigures
from herder.maintd.rounds import Instance, Job, Node, Plan, annotate

DEFAULT_GROUP = "00000000-0000-0000-0000-000000000000"
DRBD_META = 128  # MiB per disk, as Ganeti


@dataclass
class BalanceResult:
    jobs: list[Job] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    initial_score: float = 0.0
    final_score: float = 0.0
    dynamic_load: bool = False  # whether the agents' cpu load entered the score


CPU_LOAD_PATH = "/1/report/default/cpu-avg-load"


def disk_total(inst: Instance) -> int:
    return sum(inst.disks) + (DRBD_META * len(inst.disks) if inst.disk_template == "drbd" else 0)


# the node figures a node needs to take part (hbal's RAPI loader needs them of a live node)
REQUIRED = ("mtotal", "mfree", "ctotal")
# statuses in which an instance runs on its primary (its `oper_ram` is memory used there)
RUNS_ON_PRIMARY = frozenset({"running", "ERROR_up"})


def has_figures(figures: Mapping[str, Mapping[str, Any]], node: str) -> bool:
    f = figures.get(node) or {}
    return all(isinstance(f.get(k), int | float) and not isinstance(f.get(k), bool)
               for k in REQUIRED)


def _int(f: Mapping[str, Any], key: str) -> int:
    value = f.get(key)
    return int(value) if isinstance(value, int | float) else 0


def build_message(nodes: Sequence[Node], instances: Sequence[Instance],
                  figures: Mapping[str, Mapping[str, Any]],
                  request: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An iallocator v2 message (`request` default: balance) from maintd's view.

    `figures`: node name -> RAPI node dict with the live figures (every node of `nodes` must
    have them: `has_figures`)."""
    groups = {n.group or DEFAULT_GROUP for n in nodes}
    out_nodes: dict[str, Any] = {}
    for n in nodes:
        f = figures[n.name]
        primaries = [(i.memory, i.admin_state == "up",
                      i.oper_ram if i.status in RUNS_ON_PRIMARY else None)
                     for i in instances if i.pnode == n.name]
        out_nodes[n.name] = {
            "primary_ip": n.ip, "secondary_ip": n.ip, "tags": list(n.tags),
            "master_candidate": n.master, "master_capable": True, "vm_capable": n.vm_capable,
            "drained": n.drained, "offline": n.offline, "group": n.group or DEFAULT_GROUP,
            "ndparams": {"spindle_count": 1, "exclusive_storage": False},
            "total_memory": _int(f, "mtotal"), "reserved_memory": _int(f, "mnode"),
            "free_memory": livefigures.free_memory_for_allocation(_int(f, "mfree"), primaries),
            "total_disk": _int(f, "dtotal"), "free_disk": _int(f, "dfree"),
            "total_cpus": _int(f, "ctotal"), "reserved_cpus": _int(f, "cnos"),
            "total_spindles": 1, "free_spindles": 1,
        }
    insts = {}
    for i in instances:
        insts[i.name] = {
            "disks": [{"size": s, "mode": "rw", "spindles": 1} for s in i.disks],
            "disk_space_total": disk_total(i), "disk_template": i.disk_template,
            "tags": list(i.tags), "nics": [], "vcpus": i.vcpus, "memory": i.memory,
            "spindle_use": 1, "admin_state": i.admin_state if i.admin_state in (
                "up", "down", "offline") else "up",
            "nodes": [i.pnode, *i.snodes],
        }
    return {
        "version": 2, "cluster_name": "maintd", "cluster_tags": [],
        # the node memory is what each node reports (mnode), not hbal's static KVM figure
        "enabled_hypervisors": [],
        "nodegroups": {g: {"name": g, "alloc_policy": "preferred", "networks": [], "tags": []}
                       for g in sorted(groups)},
        "nodes": out_nodes, "instances": insts,
        "request": dict(request or {"type": "balance"}),
    }


Move = tuple[str, list[str], list[str], list[dict[str, Any]]]


class BalanceRefused(Exception):
    """The allocator could not use the request (its reason is the message)."""


def first_job_set(msg: Mapping[str, Any], threshold: float,
                  max_moves: int = -1, disk_moves: bool = True,
                  mond_data: Mapping[str, list[dict[str, Any]]] | None = None,
                  warn: Callable[[str], None] | None = None,
                  ) -> tuple[float, float, list[Move]]:
    """hbal's greedy balancing of every node group of `msg`, stopped at the first move that
    touches a node an earlier move touches: (initial score, score after the set, moves as
    (instance, old nodes, new nodes, opcodes)). Asked of the allocator through its `balance`
    request (`first_set_only`), so the moves after the set are not computed.
    `disk_moves` False: primaries only (hbal --no-disk-moves); `mond_data`: node name ->
    reports with cpu-avg-load (hbal --mond-data; ignored unless every node has one, `warn`
    says why). Raises BalanceRefused when the allocator refuses the request."""
    from herder.alloc import InputError, answer_message

    request: dict[str, Any] = {
        "type": "balance", "max_moves": max_moves, "min_gain": threshold,
        "min_gain_limit": 10 * threshold, "disk_moves": disk_moves, "first_set_only": True}
    if mond_data is not None:
        request["mond_data"] = {name: list(reports) for name, reports in mond_data.items()}
    try:
        response = answer_message({**msg, "request": request})
    except InputError as err:
        raise BalanceRefused(str(err)) from None
    if not response.success:
        raise BalanceRefused(response.info)
    result = response.result
    for warning in result["warnings"]:
        if warn is not None:
            warn(warning)
    [opcodes] = result["jobs"] or [[]]  # first_set_only: one set of parallel moves at most
    moves = [(move["instance"], move["from"], move["to"], ops)
             for move, ops in zip(result["moves"], opcodes, strict=True)]
    return result["initial_score"], result["final_score"], moves


def plan_balance(nodes: Sequence[Node], instances: Sequence[Instance], plan: Plan,
                 threshold: float, excluded: Iterable[str] = (),
                 figures: Mapping[str, Mapping[str, Any]] | None = None,
                 max_moves: int = -1,
                 new_uuid: Callable[[], str] | None = None, disk_moves: bool = True,
                 mond_data: Mapping[str, list[dict[str, Any]]] | None = None,
                 ) -> BalanceResult:
    """The balancing jobs of this round (see the module doc). `excluded`: names of nodes of
    active or failed incidents; every job is its own event (`new_uuid`) in the reason trail."""
    new_uuid = new_uuid or (lambda: str(uuidlib.uuid4()))
    out = BalanceResult()
    figures = figures or {}
    # Ganeti's algAllowedNodes: only the healthy nodes and the instances living on them alone
    bad = set(excluded) | {n.name for n in nodes if n.offline or n.drained or not n.vm_capable}
    silent = sorted(n.name for n in nodes
                    if n.name not in bad and not has_figures(figures, n.name))
    if silent:
        out.notes.append(f"balance: no live figures from {', '.join(silent)} (node daemon "
                         "not answering); left out with their instances")
        bad |= set(silent)
    ok_nodes = [n for n in nodes if n.name not in bad]
    known = {n.name for n in ok_nodes}
    insts = [i for i in instances if i.pnode in known and all(s in known for s in i.snodes)]
    if len(ok_nodes) < 2 or not insts:
        return out
    msg = build_message(ok_nodes, insts, figures)
    try:
        warnings: list[str] = []
        out.initial_score, out.final_score, moves = first_job_set(
            msg, threshold, max_moves, disk_moves, mond_data, warnings.append)
        out.dynamic_load = mond_data is not None and not warnings
        out.notes.extend(f"balance: {w}" for w in warnings)
    except BalanceRefused as err:
        out.notes.append(f"balance: the allocator refused the cluster: {err}")
        return out
    busy = {n for j in plan.jobs for n in j.nodes}
    used = {i for j in plan.jobs for i in j.instances}
    for name, old, new, ops in moves:
        touched = frozenset((*old, *new))
        if name in used or touched & busy:
            out.notes.append(f"balance: move of {name} waits ({', '.join(sorted(touched))} "
                             "busy)")
            continue
        event = new_uuid()
        out.jobs.append(Job(event, "balance", [annotate(dict(op), event) for op in ops],
                            nodes=touched, instances=frozenset((name,))))
        used.add(name)
        busy |= touched
    return out
