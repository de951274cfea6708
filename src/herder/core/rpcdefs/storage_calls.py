"""The node's storage units (design-2.1's storage framework): list them, repair a volume group,
change a physical volume (Ganeti's storage_list, storage_execute, storage_modify)."""

from __future__ import annotations

from typing import Literal

import msgspec

from herder.core.rpcdefs.base import Call, unit_name

StorageRow = dict[str, str | int | float | bool | None]  # field -> value (Ganeti's SF_*)


class StorageList(Call[list[StorageRow]], kw_only=True):
    """Storage units of a type: lvm-pv, lvm-vg, or the file directories `dirs`."""

    METHOD = "storage_list"
    READ_ONLY = True
    TIMEOUT = 60.0
    type: Literal["lvm-pv", "lvm-vg", "file"] = "lvm-vg"
    dirs: list[str] = msgspec.field(default_factory=list)
    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None:
            unit_name(self.name)


class VgRepairAnswer(msgspec.Struct, kw_only=True):
    vg: str
    forced: bool  # `--force` was used: the partial LVs listed were removed
    removed_lvs: list[str]
    missing_pvs: list[str]
    output: str


class StorageRepair(Call[VgRepairAnswer], kw_only=True):
    """Drop a volume group's missing PVs (`vgreduce --removemissing`)."""

    METHOD = "storage_repair"
    TIMEOUT = 600.0
    name: str
    type: Literal["lvm-vg"] = "lvm-vg"

    def __post_init__(self) -> None:
        unit_name(self.name)


class StorageModify(Call[None], kw_only=True):
    """A physical volume's `allocatable` flag."""

    METHOD = "storage_modify"
    name: str
    type: str
    allocatable: bool | None = None

    def __post_init__(self) -> None:
        unit_name(self.name)
