"""Fenced writes to etcd: who may write is the node holding the cluster's master key, at the
epoch (the key's create_revision) it was elected with (`masterd.lease` campaigns for the key).

The config store (`store_etcd`) and masterd's job storage carry a fence into their transactions:
a fenced write compares the key's value and create_revision in the same transaction as the put,
so a master that lost its lease writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from herder.core.errors import StoreError


@dataclass(frozen=True)
class Fence:
    """Who may write: the master key must hold `node_name`, created at revision `epoch`."""

    node_name: str
    epoch: int


class FenceSource(Protocol):
    """What holds the current fence (masterd's `MasterLease`): None when not the master."""

    node_name: str

    def fence(self) -> Fence | None: ...


def resolve_fence(fence: Fence | FenceSource | None, what: str) -> Fence | None:
    """The fence a write must carry: a given Fence, the source's current one, or None (no
    fence); StoreError when the source has no current epoch (this node is not the master)."""
    if fence is None or isinstance(fence, Fence):
        return fence
    current = fence.fence()
    if current is None:
        raise StoreError(f"{what}: {fence.node_name} is not the master (no current epoch); "
                         "nothing written")
    return current


def master_key(cluster: str) -> str:
    return f"/herder/{cluster}/master"
