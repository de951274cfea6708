"""Request types: name -> handler. Each handler answers one parsed iallocator request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from herder.alloc.model import Cluster
from herder.alloc.protocol import Options, Response

Handler = Callable[[Cluster, dict[str, Any], Options], Response]


def _registry() -> dict[str, Handler]:
    from herder.alloc.modes import (
        allocate,
        allocate_secondary,
        balance,
        capacity,
        change_group,
        multi_allocate,
        node_evacuate,
        relocate,
    )

    return {
        "allocate": allocate.handle,
        "relocate": relocate.handle,
        "node-evacuate": node_evacuate.handle,
        "change-group": change_group.handle,
        "multi-allocate": multi_allocate.handle,
        "allocate-secondary": allocate_secondary.handle,
        "balance": balance.handle,
        "capacity": capacity.handle,
    }


REGISTRY: dict[str, Handler] = {}


def handler(kind: str) -> Handler | None:
    if not REGISTRY:
        REGISTRY.update(_registry())
    return REGISTRY.get(kind)
