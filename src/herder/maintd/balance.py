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

The iallocator message is built from RAPI data. masterd's RAPI has no live node figures yet
(`mtotal`, `mfree`, `dtotal`, `dfree` are null): when a node's figures are null, every node is
given the same capacity — twice the memory (disk) all instances of the cluster use, at
least 1 GiB (10 GiB), and 64 CPUs, so that N+1 checks never bind on made-up figures — and its
free figures follow from the instances' sizes
(memory of primaries; disk of primaries and secondaries). The score then balances what the
instances use, which is what matters on a uniform cluster (compat row D-balance).

Settings `balanceDiskMoves` (false: hbal --no-disk-moves, primaries only) and
`balanceDynamicLoad` (true: hbal --mond — every node's agent is asked for cpu-avg-load; as in
Ganeti, the load is used only when every node answered, else a note says why it was ignored).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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


def build_message(nodes: Sequence[Node], instances: Sequence[Instance],
                  figures: Mapping[str, Mapping[str, Any]] | None = None,
                  request: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An iallocator v2 message (`request` default: balance) from maintd's view.

    `figures`: node name -> RAPI node dict; its `mtotal/mfree/dtotal/dfree/ctotal` are used
    when no node's are null, otherwise the uniform capacity of the module doc."""
    figures = figures or {}
    mem_used = {n.name: 0 for n in nodes}
    dsk_used = {n.name: 0 for n in nodes}
    for inst in instances:
        if inst.pnode in mem_used:
            mem_used[inst.pnode] += inst.memory
            dsk_used[inst.pnode] += disk_total(inst)
        for s in inst.snodes:
            if s in dsk_used:
                dsk_used[s] += disk_total(inst)
    # the whole cluster's use fits on any node: the N+1 checks never bind on assumed figures
    t_mem = max(1024, 2 * sum(i.memory for i in instances))
    t_dsk = max(10240, 2 * sum(dsk_used.values()))
    groups = {n.group or DEFAULT_GROUP for n in nodes}
    keys = ("mtotal", "mfree", "dtotal", "dfree")
    # all nodes' live figures or none (a mix of real and assumed capacities scores nonsense)
    live = all(isinstance((figures.get(n.name) or {}).get(k), int | float)
               for n in nodes for k in keys)
    out_nodes: dict[str, Any] = {}
    for n in nodes:
        f = figures.get(n.name) or {}
        entry: dict[str, Any] = {
            "primary_ip": n.ip, "secondary_ip": n.ip, "tags": list(n.tags),
            "master_candidate": n.master, "master_capable": True, "vm_capable": n.vm_capable,
            "drained": n.drained, "offline": n.offline, "group": n.group or DEFAULT_GROUP,
            "ndparams": {"spindle_count": 1, "exclusive_storage": False},
        }
        if live:
            entry.update(total_memory=int(f["mtotal"]), free_memory=int(f["mfree"]),
                         reserved_memory=int(f.get("mnode") or 0), total_disk=int(f["dtotal"]),
                         free_disk=int(f["dfree"]), total_cpus=int(f.get("ctotal") or 64),
                         reserved_cpus=1)
        else:
            entry.update(total_memory=t_mem, free_memory=t_mem - mem_used[n.name],
                         reserved_memory=0, total_disk=t_dsk,
                         free_disk=t_dsk - dsk_used[n.name], total_cpus=64, reserved_cpus=1)
        entry.update(total_spindles=1, free_spindles=1)
        out_nodes[n.name] = entry
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
        "enabled_hypervisors": [],  # no static KVM node memory on assumed figures
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
    # Ganeti's algAllowedNodes: only the healthy nodes and the instances living on them alone
    bad = set(excluded) | {n.name for n in nodes if n.offline or n.drained or not n.vm_capable}
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
