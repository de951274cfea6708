"""The node's storage units (design-2.1): list them, repair a volume group, change a physical
volume (`herder.noded.storage`)."""

from __future__ import annotations

from herder.core import storage_units
from herder.core.errors import HerderError
from herder.core.rpcdefs import storage_calls
from herder.noded import storage
from herder.noded.node import Node, RpcFailure


def storage_list(node: Node, call: storage_calls.StorageList) -> list[storage_calls.StorageRow]:
    """Storage units of a type (design-2.1): lvm-pv, lvm-vg, or file directories."""
    dirs = [d for d in call.dirs if d]
    if call.name is not None:
        problem = storage_units.unit_name_problem(call.type, call.name, dirs)
        if problem:
            raise RpcFailure(f"storage {call.type}: {problem}")
    try:
        unit_type = storage.get_storage(call.type, dirs) if call.type == "file" \
            else storage.get_storage(call.type)
        return unit_type.list_units(call.name)
    except HerderError as err:
        raise RpcFailure(f"storage {call.type}: {err}") from None


def storage_repair(node: Node, call: storage_calls.StorageRepair
                   ) -> storage_calls.VgRepairAnswer:
    try:
        result = storage.repair_vg(call.name, remove_partial_lvs=True)
    except HerderError as err:
        raise RpcFailure(f"repair of volume group {call.name}: {err}") from None
    return storage_calls.VgRepairAnswer(vg=result.vg, forced=result.forced,
                                        removed_lvs=list(result.removed_lvs),
                                        missing_pvs=list(result.missing_pvs),
                                        output=result.output)


def storage_modify(node: Node, call: storage_calls.StorageModify) -> None:
    if call.type != "lvm-pv" or call.allocatable is None:
        raise RpcFailure("only lvm-pv units can be modified (allocatable)")
    try:
        storage.set_pv_allocatable(call.name, call.allocatable)
    except HerderError as err:
        raise RpcFailure(f"storage lvm-pv {call.name}: {err}") from None
