"""The master-candidate pool with Ganeti's semantics (`candidate_pool_size`): a node added or
set online again promotes itself while the pool is short (_DecideSelfPromotion); demoting a
candidate (offline, drained, `--master-candidate no`, not master capable) is refused while it
would leave the pool short, unless `auto_promote` lets other nodes fill it
(MaintainCandidatePool); removing a node and growing the pool size fill it too.

Pure config logic; `announce` tells the promoted nodes (they receive the whole config)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from herder.core import model
from herder.core.errors import OpPrereqError
from herder.core.noderpc import UnavailableRpc
from herder.masterd.lu.base import MasterEnv
from herder.masterd.lu.common import redistribute

# Ganeti's message, word for word: scripts and operators know it
NOT_ENOUGH = ("Not enough master candidates, please pass auto promote option to allow "
              "promotion (--auto-promote or RAPI auto_promote=True)")


@dataclass(frozen=True)
class PoolStats:
    """Ganeti's GetMasterCandidateStats: candidates now, and how many there should be (the
    online, undrained, master-capable nodes, up to the pool size)."""

    now: int
    should: int


def stats(config: model.ConfigData, exceptions: Iterable[str] = ()) -> PoolStats:
    skip = set(exceptions)
    nodes = [n for n in config.nodes.values() if n.uuid not in skip]
    possible = sum(1 for n in nodes if n.master_capable and not (n.offline or n.drained))
    now = sum(1 for n in nodes if n.master_candidate)
    return PoolStats(now, min(possible, config.cluster.candidate_pool_size))


def self_promotion(config: model.ConfigData, node: model.Node) -> bool:
    """Whether `node` (added, or set online or undrained) should become a master candidate
    (Ganeti's _DecideSelfPromotion): fewer candidates than the pool size wants, counting the
    node among the possible ones."""
    found = stats(config, [node.uuid])
    return found.now < min(found.should + 1, config.cluster.candidate_pool_size)


def check_demotion(config: model.ConfigData, node: model.Node) -> None:
    """Ganeti's refusal to demote a candidate without auto_promote while the others would not
    fill the pool (another capable node could be promoted instead)."""
    left = stats(config, [node.uuid])
    if node.master_candidate and left.now < left.should:
        raise OpPrereqError(NOT_ENOUGH, "wrong_state")


def maintain(config: model.ConfigData, exceptions: Iterable[str] = ()) -> list[model.Node]:
    """Promote nodes until the pool is full (Ganeti's MaintainCandidatePool), in name order
    (Ganeti picks at random; a fixed order makes the outcome predictable); the promoted."""
    skip = set(exceptions)
    found = stats(config, skip)
    promoted: list[model.Node] = []
    now = found.now
    for node in sorted(config.nodes.values(), key=lambda n: n.name):
        if now >= found.should:
            break
        if node.master_candidate or node.offline or node.drained or node.uuid in skip \
                or not node.master_capable:
            continue
        node.master_candidate = True
        node.touch()
        promoted.append(node)
        now += 1
    return promoted


def announce(env: MasterEnv, promoted: list[model.Node],
             feedback: Callable[[str], None]) -> None:
    """Say who was promoted (Ganeti's "Promoted nodes to master candidate role") and give
    each its whole config (design-2.1 "Redistribute Config")."""
    if not promoted:
        return
    feedback("Promoted nodes to master candidate role: "
             + ", ".join(n.name for n in promoted))
    if isinstance(env.rpc, UnavailableRpc):
        return
    pushed = redistribute(env, env.store.load(), full=True, only=[n.name for n in promoted])
    for name, result in pushed.items():
        for error in result.get("errors", []):
            feedback(f"{name}: {error}")
