"""What the master asks of a node: the node-RPC client interface.

LUs call these methods; the transport (TLS to each node's `herder noded`) plugs in behind
`NodeRpc`. Until a node daemon transport is configured, `UnavailableRpc` fails every call with a
clear error, so opcodes that need a node fail cleanly and leave the config consistent.
Instance-affecting calls carry the reason trail and the config version of the instance they
act on (design-monitoring-agent "Instance status").
"""

from __future__ import annotations

from typing import Any, Protocol

from herder.core import model as M
from herder.core.errors import RpcError


class NodeRpc(Protocol):
    def ping(self, node: M.Node) -> dict[str, Any]: ...

    def instance_start(self, node: M.Node, instance: M.Instance, reason: list[Any]) -> None: ...

    def instance_shutdown(self, node: M.Node, instance: M.Instance, reason: list[Any],
                          timeout: float) -> None: ...

    def instance_reboot(self, node: M.Node, instance: M.Instance, reboot_type: str,
                        reason: list[Any]) -> None: ...

    def instance_migrate(self, source: M.Node, target: M.Node, instance: M.Instance,
                         live: bool, reason: list[Any]) -> None: ...

    def instance_list(self, node: M.Node) -> list[str]: ...

    def node_powercycle(self, node: M.Node) -> None: ...


class UnavailableRpc:
    """The transport before node daemons exist: every call fails with the reason."""

    def __init__(self, reason: str = "no node daemon transport is configured") -> None:
        self.reason = reason

    def __getattr__(self, name: str) -> Any:
        def fail(node: M.Node, *args: Any, **kwargs: Any) -> Any:
            raise RpcError(f"node {node.name}: cannot call {name}: {self.reason}")

        return fail
