"""The node RPC contract (`herder.core.rpcdefs`) and noded's handlers (`herder.noded.rpc`) agree:
every call of the contract has exactly one handler on the node and every handler handles a call
of the contract; a handler takes its call's Struct and answers its call's answer type; every
call survives its trip over the wire (the arguments as JSON and back, the answer decoded)."""

from __future__ import annotations

import inspect
import typing
from typing import Any, get_type_hints

import msgspec
import pytest

from herder.core import rpcdefs, vmclaim
from herder.core.rpcdefs import instance_calls
from herder.noded import rpc
from herder.noded.node import Node


def _normal(annotation: object) -> object:
    return type(None) if annotation is None else annotation


def test_every_call_has_exactly_one_handler_and_every_handler_a_call() -> None:
    contract = rpcdefs.registry()
    handlers = rpc.handlers()
    assert sorted(set(contract) - set(handlers)) == []  # calls the node cannot answer
    assert sorted(set(handlers) - set(contract)) == []  # handlers of no call
    for method, handler in handlers.items():
        assert handler.call is contract[method], method


@pytest.mark.parametrize("method", sorted(rpcdefs.registry()))
def test_a_handler_takes_its_call_and_answers_its_answer(method: str) -> None:
    call = rpcdefs.registry()[method]
    handler = rpc.handlers()[method].run
    parameters = list(inspect.signature(handler).parameters)
    assert parameters == ["node", "call"], method
    hints = get_type_hints(handler)
    assert hints["node"] is Node
    assert hints["call"] is call
    assert _normal(hints["return"]) == _normal(call.ANSWER), \
        f"{handler.__qualname__} answers {hints['return']}, the contract says {call.ANSWER}"


def test_the_contract_is_complete_about_each_call() -> None:
    for method, call in rpcdefs.registry().items():
        assert method == call.METHOD and method.isidentifier()
        assert call.ANSWER is not None, method  # taken from its Call[...] base
        assert not (call.SERIAL and call.READ_ONLY), method  # what runs alone changes things
        assert call.TIMEOUT is None or 0 < call.TIMEOUT <= 3600, method


def _example(annotation: Any) -> object:
    """A value of `annotation` as JSON builtins (for the answers' round trip)."""
    origin = typing.get_origin(annotation)
    if annotation is type(None) or annotation is None:
        return None
    if origin in (typing.Union, __import__("types").UnionType):
        return _example(typing.get_args(annotation)[0])
    if origin is list:
        return [_example(typing.get_args(annotation)[0])]
    if origin is tuple:
        return [_example(arg) for arg in typing.get_args(annotation)]
    if origin is dict:
        return {"key": _example(typing.get_args(annotation)[1])}
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        info = msgspec.inspect.type_info(annotation)
        assert isinstance(info, msgspec.inspect.StructType)
        values: object = {field.encode_name: _sample(field.type) for field in info.fields
                          if field.required}
        if info.array_like:
            values = [_sample(field.type) for field in info.fields]
        built = msgspec.convert(values, annotation)
        return msgspec.to_builtins(built)
    return {str: "x", int: 1, float: 1.5, bool: True, object: None}.get(annotation, "x")


def _sample(kind: msgspec.inspect.Type) -> object:
    if isinstance(kind, msgspec.inspect.StrType):
        return "x"
    if isinstance(kind, msgspec.inspect.BoolType):
        return True
    if isinstance(kind, msgspec.inspect.IntType):
        return 1
    if isinstance(kind, msgspec.inspect.EnumType):
        return next(iter(kind.cls)).value
    if isinstance(kind, msgspec.inspect.FloatType):
        return 1.5
    if isinstance(kind, msgspec.inspect.ListType):
        return []
    if isinstance(kind, msgspec.inspect.TupleType):
        return [_sample(item) for item in kind.item_types]
    if isinstance(kind, msgspec.inspect.UnionType):
        return _sample(kind.types[0])
    return None


@pytest.mark.parametrize("method", sorted(rpcdefs.registry()))
def test_answers_decode_as_their_type(method: str) -> None:
    call = rpcdefs.registry()[method]
    raw = msgspec.json.decode(msgspec.json.encode(_example(call.ANSWER)))
    decoded = msgspec.convert(raw, type=call.ANSWER)
    assert msgspec.json.decode(msgspec.json.encode(decoded)) == raw


def test_the_wire_form_leaves_out_what_is_none_and_decodes_back() -> None:
    """A call's arguments as the master sends them: no null field (a node older than the
    contract tells an instance's claim by its presence), and the node's decode gives the same
    call back."""
    call = instance_calls.InstanceShutdown(name="web1.example.com", timeout=30,
                                           claim=vmclaim.Claim("u1", "node1", 3, 1))
    wire = call.arguments()
    assert "claim" in wire and "instance" not in wire and "reason" not in wire
    assert wire["timeout"] == 30 and wire["name"] == "web1.example.com"
    assert rpc.decode("instance_shutdown", msgspec.json.decode(msgspec.json.encode(wire))) \
        == call
