"""The master->node RPC contract: every node RPC defined once, typed (Ganeti's `rpc_defs`).

`base.Call` is the shape of a call; the calls are defined by area: `node_calls` (ping, live
figures, epoch and vote, OS list, repair, power), `instance_calls`, `hotplug_calls`,
`migration_calls`, `disk_calls`, `storage_calls`, `file_calls` (redistribution),
`role_calls` and `backup_calls` (exports); `payload` is the instance as a node is told it
(`core.diskobjects`: its disks). The master calls `rpc.call(node, instance_calls.
InstanceStart(...))` (`core.noderpc`) and gets the typed answer; noded has one handler per call
(`herder.noded.rpc`). `registry()` lists them all.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from herder.core.rpcdefs.base import Call


def _calls(base: type[Call[Any]]) -> list[type[Call[Any]]]:
    found: list[type[Call[Any]]] = []
    for cls in base.__subclasses__():
        found.append(cls)
        found.extend(_calls(cls))
    return found


@cache
def registry() -> dict[str, type[Call[Any]]]:
    """METHOD -> its call, for every call of the contract's modules. RuntimeError when two
    calls name one method."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    found: dict[str, type[Call[Any]]] = {}
    for cls in _calls(Call):
        method = cls.__dict__.get("METHOD")
        if not method:
            continue  # a shared base of an area
        if method in found and found[method] is not cls:
            raise RuntimeError(f"node RPC {method} is defined twice: "
                               f"{found[method].__qualname__}, {cls.__qualname__}")
        found[method] = cls
    return found
