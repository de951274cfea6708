"""Request types: name -> handler. Each handler answers one parsed iallocator request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from herder.alloc.model import Cluster
from herder.alloc.protocol import Options, Response

Handler = Callable[[Cluster, dict[str, Any], Options], Response]


# request type -> module of herder.alloc.modes (imported only when that type is asked for)
MODULES = {
    "allocate": "allocate",
    "relocate": "relocate",
    "node-evacuate": "node_evacuate",
    "change-group": "change_group",
    "multi-allocate": "multi_allocate",
    "allocate-secondary": "allocate_secondary",
    "balance": "balance",
    "capacity": "capacity",
}
REGISTRY: dict[str, Handler] = {}


def handler(kind: str) -> Handler | None:
    found = REGISTRY.get(kind)
    if found is None and kind in MODULES:
        import importlib

        module = importlib.import_module(f"herder.alloc.modes.{MODULES[kind]}")
        found = REGISTRY[kind] = module.handle
    return found
