"""Mixed builds (docs/architecture.md "Mixed builds"): in a rolling upgrade the nodes run a
newer build than the master, going back an older one. What a newer peer answers an older
reader decodes (fields the reader does not know are ignored); what comes in at the edge
(opcodes, the signed RPC envelope, a call's claim) stays strict: an unknown field is refused
with its name."""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest

from herder.core import livefigures, model, rpcauth, rpcdefs
from herder.core.errors import SignatureError
from herder.core.noderpc import RpcTransport
from herder.core.rpcdefs import instance_calls, node_calls
from herder.masterd.jobs import opcodes
from herder.noded import rpc

# A node_info answer of a build newer than this master: a field at each level this build does
# not declare (the answer, a storage unit, an instance's run state, the KVM verdict).
NEWER_NODE_INFO: dict[str, Any] = {
    "bootid": "b1", "memory_total": 4096, "memory_free": 3000, "memory_dom0": 512,
    "cpu_total": 4, "cpu_dom0": 4, "cpu_nodes": 1, "cpu_sockets": 1,
    "storage": [{"type": "file", "name": "/srv/herder/file-storage", "storage_size": 9000,
                 "storage_free": 7000, "storage_reserved": 100}],
    "instances": {"web1": {"state": "running", "memory": 128, "vcpus": 1, "uptime": 12.5,
                           "numa_node": 0}},
    "kvm": {"usable": False, "reason": "no /dev/kvm", "seconds": 0.1, "probed_at": 1.0},
    "herder_version": "9.9.9", "a_field_of_a_later_build": {"nested": [1, 2]},
}


class NewerNode(RpcTransport):
    """A transport whose node answers as a newer build does: `answers` by method."""

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers

    def send(self, node: model.Node, method: str, args: dict[str, Any],
             timeout: float | None = None) -> object:
        return self.answers[method]


def _node() -> model.Node:
    return model.Node(name="node2.example.com", uuid="n2", primary_ip="192.0.2.2",
                      secondary_ip="192.0.2.2", group="g1")


def _structs(kind: object, found: set[type[msgspec.Struct]]) -> set[type[msgspec.Struct]]:
    """Every Struct type reachable from an answer type (fields, list items, unions)."""
    for arg in typing.get_args(kind):
        _structs(arg, found)
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct) and kind not in found:
        found.add(kind)
        for hint in typing.get_type_hints(kind).values():
            _structs(hint, found)
    return found


# --- a newer peer's answer, an older reader --------------------------------------------------

def test_an_older_master_reads_a_newer_nodes_node_info() -> None:
    transport = NewerNode({"node_info": NEWER_NODE_INFO})
    info = transport.call(_node(), node_calls.NodeInfo(instances=True))
    assert isinstance(info, livefigures.NodeInfo)
    assert (info.bootid, info.memory_free, info.herder_version) == ("b1", 3000, "9.9.9")
    assert info.storage[0] == livefigures.StorageUnit("file", "/srv/herder/file-storage",
                                                      9000, 7000)
    assert info.instances is not None and info.instances["web1"].uptime == 12.5
    assert info.kvm is not None and info.kvm.reason == "no /dev/kvm"
    # masterd's live cache decodes it the same way
    assert livefigures.decode_node_info(NEWER_NODE_INFO) == info


def test_a_newer_answer_still_needs_what_the_master_reads() -> None:
    """Ignoring unknown fields is not accepting anything: a field the master needs, missing or
    of the wrong type, is still a malformed answer (as before)."""
    without = {k: v for k, v in NEWER_NODE_INFO.items() if k != "memory_free"}
    with pytest.raises(ValueError, match="malformed node_info answer.*memory_free"):
        livefigures.decode_node_info(without)
    with pytest.raises(ValueError, match="malformed node_info answer"):
        livefigures.decode_node_info({**NEWER_NODE_INFO, "cpu_total": "four"})


def test_no_answer_type_refuses_fields_it_does_not_know() -> None:
    """The rule for every call of the contract: its answer (and each Struct in it) ignores
    unknown fields, so no later build's answer field makes an older master refuse it."""
    strict = sorted(f"{method}: {struct.__qualname__}"
                    for method, call in rpcdefs.registry().items()
                    for struct in _structs(call.ANSWER, set())
                    if struct.__struct_config__.forbid_unknown_fields)
    assert strict == []


# --- requests: what an older node takes, what the edge refuses -------------------------------

def test_a_newer_masters_unknown_argument_is_ignored_by_an_older_node() -> None:
    """Going back (`cluster upgrade --to` the older build) the nodes are older than the master:
    a top-level argument they do not know is left out of the call, as the contract says."""
    call = rpc.decode("instance_console_log", {"instance": "web1.example.com", "lines": 5,
                                               "follow_from_offset": 10})
    assert call == instance_calls.InstanceConsoleLog(instance="web1.example.com", lines=5)


def test_a_claim_with_an_unknown_field_is_refused() -> None:
    """A call's claim says which node may run an instance (never two copies): a node refuses
    one it cannot read whole rather than act on part of it."""
    claim = {"uuid": "u1", "primary": "node1.example.com", "serial": 3, "epoch": 1,
             "lease": 5}
    with pytest.raises(rpc.BadArguments, match="lease"):
        rpc.decode("instance_shutdown", {"name": "web1.example.com", "timeout": 30,
                                         "claim": claim})


def test_an_opcode_with_an_unknown_field_is_refused() -> None:
    op = {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["a"]}
    assert opcodes.parse(op)
    with pytest.raises(opcodes.OpcodeError, match="unknown field `colour`"):
        opcodes.parse({**op, "colour": 1})


def test_a_signed_call_with_an_unknown_field_is_refused() -> None:
    key = b"k" * 32
    good = rpcauth.sign_call(key, "node_info", "node2", {}, now=1000.0, nonce="n1")
    assert rpcauth.check_call(key, good, method="node_info", node="node2", replay=None,
                              now=1000.0) == {}
    outer = msgspec.json.decode(good)
    inner = msgspec.json.decode(outer["msg"])
    msg = msgspec.json.encode({**inner, "priority": 1}).decode()
    forged = msgspec.json.encode({"msg": msg, "salt": "n1",
                                  "hmac": rpcauth._mac(key, "n1", msg)})
    with pytest.raises(SignatureError, match="malformed signed call.*priority"):
        rpcauth.check_call(key, forged, method="node_info", node="node2", replay=None,
                           now=1000.0)
