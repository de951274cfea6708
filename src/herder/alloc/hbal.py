"""An hbal run over the allocator's cluster model: what `herder balance` computes between the
lines it prints (the CLI parses the options, reads the files and prints; errors keep hbal's
wording, as `InputError`).

The steps, in hbal's order: `select_instances` (exclusion tags, --exclude/--select-instances),
`apply_util` (-U), then the CLI's MonD step, `mark_offline` (-O), `pick_group` (-G),
`start` (the initial checks and score), the balancer's run, `command_lines` (-C).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from herder.alloc.balance import (
    BalanceOptions,
    Balancer,
    Move,
    job_sets,
    move_commands,
    n1_bad,
    optimal_score,
    policy_violating_nodes,
)
from herder.alloc.model import Cluster, Instance, Node
from herder.alloc.protocol import InputError


class Aborted(InputError):
    """hbal gave up ("Aborting.") after saying why in `details` (lines for stderr)."""

    def __init__(self, details: list[str]) -> None:
        super().__init__("Aborting.")
        self.details = details


def select_instances(cl: Cluster, exclusion_tags: str | None, exclude: str | None,
                     select: str | None) -> None:
    """Exclusion tag prefixes (comma list) and the instances hbal may move: none of `exclude`,
    only those of `select` (comma lists of names); InputError naming unknown instances."""
    for arg in (exclude, select):
        if arg:
            unknown = [x for x in arg.split(",") if x not in cl.inst_by_name]
            if unknown:
                raise InputError("failed to load data, aborting: Unknown instance(s): "
                                 + "[" + ",".join(f'"{x}"' for x in unknown) + "]")
    if exclusion_tags:
        prefixes = tuple(p + ":" for p in exclusion_tags.split(",") if p)
        cl.excl_prefixes = cl.excl_prefixes + prefixes
        reindex_tags(cl)
    if exclude:
        for name in exclude.split(","):
            cl.instances[cl.inst_by_name[name]].movable = False
    if select:
        chosen = set(select.split(","))
        for inst in cl.instances:
            if inst.name not in chosen:
                inst.movable = False


def reindex_tags(cl: Cluster) -> None:
    """Recompute exclusion tags (after --exclusion-tags) and the nodes' tag counts."""
    for inst in cl.instances:
        cl.prepare_instance(inst)
    for n in cl.nodes:
        n.ptags = {}
        n.inst_map = {}
    for inst in cl.instances:
        p = cl.nodes[inst.pnode]
        for tag in inst.excl_tags:
            p.ptags[tag] = p.ptags.get(tag, 0) + 1
            for loc in p.loc_tags:
                p.inst_map[(loc, tag)] = p.inst_map.get((loc, tag), 0) + 1


def apply_util(cl: Cluster, text: str) -> None:
    """hbal's -U file (`name cpu mem dsk net` per line) into the instances' dynamic
    utilisation, and the nodes' load figures rebuilt from them."""
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 5:
            raise InputError(f"can't parse utilisation data: Cannot parse line {line}")
        name, *vals = parts
        nums = []
        for v in vals:
            try:
                nums.append(float(v))
            except ValueError:
                raise InputError(f"can't parse utilisation data: {name}: cannot parse string "
                                 f"'{v}'") from None
        idx = cl.inst_by_name.get(name)
        if idx is not None:
            inst = cl.instances[idx]
            inst.util = (nums[0], nums[1], nums[2], nums[3])
    for n in cl.nodes:
        n.load = [0.0, 0.0, 0.0, 0.0]
    for inst in cl.instances:
        p = cl.nodes[inst.pnode]
        for k in range(4):
            p.load[k] += inst.util[k]
        if inst.snode >= 0:
            cl.nodes[inst.snode].load[2] += inst.util[2]


def mark_offline(cl: Cluster, specs: Iterable[str]) -> None:
    """-O: the named nodes (comma lists) count as offline; InputError for an unknown one
    (and none marked)."""
    names = [name for spec in specs for name in spec.split(",")]
    unknown = next((name for name in names if name not in cl.node_by_name), None)
    if unknown is not None:
        raise InputError(f"Unknown node '{unknown}'")
    for name in names:
        cl.nodes[cl.node_by_name[name]].offline = True


@dataclass
class GroupView:
    """The node group hbal balances."""

    index: int  # -1: a cluster without groups
    name: str | None
    nodes: list[Node]
    instances: list[Instance]  # those with their primary in the group
    split: list[str]  # instances whose primary and secondary are in different groups


def pick_group(cl: Cluster, name: str | None) -> GroupView:
    """The group named (or the only one); its instances with a node outside it are not moved.
    `Aborted` when there are several groups and none is named, or the name is unknown."""
    present = sorted({n.group for n in cl.nodes})
    if name is None:
        if len(present) > 1:
            raise Aborted(["Found multiple node groups:",
                           *(f"  {cl.groups[g].name}" for g in present)])
        chosen = cl.groups[present[0]] if present else None
    else:
        chosen = cl.group_named(name)
        if chosen is None:
            raise Aborted([f"No such node group '{name}'"])
    gidx = chosen.idx if chosen is not None else -1
    split = [i.name for i in cl.instances
             if i.snode >= 0 and cl.nodes[i.pnode].group != cl.nodes[i.snode].group]
    nodes = [n for n in cl.nodes if n.group == gidx]
    insts = [i for i in cl.instances if i.pnode >= 0 and cl.nodes[i.pnode].group == gidx]
    for inst in insts:
        if inst.snode >= 0 and cl.nodes[inst.snode].group != gidx:
            inst.movable = False
    return GroupView(gidx, chosen.name if chosen is not None else None, nodes, insts, split)


@dataclass
class Start:
    """The group before balancing: hbal's initial checks and score."""

    bad_nodes: int  # nodes failing N+1
    bad_instances: int  # instances on them
    violating: int  # nodes violating the instance policy
    score: float
    optimal: float  # the best score the N+1 reservations allow

    def balanced(self, min_score: float) -> bool:
        return self.score - self.optimal < min_score


def start(cl: Cluster, view: GroupView, opts: BalanceOptions) -> tuple[Balancer, Start]:
    """The balancer of the group (not run yet) and its starting point."""
    bad_nodes, bad_insts = n1_bad(cl, view.nodes)
    balancer = Balancer(cl, view.index, opts)
    return balancer, Start(bad_nodes, bad_insts, policy_violating_nodes(view.nodes),
                           balancer.score(), optimal_score(view.nodes))


def command_lines(moves: Sequence[Move]) -> list[str]:
    """hbal's -C text: the gnt-instance commands of the solution, by job set."""
    lines = ["", "Commands to run to reach the above solution:"]
    for js, jobs in enumerate(job_sets(moves), start=1):
        lines.append("  ")
        lines.append(f"  echo jobset {js}, {len(jobs)} jobs")
        for jn, mv in enumerate(jobs, start=1):
            lines.append(f"    echo job {js}/{jn}")
            lines.extend("    " + c for c in move_commands(mv))
    return lines
