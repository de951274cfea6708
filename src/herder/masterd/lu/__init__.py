"""Logical units: one module per opcode family; each LU names the opcode it executes in its
base class (`class InstanceStartup(_NodeAction[opcodes.OpInstanceStartup])`), which sets `OP`.

The registry is built from the opcodes (`opcodes.ALL_OPCODES`): each one's LU is the class of
these modules that declares it, exactly one per opcode.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import LogicalUnit


def _units(base: type[LogicalUnit[opcodes.OpCode]]) -> list[type[LogicalUnit[opcodes.OpCode]]]:
    found: list[type[LogicalUnit[opcodes.OpCode]]] = []
    for cls in base.__subclasses__():
        found.append(cls)
        found.extend(_units(cls))
    return found


@cache
def registry() -> dict[str, type[LogicalUnit[opcodes.OpCode]]]:
    """OP_ID -> logical unit class, for every opcode. RuntimeError when an opcode has no LU or
    two, or an LU names something not an opcode."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    claims: dict[type[opcodes.OpCode], list[type[LogicalUnit[opcodes.OpCode]]]] = {}
    for cls in _units(LogicalUnit):
        op = vars(cls).get("OP")
        if op is not None:
            claims.setdefault(op, []).append(cls)
    strays = [cls.__name__ for op, units in claims.items() if op not in opcodes.ALL_OPCODES
              for cls in units]
    if strays:
        raise RuntimeError(f"logical units for unknown opcodes: {', '.join(strays)}")
    found: dict[str, type[LogicalUnit[opcodes.OpCode]]] = {}
    for op in opcodes.ALL_OPCODES:
        units = claims.get(op, [])
        if len(units) != 1:
            names = ", ".join(cls.__name__ for cls in units) or "none"
            raise RuntimeError(f"{opcodes.op_id_of(op)} needs one logical unit (found: {names})")
        found[opcodes.op_id_of(op)] = units[0]
    return found
