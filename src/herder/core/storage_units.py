"""Which storage unit names a storage query may name (issue 18: a node must not walk any
directory it is asked about).

A query names a unit of the node's configured storage: for `file`, one of the cluster's file
storage directories exactly (the size of a directory is the size of everything under it: any
other path would let a caller probe the node's filesystem); for `lvm-vg`, a volume group the
cluster uses (when the caller knows them: the master does, a node checks the name's syntax
only); for `lvm-pv`, a device path. LVM names never start with "-" (no option reaches an LVM
command through a name). Pure: masterd (the RAPI route and the LU) and noded check with it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection

from herder.core import model

_LVM_NAME = re.compile(r"[A-Za-z0-9+_.][A-Za-z0-9+_.-]*")
_DEVICE = re.compile(r"/dev/[A-Za-z0-9+_.:/-]+")


def unit_name_problem(kind: str, name: str, file_dirs: Collection[str],
                      volume_groups: Collection[str] | None = None) -> str | None:
    """Why `name` may not be queried as a unit of type `kind` (None: it may)."""
    if kind == "file":
        configured = sorted({d for d in file_dirs if d})
        if name not in configured:
            where = ", ".join(configured) or "none configured"
            return f"{name!r} is not one of the node's file storage directories ({where})"
        return None
    if kind == "lvm-vg":
        if not _LVM_NAME.fullmatch(name) or name in (".", ".."):
            return f"{name!r} is not a volume group name"
        if volume_groups is not None and name not in volume_groups:
            where = ", ".join(sorted(volume_groups)) or "none configured"
            return f"volume group {name!r} is not one the cluster uses ({where})"
        return None
    if kind == "lvm-pv":
        if not _DEVICE.fullmatch(name) or ".." in name.split("/") \
                or os.path.normpath(name) != name:
            return f"{name!r} is not a physical volume's device path (/dev/...)"
        return None
    return None  # an unknown type is refused by whoever lists it


def cluster_volume_groups(config: model.ConfigData) -> set[str]:
    """The volume groups the cluster uses: its own and the DRBD metadata ones."""
    found = {config.cluster.volume_group_name} if config.cluster.volume_group_name else set()
    for group in [None, *config.nodegroups.values()]:
        metavg = config.filled_diskparams("drbd", group).get("metavg")
        if metavg:
            found.add(str(metavg))
    return found


def query_problem(config: model.ConfigData, kind: str, name: str) -> str | None:
    """Why a storage query of the cluster's nodes may not name `name` (None: it may)."""
    c = config.cluster
    return unit_name_problem(kind, name, [c.file_storage_dir, c.shared_file_storage_dir],
                             cluster_volume_groups(config))
