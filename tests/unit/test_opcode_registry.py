"""Opcodes, logical units and RAPI routes agree: the opcode list is what opcodes.py defines,
each opcode has exactly one LU, and a RAPI route or a stated reason why not."""

from __future__ import annotations

from typing import cast

from herder.masterd import lu
from herder.masterd.jobs import opcodes
from herder.masterd.rapi import app as rapi_app
from herder.masterd.rapi import base as rapi_base
from herder.masterd.rapi import extensions as rapi_extensions
from herder.masterd.rapi import groups as rapi_groups
from herder.masterd.rapi import nodes as rapi_nodes


def test_all_opcodes_are_the_classes_defined_with_an_op_id() -> None:
    defined = {cls for cls in vars(opcodes).values()
               if isinstance(cls, type) and issubclass(cls, opcodes.OpCode)
               and cls is not opcodes.OpCode
               and opcodes.op_id_of(cls).startswith("OP_")}
    assert set(opcodes.ALL_OPCODES) == defined
    assert opcodes.OpInstanceStartup in opcodes.ALL_OPCODES  # below an intermediate base class
    assert len(opcodes.BY_ID) == len(opcodes.ALL_OPCODES)


def test_every_opcode_has_exactly_one_logical_unit() -> None:
    registry = lu.registry()
    assert set(registry) == set(opcodes.BY_ID)
    for op_id, unit in registry.items():
        assert unit.OP is opcodes.BY_ID[op_id], op_id


def test_an_lu_executes_the_opcode_of_its_base_class() -> None:
    """`OP` comes from the opcode in the LU's base class; a generic helper base (its opcode a
    type variable) executes none, and its concrete subclasses each their own."""
    from herder.masterd.lu import instance

    assert instance.InstanceStartup.OP is opcodes.OpInstanceStartup
    assert instance.InstanceMigrate.OP is opcodes.OpInstanceMigrate
    assert instance.InstanceFailover.OP is opcodes.OpInstanceFailover
    assert "OP" not in vars(instance._NodeAction) and "OP" not in vars(instance._InstanceMove)


def test_every_opcode_has_a_rapi_route_or_a_reason() -> None:
    routes = rapi_base.opcode_routes(rapi_app.make_app(cast(rapi_base.RapiContext, None)))
    assert set(routes) <= set(opcodes.BY_ID)
    assert set(rapi_app.NO_ROUTE) <= set(opcodes.BY_ID)
    both = set(routes) & set(rapi_app.NO_ROUTE)
    assert not both, f"routed, yet listed without a route: {both}"
    missing = set(opcodes.BY_ID) - set(routes) - set(rapi_app.NO_ROUTE)
    assert not missing, f"opcodes without a RAPI route or a reason: {sorted(missing)}"
    assert routes["OP_CLUSTER_REDIST_CONF"] == ["PUT /2/redistribute-config"]
    assert "PUT /2/instances/{name}/startup" in routes["OP_INSTANCE_STARTUP"]


def test_rapi_bodies_take_the_opcodes_fields() -> None:
    """The fields a route accepts come from its opcode: a field of the opcode is accepted
    (less the URL's object and the job's plumbing), and the maintenance settings map onto
    the cluster opcode's fields."""
    node_modify = set(opcodes.OpNodeSetParams.__struct_fields__) - {
        "node_name", "node_uuid", "debug_level"}
    assert {"priority", "depends", "comment"} <= node_modify  # as Ganeti's FillOpcode
    assert set(rapi_nodes.NODE_MODIFY_FIELDS) == node_modify
    assert set(rapi_extensions.MAINT_FIELDS.values()) <= \
        set(opcodes.OpClusterSetParams.__struct_fields__)
    group_add = set(opcodes.OpGroupAdd.__struct_fields__) - rapi_base._PLUMBING | {"name"}
    assert set(rapi_groups.GROUP_FIELDS) == group_add
