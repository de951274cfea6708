"""Logical units: one module per opcode family, each listing its classes in `LUS`."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from herder.masterd.lu.base import LogicalUnit


@cache
def registry() -> dict[str, type[LogicalUnit]]:
    """OP_ID -> logical unit class."""
    found: dict[str, type[LogicalUnit]] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for cls in getattr(module, "LUS", ()):
            op_id = cls.OP.__struct_config__.tag
            if op_id in found:
                raise RuntimeError(f"two logical units for {op_id}")
            found[op_id] = cls
    return found
