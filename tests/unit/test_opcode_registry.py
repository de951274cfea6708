"""Opcodes, logical units and RAPI routes agree: the opcode list is what opcodes.py defines,
each opcode has exactly one LU, and a RAPI route or a stated reason why not."""

from __future__ import annotations

from typing import cast

from herder.core.jobs import opcodes as O
from herder.masterd import lu, rapi


def test_all_opcodes_are_the_classes_defined_with_an_op_id() -> None:
    defined = {cls for cls in vars(O).values()
               if isinstance(cls, type) and issubclass(cls, O.OpCode) and cls is not O.OpCode
               and O.op_id_of(cls).startswith("OP_")}
    assert set(O.ALL_OPCODES) == defined
    assert O.OpInstanceStartup in O.ALL_OPCODES  # below an intermediate base class
    assert len(O.BY_ID) == len(O.ALL_OPCODES)


def test_every_opcode_has_exactly_one_logical_unit() -> None:
    registry = lu.registry()
    assert set(registry) == set(O.BY_ID)
    for op_id, unit in registry.items():
        assert unit.OP is O.BY_ID[op_id], op_id


def test_every_opcode_has_a_rapi_route_or_a_reason() -> None:
    routes = rapi.opcode_routes(rapi.make_app(cast(rapi.RapiContext, None)))
    assert set(routes) <= set(O.BY_ID)
    assert set(rapi.NO_ROUTE) <= set(O.BY_ID)
    both = set(routes) & set(rapi.NO_ROUTE)
    assert not both, f"routed, yet listed without a route: {both}"
    missing = set(O.BY_ID) - set(routes) - set(rapi.NO_ROUTE)
    assert not missing, f"opcodes without a RAPI route or a reason: {sorted(missing)}"
    assert routes["OP_CLUSTER_REDIST_CONF"] == ["PUT /2/redistribute-config"]
    assert "PUT /2/instances/{name}/startup" in routes["OP_INSTANCE_STARTUP"]


def test_rapi_bodies_take_the_opcodes_fields() -> None:
    """The fields a route accepts come from its opcode: a field of the opcode is accepted
    (less the URL's object and the job's plumbing), and the maintenance settings map onto
    the cluster opcode's fields."""
    node_modify = set(O.OpNodeSetParams.__struct_fields__) - {
        "node_name", "node_uuid", "debug_level", "priority", "depends", "comment"}
    assert set(rapi.NODE_MODIFY_FIELDS) == node_modify
    assert set(rapi.MAINT_FIELDS.values()) <= set(O.OpClusterSetParams.__struct_fields__)
    group_add = set(O.OpGroupAdd.__struct_fields__) - rapi._PLUMBING | {"name"}
    assert set(rapi.GROUP_FIELDS) == group_add
