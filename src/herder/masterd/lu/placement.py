"""Where an instance goes (Ganeti's iallocator calls of cmdlib): the nodes' live figures for a
placement, the target of a migration or failover (the DRBD secondary, or the allocator's
`relocate` answer for shared storage), and a DRBD instance's new secondary."""

from __future__ import annotations

from herder.core import model
from herder.core.errors import OpPrereqError
from herder.masterd import iallocator
from herder.masterd.livecache import LiveCache, Snapshot
from herder.masterd.lu.base import MasterEnv, lookup
from herder.masterd.lu.disks import Feedback

PLACEMENT_TIMEOUT = 15.0  # seconds every node has to report its figures for a placement
ALLOCATED = ("sharedfile", "rbd", "ext", "diskless", "blockdev")  # any node can take them


def live_figures(env: MasterEnv, config: model.ConfigData, feedback: Feedback) -> Snapshot:
    """Fresh live figures of every online node, asked in parallel (as Ganeti's iallocator
    input: the nodes are asked for each placement); a node that does not answer is left out
    (counts as offline)."""
    cache = env.live or LiveCache(env.rpc)
    try:
        live = cache.snapshot(config, fresh=True, timeout=PLACEMENT_TIMEOUT)
    finally:
        if cache is not env.live:
            cache.close()
    for node in sorted(config.nodes.values(), key=lambda n: n.name):
        problem = live.error(node.uuid)
        if problem is not None:
            feedback(f"node {node.name} left out of the placement: {problem}")
    return live


def _relocate(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
              allocator: str | None, relocate_from: list[str], feedback: Feedback
              ) -> tuple[str, model.Node]:
    """The allocator's answer to a `relocate` request (the op's iallocator, else the cluster's
    default relocate allocators, else herder's own): its name and the node it chose."""
    names = [allocator] if allocator else \
        config.cluster.default_iallocators.get("relocate", []) or [iallocator.BUILTIN]
    request = {"type": "relocate", "name": inst.name, "required_nodes": 1,
               "disk_space_total": iallocator.disk_space_total(
                   inst.disk_template, [d.size for d in inst.disks]),
               "relocate_from": relocate_from}
    name, nodes = iallocator.allocate_nodes(config, names, request,
                                            live_figures(env, config, feedback),
                                            env.iallocator_path or iallocator.DEFAULT_SEARCH_PATH)
    return name, lookup(config.find_node, nodes[0])


def uses_allocator(inst: model.Instance, allocator: str | None, target_node: str | None) -> bool:
    """Whether a migration/failover asks an iallocator for the target: a shared-storage or
    diskless instance with `allocator`, or with neither it nor a target node (Ganeti's
    externally mirrored instances)."""
    return inst.disk_template in ALLOCATED and (bool(allocator) or not target_node)


def allocate_target(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                    allocator: str | None, feedback: Feedback) -> model.Node:
    """The allocator's node for a shared-storage instance: a `relocate` request with
    `relocate_from: [primary]`, as Ganeti asks for externally mirrored instances."""
    name, target = _relocate(env, config, inst, allocator,
                             [config.node_name(inst.primary_node)], feedback)
    if target.uuid == inst.primary_node:
        raise OpPrereqError(f"iallocator {name} chose the instance's own node {target.name}",
                            "insufficient_resources")
    feedback(f"{inst.name}: iallocator {name} chose {target.name}")
    return target


def pick_target(config: model.ConfigData, inst: model.Instance,
                target_node: str | None) -> model.Node:
    """The node a migration or failover goes to without an allocator: the DRBD secondary, or
    the node given (shared storage)."""
    if inst.disk_template == "drbd":
        secondary = inst.secondary_nodes
        if not secondary:
            raise OpPrereqError(f"instance {inst.name} has no secondary node")
        target = config.nodes[secondary[0]]
        if target_node and lookup(config.find_node, target_node).uuid != target.uuid:
            raise OpPrereqError("a DRBD instance can only move to its secondary node")
        return target
    if inst.disk_template in ALLOCATED:
        if not target_node:
            raise OpPrereqError(f"instance {inst.name}: give a target node")
        target = lookup(config.find_node, target_node)
        if target.uuid == inst.primary_node:  # Ganeti's TLMigrateInstance.CheckPrereq
            raise OpPrereqError(f"Cannot migrate instance {inst.name} to its primary "
                                f"({target.name})", "wrong_state")
        return target
    raise OpPrereqError(f"instance {inst.name} has disk template {inst.disk_template}, which "
                        "cannot move between nodes", "wrong_input")


def choose_secondary(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                     remote_node: str | None, allocator: str | None,
                     feedback: Feedback) -> model.Node:
    """A DRBD instance's new secondary: the node given, else the allocator's `relocate`
    answer (relocating from the current secondary)."""
    if remote_node:
        return lookup(config.find_node, remote_node)
    _, node = _relocate(env, config, inst, allocator,
                        [config.node_name(n) for n in inst.secondary_nodes], feedback)
    return node
