"""noded's handlers of the node RPCs: one function per call of the contract (`herder.core.
rpcdefs`), grouped by area (`node`, `instances`, `hotplug`, `migration`, `disks`, `storage`,
`files`, `role`, `backup`). A handler is a module-level function `(node: Node, call: TheCall) ->
TheAnswer` over the typed node context (`herder.noded.node.Node`): the call's Struct, decoded
and checked at the door, is its argument; the registry finds it by that annotation.

`decode` turns a signed request's method and arguments into the call (UnknownMethod: 404,
BadArguments: 400); `run` carries it out (a call the contract marks SERIAL while no other runs).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import pkgutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import get_type_hints

import msgspec

from herder.core.errors import HerderError
from herder.core.rpcdefs.base import Call
from herder.noded.node import Node

log = logging.getLogger("herder.noded")
SLOW_CALL = 0.1  # s: a call this long is logged with its times


class UnknownMethod(HerderError):
    """The node has no such RPC (404)."""


class BadArguments(HerderError):
    """The arguments of a node RPC are malformed (400)."""


@dataclass(frozen=True)
class Handler:
    call: type[Call[object]]  # the contract's call it handles
    # (Node, the call's own Struct) -> its answer: the argument's type is `call`, found at
    # run time from the handler's annotation, so no static type names it
    run: Callable[..., object]


def _handlers_of(module: ModuleType) -> list[Handler]:
    found = []
    for value in vars(module).values():
        if not inspect.isfunction(value) or value.__module__ != module.__name__:
            continue
        hint = get_type_hints(value).get("call")
        if isinstance(hint, type) and issubclass(hint, Call) and hint.__dict__.get("METHOD"):
            found.append(Handler(hint, value))
    return found


@cache
def handlers() -> dict[str, Handler]:
    """METHOD -> its handler, for every handler of this package's area modules; RuntimeError
    when two handle one call."""
    table: dict[str, Handler] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for handler in _handlers_of(module):
            method = handler.call.METHOD
            if method in table:
                raise RuntimeError(f"node RPC {method} has two handlers: "
                                   f"{table[method].run.__qualname__}, "
                                   f"{handler.run.__qualname__}")
            table[method] = handler
    return table


def decode(method: str, args: Mapping[str, object]) -> Call[object]:
    """The call `method` with `args`, checked (UnknownMethod, BadArguments: one line naming
    the argument)."""
    handler = handlers().get(method)
    if handler is None:
        raise UnknownMethod(f"unknown RPC {method[:64]!r}")
    try:
        return msgspec.convert(args, handler.call)
    except msgspec.ValidationError as err:
        raise BadArguments(f"{method}: bad arguments: {err}") from None


def run(node: Node, call: Call[object]) -> object:
    """Carry out a decoded call on this node (blocking). A call that took SLOW_CALL or more
    is logged with the time it waited for the serial lock and the time it ran: where a
    job's seconds went (a migration's, a creation's) is read from the nodes' logs."""
    handler = handlers()[call.METHOD]
    asked = time.monotonic()
    with node.serial_lock if call.SERIAL else contextlib.nullcontext():
        began = time.monotonic()
        try:
            return handler.run(node, call)
        finally:
            ended = time.monotonic()
            if ended - asked >= SLOW_CALL:
                log.info("RPC %s took %.0f ms (%.0f ms waiting for the serial lock)",
                         call.METHOD, (ended - asked) * 1000, (began - asked) * 1000)


def dispatch(node: Node, method: str, args: Mapping[str, object]) -> object:
    """`run` of the call `method` with `args` (in-process callers: tests, stand-in nodes)."""
    return run(node, decode(method, args))
