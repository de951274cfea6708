"""Stand-in node RPC transports for tests that record what the master sends: they take the wire
form (method, JSON arguments) as the real transport does, and answer what a node would answer
about nothing (`nothing_answer`: the least value of the call's answer type in the contract), so
the master's typed calls decode it as they decode a real node's."""

from __future__ import annotations

import types
import typing
from typing import Any

import msgspec

from herder.core import rpcdefs


def _least(annotation: Any) -> object:
    if annotation is type(None) or annotation is None:
        return None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        arguments = typing.get_args(annotation)
        return None if type(None) in arguments else _least(arguments[0])
    if origin is list:
        return []
    if origin is dict:
        return {}
    if origin is tuple:
        return [_least(argument) for argument in typing.get_args(annotation)]
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        info = msgspec.inspect.type_info(annotation)
        assert isinstance(info, msgspec.inspect.StructType)
        values = [_least_of(field.type) for field in info.fields] if info.array_like else {
            field.encode_name: _least_of(field.type) for field in info.fields if field.required}
        return msgspec.to_builtins(msgspec.convert(values, annotation))
    return {str: "", int: 0, float: 0.0, bool: False}.get(annotation)


def _least_of(kind: msgspec.inspect.Type) -> object:
    if isinstance(kind, msgspec.inspect.StrType):
        return ""
    if isinstance(kind, msgspec.inspect.BoolType):
        return False
    if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
        return 0
    if isinstance(kind, msgspec.inspect.EnumType):
        return next(iter(kind.cls)).value
    if isinstance(kind, msgspec.inspect.LiteralType):
        return kind.values[0]
    if isinstance(kind, msgspec.inspect.ListType | msgspec.inspect.DictType):
        return [] if isinstance(kind, msgspec.inspect.ListType) else {}
    return None


def nothing_answer(method: str) -> object:
    """The answer of a node that has nothing to say to `method` (an empty list, None, ...), in
    the wire form."""
    return _least(rpcdefs.registry()[method].ANSWER)
