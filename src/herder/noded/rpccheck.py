"""Checking a node RPC request before noded acts on it.

Two layers, as Ganeti's node daemon plus what it lacks:

- TLS (`noded.daemon.serve`, `noded.trust`): the caller must show a certificate issued by the
  cluster CA whose digest is in the cluster's list of node certificates;
- the body (`RequestChecker`): signed with the node-RPC key for this method and this node,
  within the time window, its nonce never seen before (`core.rpcauth`). A refusal is 403 with
  the reason; an accepted call's arguments must be a JSON object (else 400).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from herder.core import rpcauth
from herder.core.errors import SignatureError


class Refused(Exception):
    """The request is refused: HTTP `status` and the reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class RequestChecker:
    keys: Callable[[], list[bytes]]  # the cluster HMAC keys now (node-RPC keys derive from them)
    node: str  # this node's name, as the master's config names it
    replay: rpcauth.ReplayCache = field(default_factory=rpcauth.ReplayCache)

    def check(self, method: str, body: bytes) -> dict[str, object]:
        """The call's arguments; Refused when it must not run."""
        keys = self.keys()
        if not keys:
            raise Refused(403, "refused: this node has not joined a cluster")
        try:
            args = rpcauth.check_call(keys, body, method=method, node=self.node,
                                      replay=self.replay)
        except SignatureError as err:
            raise Refused(403, f"refused: {err}") from None
        if not isinstance(args, dict):
            raise Refused(400, "arguments must be an object")
        return args
