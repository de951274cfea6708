"""An instance's disks on its nodes, at the points Ganeti's cmdlib handles them, with its node
RPCs in its order (cmdlib/instance_storage.py: CreateDisks, _UndoCreateDisks,
AssembleInstanceDisks, ShutdownInstanceDisks; instance_utils.RemoveDisks;
cmdlib/instance_migration.py: the DRBD steps around a live migration and a failover).

This module is the seam between the VM operations (start, failover, migration, in
`lu/instance.py`) and the block-device layer on the nodes (`noded/bdev`, reached through the
`blockdev_*`, `drbd_*` and `file_storage_dir_*` node RPCs): the VM side calls these functions
where Ganeti's cmdlib does; which node RPCs they make, and in which order, is this module's
business. Every disk goes to a node as Ganeti's disk object for that node
(`core.diskobjects`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from herder.core import diskobjects, model, params
from herder.core.errors import HerderError, OpExecError, OpPrereqError, RpcError

Feedback = Callable[[str], None]
# Ganeti's DTS_INT_MIRROR / DTS_EXT_MIRROR: a mirrored disk fails over to its secondary; a
# shared or external one to any node that reaches the storage; the rest stays where it is.
INT_MIRROR = params.DTS_INT_MIRROR
EXT_MIRROR = params.DTS_EXT_MIRROR
LOCAL_TEMPLATES = frozenset({"plain", "file"})


def _quiet(message: str) -> None:
    return None


def info_text(inst: model.Instance) -> str:
    """What a node records on a device about its owner (Ganeti's GetInstanceInfoText)."""
    return f"originstname+{inst.name}"


def disk_nodes(inst: model.Instance, disk: model.Disk) -> list[str]:
    """The nodes (UUIDs) a disk's top device lives on, the primary first (Ganeti's
    ComputeNodeTree for the disk trees herder makes)."""
    lid = disk.logical_id
    if isinstance(lid, model.DrbdId):
        return [inst.primary_node] + [n for n in lid.nodes if n != inst.primary_node]
    return [inst.primary_node]


def node_call(env: Any, node: model.Node, method: str, args: dict[str, Any],
              timeout: float | None = None) -> Any:
    """A node RPC, but none to a node marked offline: Ganeti's RPC layer answers for it
    ("node is marked offline") and the callers treat that as they treat an offline node."""
    if node.offline:
        raise RpcError(f"node {node.name}: {method} not sent: the node is marked offline")
    return env.rpc.call(node, method, args, timeout=timeout)


def _node(config: model.ConfigData, node_uuid: str) -> model.Node:
    node = config.nodes.get(node_uuid)
    if node is None:
        raise OpExecError(f"unknown node {node_uuid}")
    return node


# --- create and remove ---------------------------------------------------------------------------


def create_tree(env: Any, node: model.Node, inst: model.Instance, obj: dict[str, Any],
                 force_create: bool, force_open: bool,
                 created: list[tuple[model.Node, dict[str, Any]]]) -> None:
    """Ganeti's _CreateBlockDevInner: the children first; a device is made where it must be
    (`force_create`, or a type made on secondaries too: drbd, plain)."""
    if obj["dev_type"] in ("drbd", "plain"):
        force_create = True
    made_children: list[tuple[model.Node, dict[str, Any]]] = []
    try:
        for child in obj["children"]:
            create_tree(env, node, inst, child, force_create, force_open, made_children)
        if not force_create:
            created.extend(made_children)
            return
        env.rpc.call(node, "blockdev_create", {
            "disk": obj, "size": obj["size"], "owner": inst.name, "on_primary": force_open,
            "info": info_text(inst), "excl_stor": False})
    except HerderError:
        created.extend(made_children)
        raise
    created.append((node, obj))  # complete: removing it removes its children


def create_disks(env: Any, config: model.ConfigData, inst: model.Instance, *,
                 disks: list[model.Disk] | None = None, target: model.Node | None = None,
                 feedback: Feedback = _quiet) -> list[tuple[model.Node, dict[str, Any]]]:
    """Make the instance's disks on its nodes (Ganeti's CreateDisks): the file-storage
    directory on the primary, then per disk the primary first, then its other nodes; with
    `target` (a move) on that node alone, as its primary. On a failure what this call made is
    removed again and OpExecError raised. Returns what was made, for `undo_create_disks`."""
    if target is not None:  # a view, never stored
        inst = msgspec.structs.replace(inst, primary_node=target.uuid)
    disks = inst.disks if disks is None else disks
    primary = _node(config, inst.primary_node)
    created: list[tuple[model.Node, dict[str, Any]]] = []
    directory = next((d for d in map(diskobjects.file_storage_dir, disks) if d), None)
    if directory is not None:
        try:
            env.rpc.call(primary, "file_storage_dir_create", {"file_storage_dir": directory})
        except HerderError as err:
            raise OpExecError(f"Failed to create directory '{directory}' on node "
                              f"{primary.name}: {err}") from None
    for disk in disks:
        for node_uuid in disk_nodes(inst, disk):
            node = _node(config, node_uuid)
            obj = diskobjects.disk_object(config, inst, disk, node_uuid)
            is_primary = node_uuid == inst.primary_node
            try:
                create_tree(env, node, inst, obj, is_primary, is_primary, created)
            except HerderError as err:
                feedback(f"creating {disk.iv_name} of {inst.name} on {node.name} failed; "
                         "removing what was made")
                undo_create_disks(env, inst, created, feedback=feedback)
                if directory is not None:
                    _remove_dir(env, primary, directory, feedback)
                raise OpExecError(f"creating {disk.iv_name} of {inst.name} on {node.name} "
                                  f"failed: {err}") from None
    return created


def create_and_sync(env: Any, config: model.ConfigData, inst: model.Instance, *,
                    wait: bool, feedback: Feedback = _quiet) -> None:
    """A new instance's disks (Ganeti's LUInstanceCreate: CreateDisks, then
    _RemoveDegradedDisks): made, then the mirrors awaited (`wait`) or, for DRBD, checked
    once; degraded disks are removed again and OpExecError raised. Adopted devices
    (`blockdev`) are assembled, not made (compat B11)."""
    if inst.disk_template == "blockdev":
        assemble_disks(env, config, inst, feedback=feedback)
    else:
        create_disks(env, config, inst, feedback=feedback)
    if wait:
        healthy = wait_for_sync(env, config, inst, feedback=feedback)
    elif inst.disk_template in INT_MIRROR:
        feedback("* checking mirrors status")
        healthy = wait_for_sync(env, config, inst, oneshot=True, feedback=feedback)
    else:
        healthy = True
    if not healthy:
        remove_disks(env, config, inst, feedback=feedback)
        raise OpExecError("There are some degraded disks for this instance")


def undo_create_disks(env: Any, inst: model.Instance,
                      created: list[tuple[model.Node, dict[str, Any]]], *,
                      feedback: Feedback = _quiet) -> None:
    """Remove what `create_disks` made (Ganeti's _UndoCreateDisks); failures are reported."""
    for node, obj in created:
        try:
            env.rpc.call(node, "blockdev_remove", {"disk": obj})
        except HerderError as err:
            feedback(f"failed to remove newly-created disk {obj.get('iv_name') or obj['uuid']}"
                     f" on node {node.name}: {err}")


def _remove_dir(env: Any, node: model.Node, directory: str, feedback: Feedback) -> bool:
    try:
        env.rpc.call(node, "file_storage_dir_remove", {"file_storage_dir": directory})
    except HerderError as err:
        feedback(f"could not remove directory '{directory}' on node {node.name}: {err}")
        return False
    return True


def remove_disks(env: Any, config: model.ConfigData, inst: model.Instance, *,
                 disks: list[model.Disk] | None = None, target: model.Node | None = None,
                 feedback: Feedback = _quiet) -> bool:
    """Remove the instance's disks from every node they live on, then the file-storage
    directory of the primary (or `target`) (Ganeti's RemoveDisks). Continues past failures;
    False when something could not be removed (an offline secondary does not count)."""
    disks = inst.disks if disks is None else disks
    all_removed = True
    for disk in disks:
        node_uuids = [target.uuid] if target is not None else disk_nodes(inst, disk)
        for node_uuid in node_uuids:
            node = _node(config, node_uuid)
            obj = diskobjects.disk_object(config, inst, disk, node_uuid)
            try:
                node_call(env, node, "blockdev_remove", {"disk": obj})
            except HerderError as err:
                feedback(f"could not remove disk {disk.iv_name} on node {node.name}, "
                         f"continuing anyway: {err}")
                if not (node.offline and node_uuid != inst.primary_node):
                    all_removed = False
    where = target or _node(config, inst.primary_node)
    kept = {diskobjects.file_storage_dir(d) for d in inst.disks if d not in disks}
    for directory in dict.fromkeys(map(diskobjects.file_storage_dir, disks)):
        if directory is not None and directory not in kept:
            all_removed = _remove_dir(env, where, directory, feedback) and all_removed
    return all_removed


# --- assemble and shut down ----------------------------------------------------------------


def _selected(inst: model.Instance,
              disks: list[model.Disk] | None) -> list[tuple[int, model.Disk]]:
    """(index in the instance, disk) of `disks` (default: all the instance's disks)."""
    wanted = None if disks is None else {d.uuid for d in disks}
    return [(index, disk) for index, disk in enumerate(inst.disks)
            if wanted is None or disk.uuid in wanted]


def assemble_disks(env: Any, config: model.ConfigData, inst: model.Instance, *,
                   primary: model.Node | None = None, ignore_secondaries: bool = False,
                   disks: list[model.Disk] | None = None,
                   feedback: Feedback = _quiet) -> list[tuple[str, str, str]]:
    """Make the instance's disks (or `disks` of them) available (Ganeti's
    AssembleInstanceDisks): first on every node of each disk as a secondary, then on
    `primary` (default: its primary node) as the primary. Returns (node name, iv_name,
    device path) per disk, as `gnt-instance activate-disks` prints them. When a disk cannot
    be assembled, what was assembled is shut down again and OpExecError raised (Ganeti's
    StartInstanceDisks)."""
    primary = primary or _node(config, inst.primary_node)
    if primary.uuid != inst.primary_node:  # a view, never stored: the disks' new primary
        inst = msgspec.structs.replace(inst, primary_node=primary.uuid)
    problems: list[str] = []
    for index, disk in _selected(inst, disks):
        for node_uuid in disk_nodes(inst, disk):
            node = _node(config, node_uuid)
            try:
                node_call(env, node, "blockdev_assemble", {
                    "disk": diskobjects.disk_object(config, inst, disk, node_uuid),
                    "instance": inst.name, "as_primary": False, "idx": index})
            except HerderError as err:
                feedback(f"could not prepare block device {disk.iv_name} on node {node.name}"
                         f" (is_primary=False, pass=1): {err}")
                offline_secondary = node_uuid != inst.primary_node and node.offline
                if not (ignore_secondaries or offline_secondary):
                    problems.append(f"{disk.iv_name} on {node.name}: {err}")
    assembled = []
    for index, disk in _selected(inst, disks):
        path = ""
        try:
            answer = node_call(env, primary, "blockdev_assemble", {
                "disk": diskobjects.disk_object(config, inst, disk, primary.uuid),
                "instance": inst.name, "as_primary": True, "idx": index})
            path = str(answer[0]) if isinstance(answer, list) and answer[0] else ""
        except HerderError as err:
            feedback(f"could not prepare block device {disk.iv_name} on node {primary.name}"
                     f" (is_primary=True, pass=2): {err}")
            problems.append(f"{disk.iv_name} on {primary.name}: {err}")
        assembled.append((primary.name, disk.iv_name, path))
    if problems:
        shutdown_disks(env, config, inst, ignore_primary=True, disks=disks, feedback=feedback)
        raise OpExecError(f"cannot activate the block devices of {inst.name}: "
                          + "; ".join(problems))
    return assembled


def shutdown_disks(env: Any, config: model.ConfigData, inst: model.Instance, *,
                   nodes: list[model.Node] | None = None, ignore_primary: bool = False,
                   disks: list[model.Disk] | None = None,
                   feedback: Feedback = _quiet) -> bool:
    """Release the instance's disks (or `disks` of them) on `nodes` (default: all its
    nodes), e.g. the old primary after a failover (Ganeti's ShutdownInstanceDisks).
    `ignore_primary`: errors of the primary (a dead node in a failover) are not fatal. False
    when a disk could not be shut down where it counts."""
    wanted = None if nodes is None else {n.uuid for n in nodes}
    all_done = True
    for _index, disk in _selected(inst, disks):
        for node_uuid in disk_nodes(inst, disk):
            if wanted is not None and node_uuid not in wanted:
                continue
            node = _node(config, node_uuid)
            try:
                node_call(env, node, "blockdev_shutdown", {
                    "disk": diskobjects.disk_object(config, inst, disk, node_uuid)})
            except HerderError as err:
                feedback(f"could not shutdown block device {disk.iv_name} on node "
                         f"{node.name}: {err}")
                unreachable = isinstance(err, RpcError) and node.offline
                if (node_uuid == inst.primary_node and not ignore_primary) or \
                        (node_uuid != inst.primary_node and not unreachable):
                    all_done = False
    return all_done


# --- status ------------------------------------------------------------------------------------

STATUS_FIELDS = ("dev_path", "major", "minor", "sync_percent", "estimated_time",
                 "is_degraded", "ldisk_status")
STATUS_TIMEOUT = 10.0
LDS_OKAY = 1  # Ganeti's constants.LDS_OKAY: the local disk is in order


def disk_status(env: Any, config: model.ConfigData, inst: model.Instance,
                disk: model.Disk) -> dict[str, Any]:
    """Ganeti's instance query data per disk: `pstatus` (the primary's) and `sstatus` (the
    DRBD secondary's) BlockDevStatus from `blockdev_find` — device path, numbers, sync
    percent, estimated time, degraded, local-disk status — None where the disk is not
    assembled or the node did not answer (`*_error` then says why)."""
    found: dict[str, Any] = {"pstatus": None, "sstatus": None}
    for key, node_uuid in zip(("pstatus", "sstatus"), disk_nodes(inst, disk), strict=False):
        node = config.nodes.get(node_uuid)
        if node is None or node.offline:
            continue
        try:
            status = env.rpc.call(node, "blockdev_find", {
                "disk": diskobjects.disk_object(config, inst, disk, node_uuid)},
                timeout=STATUS_TIMEOUT)
        except HerderError as err:
            found[f"{key}_error"] = str(err)
            continue
        if isinstance(status, list) and len(status) == len(STATUS_FIELDS):
            found[key] = dict(zip(STATUS_FIELDS, status, strict=True))
    return found


# --- the migration's and failover's disk steps --------------------------------------------------


def prepare_live_migration(env: Any, config: model.ConfigData, inst: model.Instance,
                           source: model.Node, target: model.Node) -> None:
    """Before libvirt migrates the domain: the disks usable on both nodes at once (shared and
    external storage: attached on the target, compat B45; DRBD as Ganeti's _ExecMigration:
    checked consistent on the target, the target made secondary, both disconnected,
    reconnected dual-primary, in sync, opened shared on both)."""
    if inst.disk_template in INT_MIRROR:
        for index, disk in enumerate(inst.disks):
            if not check_disk_consistency(env, config, inst, disk, target, False):
                raise OpExecError(f"Disk {index} is degraded or not fully synchronized on "
                                  "target node, aborting migration")
        _drbd_dual_primary(env, config, inst, source, target)
        for node in (source, target):  # both sides primary while the memory moves
            env.rpc.call(node, "blockdev_open", {"instance": inst.name, "exclusive": False,
                                                 "disks": _drbd_objects(config, inst, node)})
        return
    for index, disk in enumerate(inst.disks):
        env.rpc.call(target, "blockdev_assemble", {
            "disk": diskobjects.disk_object(config, inst, disk, target.uuid),
            "instance": inst.name, "as_primary": True, "idx": index})


def _drbd_objects(config: model.ConfigData, inst: model.Instance,
                  node: model.Node) -> list[dict[str, Any]]:
    return diskobjects.disk_objects(config, inst, node.uuid)


def _drbd_dual_primary(env: Any, config: model.ConfigData, inst: model.Instance,
                       source: model.Node, target: model.Node) -> None:
    """Ganeti's TLMigrateInstance._ExecMigration before the migration: the target's disks
    closed (secondary), both sides standalone, reconnected as multi-master, in sync."""
    env.rpc.call(target, "blockdev_close", {"instance": inst.name,
                                            "disks": _drbd_objects(config, inst, target)})
    for node in (source, target):
        env.rpc.call(node, "drbd_disconnect_net", {"disks": _drbd_objects(config, inst, node)})
    for node in (source, target):
        env.rpc.call(node, "drbd_attach_net", {"disks": _drbd_objects(config, inst, node),
                                               "instance": inst.name, "multimaster": True})
    wait_drbd_sync(env, config, inst, (source, target))


def wait_drbd_sync(env: Any, config: model.ConfigData, inst: model.Instance,
                   nodes: tuple[model.Node, ...]) -> None:
    """Ask each node until every DRBD disk of the instance is in sync (10 minutes at most)."""
    import time

    deadline = time.monotonic() + 600
    while True:
        done = True
        for node in nodes:
            answer = env.rpc.call(node, "drbd_wait_sync",
                                  {"disks": _drbd_objects(config, inst, node)})
            done = done and bool(answer[0])
        if done:
            return
        if time.monotonic() > deadline:
            raise OpExecError(f"the disks of {inst.name} did not resynchronise in time")
        time.sleep(2)


def finish_live_migration(env: Any, config: model.ConfigData, inst: model.Instance,
                          source: model.Node, target: model.Node, *, migrated: bool) -> None:
    """After the migration (`migrated`) or its failure/cleanup: back to single primary on the
    node that runs the domain (target when migrated, else source); the other node's disks
    released (shared storage) or made secondary (DRBD; after a migration the resync awaited
    first, as Ganeti's)."""
    runs, other = (target, source) if migrated else (source, target)
    if inst.disk_template in INT_MIRROR:
        env.rpc.call(other, "blockdev_close", {"instance": inst.name,
                                               "disks": _drbd_objects(config, inst, other)})
        if migrated:
            wait_drbd_sync(env, config, inst, (source, target))
        for node in (source, target):
            env.rpc.call(node, "drbd_disconnect_net",
                         {"disks": _drbd_objects(config, inst, node)})
        for node in (source, target):
            env.rpc.call(node, "drbd_attach_net", {"disks": _drbd_objects(config, inst, node),
                                                   "instance": inst.name,
                                                   "multimaster": False})
        wait_drbd_sync(env, config, inst, (source, target))
        return
    for disk in inst.disks:
        try:
            env.rpc.call(other, "blockdev_shutdown", {
                "disk": diskobjects.disk_object(config, inst, disk, other.uuid)})
        except HerderError:
            if other is runs:
                raise


def check_failover_target(config: model.ConfigData, inst: model.Instance,
                          target: model.Node) -> None:
    """OpPrereqError when the instance's disks cannot be used on `target`: a DRBD instance
    fails over only to its secondary; `plain` and `file` disks live on their node alone (a
    failover would start the instance on an empty disk: `herder instance move` copies them)."""
    template = inst.disk_template
    if template in LOCAL_TEMPLATES:
        raise OpPrereqError(
            f"instance {inst.name} has {template} disks, which live on its node alone and "
            f"cannot fail over; use 'herder instance move {inst.name} --node {target.name}' "
            "to copy them", "wrong_input")
    if template in INT_MIRROR and target.uuid not in inst.secondary_nodes:
        raise OpPrereqError(
            f"instance {inst.name} is DRBD-mirrored to "
            f"{', '.join(config.node_name(n) for n in inst.secondary_nodes) or 'no node'}; "
            f"it cannot fail over to {target.name}", "wrong_input")


# --- replace-disks -p/-s ------------------------------------------------------------------------


ASSEMBLED_ON_SECONDARY = frozenset({"drbd", "plain"})  # Ganeti's Disk.AssembleOnSecondary


def _consistent(env: Any, node: model.Node, obj: dict[str, Any], on_primary: bool,
                ldisk: bool) -> bool:
    """Ganeti's _CheckDiskConsistencyInner: the device (and its children) found on `node`
    and not degraded (`ldisk`: its local disk in order)."""
    good = True
    if on_primary or obj["dev_type"] in ASSEMBLED_ON_SECONDARY:
        try:
            status = env.rpc.call(node, "blockdev_find", {"disk": obj})
        except HerderError:
            status = None
        if not status:
            good = False
        else:
            found = dict(zip(STATUS_FIELDS, status, strict=True))
            good = found["ldisk_status"] == LDS_OKAY if ldisk else not found["is_degraded"]
    for child in obj["children"]:
        good = good and _consistent(env, node, child, on_primary, False)
    return good


def check_disk_consistency(env: Any, config: model.ConfigData, inst: model.Instance,
                           disk: model.Disk, node: model.Node, on_primary: bool,
                           ldisk: bool = False) -> bool:
    """Ganeti's CheckDiskConsistency of one disk on one node."""
    return _consistent(env, node, diskobjects.disk_object(config, inst, disk, node.uuid),
                       on_primary, ldisk)


def find_or_fail(env: Any, node: model.Node, obj: dict[str, Any], what: str) -> list[Any]:
    try:
        status = env.rpc.call(node, "blockdev_find", {"disk": obj})
    except HerderError as err:
        raise OpExecError(f"Can't find {what} on node {node.name}: {err}") from None
    if not status:
        raise OpExecError(f"Can't find {what} on node {node.name}: disk not found")
    return list(status)


def check_volume_group(env: Any, config: model.ConfigData, nodes: list[model.Node],
                       feedback: Feedback = _quiet) -> None:
    """Ganeti's TLReplaceDisks._CheckVolumeGroup: `vg_list` on `nodes`, refusing before any
    new LV is made when the cluster's volume group is missing on one of them."""
    feedback("Checking volume groups")
    vg_name = config.cluster.volume_group_name
    for node in nodes:
        try:
            groups = env.rpc.call(node, "vg_list", {})
        except HerderError as err:
            raise OpExecError(f"Error checking node {node.name}: {err}") from None
        if vg_name not in (groups or {}):
            raise OpExecError(f"Volume group '{vg_name}' not found on node {node.name}")


def check_devices(env: Any, config: model.ConfigData, inst: model.Instance,
                  disks: list[model.Disk] | None = None) -> None:
    """Ganeti's TLReplaceDisks._CheckDevices: every DRBD device (of `disks`, default all)
    found on the primary and not degraded."""
    primary = _node(config, inst.primary_node)
    for _index, disk in _selected(inst, disks):
        status = find_or_fail(env, primary,
                               diskobjects.disk_object(config, inst, disk, primary.uuid),
                               f"DRBD device {disk.iv_name}")
        if dict(zip(STATUS_FIELDS, status, strict=True))["is_degraded"]:
            raise OpExecError(f"DRBD device {disk.iv_name} is degraded!")


def disks_activated(env: Any, config: model.ConfigData, inst: model.Instance) -> bool:
    """Ganeti's TLReplaceDisks._CheckDisksActivated: every disk found on every node of the
    instance (an offline node is not asked)."""
    for disk in inst.disks:
        for node_uuid in dict.fromkeys(inst.all_nodes):
            node = _node(config, node_uuid)
            if node.offline:
                continue
            try:
                found = env.rpc.call(node, "blockdev_find", {
                    "disk": diskobjects.disk_object(config, inst, disk, node_uuid)})
            except HerderError:
                return False
            if not found:
                return False
    return True


LDS_FAULTY = 4  # Ganeti's constants.LDS_FAULTY: the local storage failed


def faulty_disks(env: Any, config: model.ConfigData, inst: model.Instance,
                 node: model.Node) -> list[int]:
    """Ganeti's FindFaultyInstanceDisks: the indices of the instance's disks whose local
    storage on `node` failed, from the node's mirror status."""
    try:
        statuses = env.rpc.call(node, "blockdev_getmirrorstatus", {
            "disks": diskobjects.disk_objects(config, inst, node.uuid)})
    except HerderError as err:
        raise OpPrereqError(f"Failed to get disk status from node {node.name}: {err}",
                            "environment_error") from None
    return [index for index, status in enumerate(statuses or [])
            if status and dict(zip(STATUS_FIELDS, status, strict=True))["ldisk_status"]
            == LDS_FAULTY]


def replace_disks_only(env: Any, config: model.ConfigData, inst: model.Instance,
                       node: model.Node, *, indices: list[int] | None = None,
                       early_release: bool = False, feedback: Feedback = _quiet) -> None:
    """Rebuild the DRBD disks' local storage on `node` (the primary for -p, the secondary for -s) in
    Ganeti's order (TLReplaceDisks._ExecDrbd8DiskOnly): the devices found on the other node and on
    `node`, the volume group on both (`vg_list`), the other node checked consistent, new data and
    metadata LVs made, per disk the old LVs detached from the DRBD device, those found renamed to
    `<lv>_replaced-<time>`, the new LVs renamed to the old names and attached, the resync awaited
    (WaitForSync), the devices checked on the primary, the old LVs removed.
    `indices`: only these disks (default: all)."""
    import time

    if inst.disk_template not in INT_MIRROR:
        raise OpPrereqError(f"instance {inst.name} is not DRBD-mirrored; replace-disks "
                            "needs a mirror", "wrong_input")
    chosen = [(index, disk) for index, disk in enumerate(inst.disks)
              if indices is None or index in indices]
    other = _node(config, next(n for n in inst.all_nodes if n != node.uuid))
    feedback("STEP 1/6 Check device existence")
    for index, disk in chosen:
        for here in (other, node):
            find_or_fail(env, here, diskobjects.disk_object(config, inst, disk, here.uuid),
                          f"disk/{index}")
    check_volume_group(env, config, [node, other], feedback)
    feedback("STEP 2/6 Check peer consistency")
    for _index, disk in chosen:
        if not check_disk_consistency(env, config, inst, disk, other,
                                      other.uuid == inst.primary_node):
            raise OpExecError(f"Node {other.name} has degraded storage, unsafe to replace "
                              f"disks for instance {inst.name}")
    feedback("STEP 3/6 Allocate new storage")
    stamp = int(time.time())
    new_children: list[list[dict[str, Any]]] = []
    created: list[tuple[model.Node, dict[str, Any]]] = []
    try:
        for _index, disk in chosen:
            obj = diskobjects.disk_object(config, inst, disk, node.uuid)
            fresh = []
            for child in obj["children"]:
                vg, lv = child["logical_id"]
                new = {**child, "uuid": model.new_uuid(),
                       "logical_id": [vg, f"{lv}.new-{stamp}"]}
                create_tree(env, node, inst, new, True, False, created)
                fresh.append(new)
            new_children.append(fresh)
    except HerderError as err:
        undo_create_disks(env, inst, created, feedback=feedback)
        raise OpExecError(f"allocating new storage on {node.name} failed: {err}") from None
    feedback("STEP 4/6 Changing drbd configuration")
    old_renamed: list[dict[str, Any]] = []
    for (_index, disk), fresh in zip(chosen, new_children, strict=True):
        obj = diskobjects.disk_object(config, inst, disk, node.uuid)
        old = obj["children"]
        env.rpc.call(node, "blockdev_removechildren", {"disk": obj, "ndevs": old})
        renames = []
        for child in old:
            try:
                present = env.rpc.call(node, "blockdev_find", {"disk": child})
            except HerderError:
                present = None
            vg, lv = child["logical_id"]
            if present:
                renames.append([child, [vg, f"{lv}_replaced-{stamp}"]])
            old_renamed.append({**child, "logical_id": [vg, f"{lv}_replaced-{stamp}"]})
        env.rpc.call(node, "blockdev_rename", {"devlist": renames})
        env.rpc.call(node, "blockdev_rename", {"devlist": [
            [new, child["logical_id"]] for new, child in zip(fresh, old, strict=True)]})
        attached = [{**new, "logical_id": child["logical_id"]}
                    for new, child in zip(fresh, old, strict=True)]
        env.rpc.call(node, "blockdev_addchildren", {"disk": obj, "ndevs": attached})
    finish_replacement(env, config, inst, node, old_renamed, early_release=early_release,
                       disks=[disk for _index, disk in chosen], feedback=feedback)


def finish_replacement(env: Any, config: model.ConfigData, inst: model.Instance,
                       node: model.Node, old_lvs: list[dict[str, Any]], *,
                       early_release: bool, disks: list[model.Disk] | None = None,
                       feedback: Feedback = _quiet) -> None:
    """The end of Ganeti's replace-disks: the resync awaited (WaitForSync, all the
    instance's disks), the replaced devices (`disks`, default all) checked on the primary,
    the old LVs on `node` removed — before the wait with `early_release`."""
    def remove_old() -> None:
        feedback("Removing old storage")
        for old in old_lvs:
            try:
                env.rpc.call(node, "blockdev_remove", {"disk": old})
            except HerderError as err:
                feedback(f"can't remove old LV {old['logical_id'][1]} on {node.name}: {err};"
                         " remove it by hand")

    if early_release:
        remove_old()
    feedback("Sync devices")
    wait_for_sync(env, config, inst, feedback=feedback)
    check_devices(env, config, inst, disks)
    if not early_release:
        remove_old()


def wait_for_sync(env: Any, config: model.ConfigData, inst: model.Instance,
                  disks: list[model.Disk] | None = None, *, oneshot: bool = False,
                  feedback: Feedback = _quiet) -> bool:
    """Ganeti's WaitForSync: ask the primary for the mirror status of the instance's
    mirrored disks (`disks`: of these) until none resyncs (`oneshot`: once; still resyncing
    is fine then); a degraded disk is asked about a few more times (a passing state). False
    when a disk stays degraded (10 minutes at most)."""
    import time

    disks = inst.disks if disks is None else disks
    if not inst.disks or not disks:
        return True
    mirrored = [d for d in disks if d.dev_type in INT_MIRROR]
    primary = _node(config, inst.primary_node)
    objects = [diskobjects.disk_object(config, inst, d, primary.uuid) for d in mirrored]
    deadline = time.monotonic() + 600
    degraded_retries = 10
    while True:
        statuses = env.rpc.call(primary, "blockdev_getmirrorstatus", {"disks": objects})
        fields = [dict(zip(STATUS_FIELDS, s, strict=True)) for s in statuses or [] if s]
        degraded = any(f["is_degraded"] and f["sync_percent"] is None for f in fields)
        syncing = [f for f in fields if f["sync_percent"] is not None]
        for disk, status in zip(mirrored, fields, strict=False):
            if status["sync_percent"] is not None:
                feedback(f"- device {disk.iv_name}: {status['sync_percent']:5.2f}% done")
        if (not syncing or oneshot) and degraded and degraded_retries > 0:
            degraded_retries -= 1
            time.sleep(1)
            continue
        if not syncing or oneshot:
            return not degraded
        if time.monotonic() > deadline:
            raise OpExecError(f"the disks of {inst.name} did not resynchronise in time")
        time.sleep(min(60.0, max(float(f["estimated_time"] or 5) for f in syncing)))
