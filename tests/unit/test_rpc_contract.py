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
    if isinstance(kind, msgspec.inspect.LiteralType):
        return kind.values[0]
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


# What masters before the contract sent (their hand-built dicts, as masterd/lu built them): a
# node with the contract takes them, so a cluster upgraded node by node keeps working.
_DRBD_DISK = {"dev_type": "drbd", "logical_id": ["n1", "n2", 11000, 0, 0, "secret0"],
              "children": [{"dev_type": "plain", "logical_id": ["xenvg", "d0_data"],
                            "children": [], "size": 1024, "params": {"stripes": 1},
                            "iv_name": None, "name": None, "uuid": "c1", "mode": "rw",
                            "spindles": None, "dynamic_params": {}}],
              "size": 1024, "params": {"protocol": "C"}, "iv_name": "disk/0", "name": None,
              "uuid": "d1", "mode": "rw", "spindles": None,
              "dynamic_params": {"local-ip": "192.0.2.1", "remote-ip": "192.0.2.2",
                                 "local-minor": 0, "remote-minor": 0}}
_PAYLOAD = {"name": "web1.example.com", "uuid": "u1", "memory": 512, "vcpus": 1,
            "hypervisor": "kvm", "os": "debootstrap+default", "disks": [_DRBD_DISK],
            "nics": [{"mac": "aa:00:00:00:00:01", "ip": None, "uuid": "n1", "name": None,
                      "mode": "bridged", "link": "br0", "vlan": ""}],
            "tags": [], "hvparams": {}, "beparams": {"maxmem": 512}, "osparams": {},
            "uid_pool": [], "network_port": None}
_CLAIM = {"uuid": "u1", "primary": "node1.example.com", "serial": 3, "epoch": 1}
_MOVE = {"source": "node1.example.com", "target": "node2.example.com"}
_REASON = [["gnt:client:herder", "", 1767225600000000000]]


@pytest.mark.parametrize(("method", "args"), [
    ("instance_start", {"reason": _REASON, "version": 3, "instance": _PAYLOAD,
                        "name": "web1.example.com", "claim": _CLAIM}),
    ("instance_define", {"name": "web1.example.com", "reason": _REASON, "version": 3,
                         "claim": _CLAIM, "move": _MOVE, "instance": _PAYLOAD}),
    ("instance_shutdown", {"name": "web1.example.com", "reason": _REASON, "version": 3,
                           "claim": _CLAIM, "timeout": 120, "instance": _PAYLOAD}),
    ("instance_remove", {"name": "web1.example.com"}),
    ("migrate_instance", {"name": "web1.example.com", "reason": _REASON, "version": 3,
                          "claim": _CLAIM, "move": _MOVE, "instance": _PAYLOAD,
                          "target": "node2.example.com", "live": True}),
    ("finalize_migration_src", {"name": "web1.example.com", "reason": _REASON, "version": 3,
                                "claim": _CLAIM, "move": _MOVE, "instance": _PAYLOAD,
                                "live": True, "success": False}),
    ("accept_instance", {"name": "web1.example.com", "reason": _REASON, "version": 3,
                         "claim": _CLAIM, "move": _MOVE, "instance": _PAYLOAD,
                         "info": {"xml": "<domain/>", "state": "running",
                                  "node": "node1.example.com"}}),
    ("blockdev_create", {"disk": _DRBD_DISK, "size": 1024, "owner": "web1.example.com",
                         "on_primary": True, "info": "originstname+web1.example.com",
                         "excl_stor": False}),
    ("blockdev_assemble", {"disk": _DRBD_DISK, "instance": "web1.example.com",
                           "as_primary": False, "idx": 0}),
    ("blockdev_rename", {"devlist": [[_DRBD_DISK["children"][0], ["xenvg", "d0_data.new"]]]}),
    ("drbd_attach_net", {"disks": [_DRBD_DISK], "instance": "web1.example.com",
                         "multimaster": True}),
    ("node_info", {"instances": True, "storage_units": [["lvm-vg", "xenvg"]]}),
    ("write_config", {"serial": 5, "config": "{}", "queue": {"files": {}, "names": []}}),
    ("node_deactivate_master_ip", {"ip": "192.0.2.254", "netmask": 32, "netdev": "eth0",
                                   "ip_family": 4}),
    ("renew_crypto", {"stage": "retire"}),
])
def test_a_node_takes_what_masters_before_the_contract_sent(method: str,
                                                            args: dict[str, object]) -> None:
    call = rpc.decode(method, args)
    assert method == call.METHOD
    # and what this master sends for that call is what it decoded (extra old keys aside)
    assert rpc.decode(method, call.arguments()) == call


def test_a_migration_status_wait_is_bounded_and_lengthens_the_calls_timeout() -> None:
    from herder.core.rpcdefs import migration_calls

    call = migration_calls.InstanceGetMigrationStatus(name="vm1.example.com", wait=2.0)
    assert call.rpc_timeout() == migration_calls.InstanceGetMigrationStatus.TIMEOUT + 2.0
    assert call.arguments()["wait"] == 2.0
    # a master that does not wait sends no `wait`: a node answers at once, as before
    assert "wait" not in migration_calls.InstanceGetMigrationStatus(
        name="vm1.example.com").arguments()
    for wrong in (-1.0, migration_calls.MAX_STATUS_WAIT + 1):
        with pytest.raises(ValueError, match="wait must be 0 to"):
            migration_calls.InstanceGetMigrationStatus(name="vm1.example.com", wait=wrong)
    with pytest.raises(msgspec.ValidationError, match="wait"):
        msgspec.convert({"name": "vm1.example.com", "wait": 3600},
                        migration_calls.InstanceGetMigrationStatus)
