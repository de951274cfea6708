"""The nodes' liveness leases at the master (docs/ha.md "Node failure"): the heartbeats noded
sends (`noded.fence`), their ages for maintd, and the master candidates' view of a suspect node
(the routes are `masterd.rapi.leases`'s).

- `POST /2/herder/nodes/NAME/heartbeat`: a call of `node_lease` signed for NAME with the
  `node-lease` purpose key (only holders of the cluster key, ±300 s), over HTTPS from a
  caller showing NAME's own node certificate (`sender_refusal`: no other node, nor any holder
  of the cluster key, can keep NAME's lease alive), its counter above NAME's last one
  (`rpcauth.Counters`: one number a node, where a nonce cache would hold 150,000 nonces at
  1,000 nodes). masterd records when it received it and answers the lease time and whether
  the config has the node offline.
- `GET /2/herder/leases` (RAPI readers): per node the seconds since its last heartbeat, counted
  at most from when this masterd first saw the node (a masterd that just started suspects
  nobody; nor does it suspect a node just added or merged in before it could send one).
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

from herder.core import model, node_certs, rpcauth
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
    counters: rpcauth.Counters = field(default_factory=rpcauth.Counters)  # node UUID -> last
    started: float = field(default=0.0)
    _last: dict[str, float] = field(default_factory=dict)
    _first_seen: dict[str, float] = field(default_factory=dict)  # asked about, never heard from
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def start_afresh(self) -> None:
        """This masterd became the master now (an etcd election: a standby hears no
        heartbeats): every node is unknown until it renews, its age counted from now, so a
        node is suspected only once it missed a whole detection time under this master; never
        at once, and never forgotten."""
        with self._lock:
            self.started = self.clock()
            self._first_seen.clear()

    def renewed(self, uuid: str) -> None:
        with self._lock:
            self._last[uuid] = self.clock()
            self._first_seen.pop(uuid, None)

    def ages(self, uuids: list[str]) -> dict[str, float]:
        """Seconds since each node's last heartbeat; for a node never heard from, since this
        masterd was first asked about it (a node added or merged in a moment ago has had no
        chance to send one yet)."""
        now = self.clock()
        with self._lock:
            for gone in set(self._first_seen) - set(uuids):
                del self._first_seen[gone]  # removed from the config: forget it
            out = {}
            for uuid in uuids:
                last = self._last.get(uuid)
                if last is None:
                    last = self._first_seen.setdefault(uuid, now)
                out[uuid] = now - max(last, self.started)
            return out


def sender_refusal(config: model.ConfigData, node: model.Node,
                   shown: bytes | None) -> str | None:
    """Why a heartbeat for `node` from a caller showing the certificate `shown` (DER; None:
    none, or plain HTTP) is refused; None: it is `node`'s own (its current certificate, or
    the new one of a rotation), or the cluster issued no node certificates (imported from
    Ganeti, until its renew-crypto: the signature alone, as before)."""
    c = config.cluster
    if not c.node_certs and not c.node_certs_renewing:
        return None
    if shown is None:
        return f"a heartbeat must come over HTTPS with {node.name}'s node certificate"
    digest = node_certs.digest_der(shown)
    if digest in (c.node_certs.get(node.uuid), c.node_certs_renewing.get(node.uuid)):
        return None
    owner = next((config.node_name(u) for table in (c.node_certs, c.node_certs_renewing)
                  for u, d in table.items() if d == digest), None)
    if owner is not None:
        return f"the certificate is node {owner}'s, not {node.name}'s"
    return "the client certificate is not one of the cluster's node certificates " \
           "(revoked or unknown)"


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
