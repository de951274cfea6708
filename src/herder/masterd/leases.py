"""The nodes' liveness leases at the master (docs/ha.md "Node failure"): the heartbeats noded
sends (`noded.fence`), their ages for maintd, and the master candidates' view of a suspect node
(the routes are `masterd.rapi.leases`'s).

- `POST /2/herder/nodes/NAME/heartbeat`: a call of `node_lease` signed for NAME with the
  `node-lease` purpose key (only holders of the cluster key; each body once, ±300 s). masterd
  records when it received it and answers the lease time and whether the config has the node
  offline.
- `GET /2/herder/leases` (RAPI readers): per node the seconds since its last heartbeat, counted
  from masterd's own start at most (a masterd that just started suspects nobody).
- `GET /2/herder/nodes/NAME/liveness` (RAPI readers): every other master candidate's noded is
  asked in parallel whether it reaches NAME's noded and when NAME last asked it for its lease
  (`node_reachable`); maintd declares a node failed only on a majority of these.

The record is in memory: a new masterd (a restart, a failover) starts counting afresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from herder.core import model, rpcauth
from herder.core.errors import RpcError
from herder.core.noderpc import NodeRpc
from herder.core.rpcdefs import node_calls

log = logging.getLogger("herder.masterd")
METHOD = "node_lease"  # noded.fence.METHOD
LEASE_TIME = 6.0  # seconds a renewal keeps the node's lease (counted from its sending)
RENEW_PERIOD = 2.0  # seconds between a node's heartbeats
REACH_TIMEOUT = 2.0  # seconds a candidate tries to reach the suspect node
CANDIDATE_TIMEOUT = 5.0  # seconds masterd waits for a candidate's answer


@dataclass
class Leases:
    """Node UUID -> when masterd last received its heartbeat (monotonic)."""

    keys: Callable[[], list[bytes]]
    clock: Callable[[], float] = time.monotonic
    replay: rpcauth.ReplayCache = field(default_factory=rpcauth.ReplayCache)
    started: float = field(default=0.0)
    _last: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def renewed(self, uuid: str) -> None:
        with self._lock:
            self._last[uuid] = self.clock()

    def ages(self, uuids: list[str]) -> dict[str, float]:
        """Seconds since each node's last heartbeat (at most since masterd started)."""
        now = self.clock()
        with self._lock:
            return {u: now - max(self._last.get(u, self.started), self.started) for u in uuids}


def liveness_votes(config: model.ConfigData, node: model.Node,
                   rpc: NodeRpc) -> dict[str, object]:
    """Every other master candidate's answer of `node_reachable` for `node` (name ->
    answer, or {"error": ...} when the candidate did not answer)."""
    from concurrent.futures import ThreadPoolExecutor

    master = config.cluster.master_node
    voters = [n for n in config.nodes.values()
              if n.master_candidate and n.uuid not in (master, node.uuid) and not n.offline]

    def ask(voter: model.Node) -> tuple[str, object]:
        try:
            answer = rpc.call(voter, node_calls.NodeReachable(
                node=node.name, address=node.primary_ip, timeout=REACH_TIMEOUT),
                timeout=CANDIDATE_TIMEOUT)
            return voter.name, msgspec.to_builtins(answer)
        except RpcError as err:
            return voter.name, {"error": str(err)}

    if not voters:
        return {}
    with ThreadPoolExecutor(max_workers=len(voters)) as pool:
        return dict(pool.map(ask, voters))
