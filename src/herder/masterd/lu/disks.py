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

import time
from collections.abc import Callable

import msgspec

from herder.core import diskobjects, model, params
from herder.core.diskobjects import BlockDevStatus, Disk, LocalDiskStatus
from herder.core.errors import HerderError, OpExecError, OpPrereqError, RpcError
from herder.core.rpcdefs import disk_calls
from herder.core.rpcdefs.base import AnswerT, Call
from herder.masterd.lu.base import MasterEnv

Feedback = Callable[[str], None]
# Ganeti's DTS_INT_MIRROR / DTS_EXT_MIRROR: a mirrored disk fails over to its secondary; a
# shared or external one to any node that reaches the storage; the rest stays where it is.
INT_MIRROR = params.DTS_INT_MIRROR
EXT_MIRROR = params.DTS_EXT_MIRROR
LOCAL_TEMPLATES = frozenset({"plain", "file"})


def quiet(message: str) -> None:
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


def node_call(env: MasterEnv, node: model.Node, request: Call[AnswerT]) -> AnswerT:
    """A node RPC, but none to a node marked offline: Ganeti's RPC layer answers for it
    ("node is marked offline") and the callers treat that as they treat an offline node."""
    if node.offline:
        raise RpcError(f"node {node.name}: {request.METHOD} not sent: the node is marked "
                       "offline")
    return env.rpc.call(node, request)


def _node(config: model.ConfigData, node_uuid: str) -> model.Node:
    node = config.nodes.get(node_uuid)
    if node is None:
        raise OpExecError(f"unknown node {node_uuid}")
    return node


# --- create and remove ---------------------------------------------------------------------------


Created = list[tuple[model.Node, Disk]]  # what was made where, for `undo_create_disks`


def create_tree(env: MasterEnv, node: model.Node, inst: model.Instance, obj: Disk,
                force_create: bool, force_open: bool, created: Created) -> None:
    """Ganeti's _CreateBlockDevInner: the children first; a device is made where it must be
    (`force_create`, or a type made on secondaries too: drbd, plain)."""
    if obj.dev_type in ("drbd", "plain"):
        force_create = True
    made_children: Created = []
    try:
        for child in obj.children:
            create_tree(env, node, inst, child, force_create, force_open, made_children)
        if not force_create:
            created.extend(made_children)
            return
        env.rpc.call(node, disk_calls.BlockdevCreate(
            disk=obj, size=obj.size, owner=inst.name, on_primary=force_open,
            info=info_text(inst)))
    except HerderError:
        created.extend(made_children)
        raise
    created.append((node, obj))  # complete: removing it removes its children


def create_disks(env: MasterEnv, config: model.ConfigData, inst: model.Instance, *,
                 disks: list[model.Disk] | None = None, target: model.Node | None = None,
                 feedback: Feedback = quiet) -> Created:
    """Make the instance's disks on its nodes (Ganeti's CreateDisks): the file-storage
    directory on the primary, then per disk the primary first, then its other nodes; with
    `target` (a move) on that node alone, as its primary. On a failure what this call made is
    removed again and OpExecError raised. Returns what was made, for `undo_create_disks`."""
    if target is not None:  # a view, never stored
        inst = msgspec.structs.replace(inst, primary_node=target.uuid)
    disks = inst.disks if disks is None else disks
    primary = _node(config, inst.primary_node)
    created: Created = []
    directory = next((d for d in map(diskobjects.file_storage_dir, disks) if d), None)
    if directory is not None:
        try:
            env.rpc.call(primary, disk_calls.FileStorageDirCreate(file_storage_dir=directory))
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


def create_and_sync(env: MasterEnv, config: model.ConfigData, inst: model.Instance, *,
                    wait: bool, feedback: Feedback = quiet) -> None:
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


def undo_create_disks(env: MasterEnv, inst: model.Instance, created: Created, *,
                      feedback: Feedback = quiet) -> None:
    """Remove what `create_disks` made (Ganeti's _UndoCreateDisks); failures are reported."""
    for node, obj in created:
        try:
            env.rpc.call(node, disk_calls.BlockdevRemove(disk=obj))
        except HerderError as err:
            feedback(f"failed to remove newly-created disk {obj.iv_name or obj.uuid}"
                     f" on node {node.name}: {err}")


def _remove_dir(env: MasterEnv, node: model.Node, directory: str, feedback: Feedback) -> bool:
    try:
        env.rpc.call(node, disk_calls.FileStorageDirRemove(file_storage_dir=directory))
    except HerderError as err:
        feedback(f"could not remove directory '{directory}' on node {node.name}: {err}")
        return False
    return True


def remove_disks(env: MasterEnv, config: model.ConfigData, inst: model.Instance, *,
                 disks: list[model.Disk] | None = None, target: model.Node | None = None,
                 feedback: Feedback = quiet) -> bool:
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
                node_call(env, node, disk_calls.BlockdevRemove(disk=obj))
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


def assemble_disks(env: MasterEnv, config: model.ConfigData, inst: model.Instance, *,
                   primary: model.Node | None = None, ignore_secondaries: bool = False,
                   disks: list[model.Disk] | None = None,
                   feedback: Feedback = quiet) -> list[tuple[str, str, str]]:
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
                node_call(env, node, disk_calls.BlockdevAssemble(
                    disk=diskobjects.disk_object(config, inst, disk, node_uuid),
                    instance=inst.name, as_primary=False, idx=index))
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
            answer = node_call(env, primary, disk_calls.BlockdevAssemble(
                disk=diskobjects.disk_object(config, inst, disk, primary.uuid),
                instance=inst.name, as_primary=True, idx=index))
            path = (answer[0] or "") if isinstance(answer, tuple) else ""
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


def shutdown_disks(env: MasterEnv, config: model.ConfigData, inst: model.Instance, *,
                   nodes: list[model.Node] | None = None, ignore_primary: bool = False,
                   disks: list[model.Disk] | None = None,
                   feedback: Feedback = quiet) -> bool:
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
                node_call(env, node, disk_calls.BlockdevShutdown(
                    disk=diskobjects.disk_object(config, inst, disk, node_uuid)))
            except HerderError as err:
                feedback(f"could not shutdown block device {disk.iv_name} on node "
                         f"{node.name}: {err}")
                unreachable = isinstance(err, RpcError) and node.offline
                if (node_uuid == inst.primary_node and not ignore_primary) or \
                        (node_uuid != inst.primary_node and not unreachable):
                    all_done = False
    return all_done


# --- status ------------------------------------------------------------------------------------

STATUS_TIMEOUT = 10.0


def disk_status(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                disk: model.Disk) -> dict[str, object]:
    """Ganeti's instance query data per disk: `pstatus` (the primary's) and `sstatus` (the
    DRBD secondary's) BlockDevStatus from `blockdev_find` — device path, numbers, sync
    percent, estimated time, degraded, local-disk status — None where the disk is not
    assembled or the node did not answer (`*_error` then says why)."""
    found: dict[str, object] = {"pstatus": None, "sstatus": None}
    for key, node_uuid in zip(("pstatus", "sstatus"), disk_nodes(inst, disk), strict=False):
        node = config.nodes.get(node_uuid)
        if node is None or node.offline:
            continue
        try:
            status = env.rpc.call(node, disk_calls.BlockdevFind(
                disk=diskobjects.disk_object(config, inst, disk, node_uuid)),
                timeout=STATUS_TIMEOUT)
        except HerderError as err:
            found[f"{key}_error"] = str(err)
            continue
        if status is not None:
            found[key] = status.as_dict()
    return found


# --- the migration's and failover's disk steps --------------------------------------------------


def prepare_live_migration(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
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
            env.rpc.call(node, disk_calls.BlockdevOpen(
                instance=inst.name, exclusive=False, disks=_drbd_objects(config, inst, node)))
        return
    for index, disk in enumerate(inst.disks):
        env.rpc.call(target, disk_calls.BlockdevAssemble(
            disk=diskobjects.disk_object(config, inst, disk, target.uuid),
            instance=inst.name, as_primary=True, idx=index))


def _drbd_objects(config: model.ConfigData, inst: model.Instance,
                  node: model.Node) -> list[Disk]:
    return diskobjects.disk_objects(config, inst, node.uuid)


def _drbd_dual_primary(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                       source: model.Node, target: model.Node) -> None:
    """Ganeti's TLMigrateInstance._ExecMigration before the migration: the target's disks
    closed (secondary), both sides standalone, reconnected as multi-master, in sync."""
    env.rpc.call(target, disk_calls.BlockdevClose(
        instance=inst.name, disks=_drbd_objects(config, inst, target)))
    for node in (source, target):
        env.rpc.call(node, disk_calls.DrbdDisconnectNet(disks=_drbd_objects(config, inst, node)))
    for node in (source, target):
        env.rpc.call(node, disk_calls.DrbdAttachNet(
            disks=_drbd_objects(config, inst, node), instance=inst.name, multimaster=True))
    wait_drbd_sync(env, config, inst, (source, target))


def wait_drbd_sync(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                   nodes: tuple[model.Node, ...]) -> None:
    """Ask each node until every DRBD disk of the instance is in sync (10 minutes at most)."""
    deadline = time.monotonic() + 600
    while True:
        done = True
        for node in nodes:
            synced, _percent = env.rpc.call(node, disk_calls.DrbdWaitSync(
                disks=_drbd_objects(config, inst, node)))
            done = done and synced
        if done:
            return
        if time.monotonic() > deadline:
            raise OpExecError(f"the disks of {inst.name} did not resynchronise in time")
        time.sleep(2)


def finish_live_migration(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                          source: model.Node, target: model.Node, *, migrated: bool) -> None:
    """After the migration (`migrated`) or its failure/cleanup: back to single primary on the
    node that runs the domain (target when migrated, else source); the other node's disks
    released (shared storage) or made secondary (DRBD; after a migration the resync awaited
    first, as Ganeti's)."""
    runs, other = (target, source) if migrated else (source, target)
    if inst.disk_template in INT_MIRROR:
        env.rpc.call(other, disk_calls.BlockdevClose(
            instance=inst.name, disks=_drbd_objects(config, inst, other)))
        if migrated:
            wait_drbd_sync(env, config, inst, (source, target))
        for node in (source, target):
            env.rpc.call(node, disk_calls.DrbdDisconnectNet(
                disks=_drbd_objects(config, inst, node)))
        for node in (source, target):
            env.rpc.call(node, disk_calls.DrbdAttachNet(
                disks=_drbd_objects(config, inst, node), instance=inst.name,
                multimaster=False))
        wait_drbd_sync(env, config, inst, (source, target))
        return
    for disk in inst.disks:
        try:
            env.rpc.call(other, disk_calls.BlockdevShutdown(
                disk=diskobjects.disk_object(config, inst, disk, other.uuid)))
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


def _consistent(env: MasterEnv, node: model.Node, obj: Disk, on_primary: bool,
                ldisk: bool) -> bool:
    """Ganeti's _CheckDiskConsistencyInner: the device (and its children) found on `node`
    and not degraded (`ldisk`: its local disk in order)."""
    good = True
    if on_primary or obj.dev_type in ASSEMBLED_ON_SECONDARY:
        try:
            status = env.rpc.call(node, disk_calls.BlockdevFind(disk=obj))
        except HerderError:
            status = None
        if status is None:
            good = False
        else:
            good = status.ldisk_status == LocalDiskStatus.OKAY if ldisk \
                else not status.is_degraded
    for child in obj.children:
        good = good and _consistent(env, node, child, on_primary, False)
    return good


def check_disk_consistency(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                           disk: model.Disk, node: model.Node, on_primary: bool,
                           ldisk: bool = False) -> bool:
    """Ganeti's CheckDiskConsistency of one disk on one node."""
    return _consistent(env, node, diskobjects.disk_object(config, inst, disk, node.uuid),
                       on_primary, ldisk)


def find_or_fail(env: MasterEnv, node: model.Node, obj: Disk, what: str) -> BlockDevStatus:
    try:
        status = env.rpc.call(node, disk_calls.BlockdevFind(disk=obj))
    except HerderError as err:
        raise OpExecError(f"Can't find {what} on node {node.name}: {err}") from None
    if status is None:
        raise OpExecError(f"Can't find {what} on node {node.name}: disk not found")
    return status


def check_volume_group(env: MasterEnv, config: model.ConfigData, nodes: list[model.Node],
                       feedback: Feedback = quiet) -> None:
    """Ganeti's TLReplaceDisks._CheckVolumeGroup: `vg_list` on `nodes`, refusing before any
    new LV is made when the cluster's volume group is missing on one of them."""
    feedback("Checking volume groups")
    vg_name = config.cluster.volume_group_name
    for node in nodes:
        try:
            groups = env.rpc.call(node, disk_calls.VgList())
        except HerderError as err:
            raise OpExecError(f"Error checking node {node.name}: {err}") from None
        if vg_name not in groups:
            raise OpExecError(f"Volume group '{vg_name}' not found on node {node.name}")


def check_devices(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                  disks: list[model.Disk] | None = None) -> None:
    """Ganeti's TLReplaceDisks._CheckDevices: every DRBD device (of `disks`, default all)
    found on the primary and not degraded."""
    primary = _node(config, inst.primary_node)
    for _index, disk in _selected(inst, disks):
        status = find_or_fail(env, primary,
                               diskobjects.disk_object(config, inst, disk, primary.uuid),
                               f"DRBD device {disk.iv_name}")
        if status.is_degraded:
            raise OpExecError(f"DRBD device {disk.iv_name} is degraded!")


def disks_activated(env: MasterEnv, config: model.ConfigData, inst: model.Instance) -> bool:
    """Ganeti's TLReplaceDisks._CheckDisksActivated: every disk found on every node of the
    instance (an offline node is not asked)."""
    for disk in inst.disks:
        for node_uuid in dict.fromkeys(inst.all_nodes):
            node = _node(config, node_uuid)
            if node.offline:
                continue
            try:
                found = env.rpc.call(node, disk_calls.BlockdevFind(
                    disk=diskobjects.disk_object(config, inst, disk, node_uuid)))
            except HerderError:
                return False
            if found is None:
                return False
    return True


def faulty_disks(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                 node: model.Node) -> list[int]:
    """Ganeti's FindFaultyInstanceDisks: the indices of the instance's disks whose local
    storage on `node` failed, from the node's mirror status."""
    try:
        statuses = env.rpc.call(node, disk_calls.BlockdevGetmirrorstatus(
            disks=diskobjects.disk_objects(config, inst, node.uuid)))
    except HerderError as err:
        raise OpPrereqError(f"Failed to get disk status from node {node.name}: {err}",
                            "environment_error") from None
    return [index for index, status in enumerate(statuses)
            if status.ldisk_status == LocalDiskStatus.FAULTY]


def wait_for_sync(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                  disks: list[model.Disk] | None = None, *, oneshot: bool = False,
                  feedback: Feedback = quiet) -> bool:
    """Ganeti's WaitForSync: ask the primary for the mirror status of the instance's
    mirrored disks (`disks`: of these) until none resyncs (`oneshot`: once; still resyncing
    is fine then); a degraded disk is asked about a few more times (a passing state). False
    when a disk stays degraded (10 minutes at most)."""
    disks = inst.disks if disks is None else disks
    if not inst.disks or not disks:
        return True
    mirrored = [d for d in disks if d.dev_type in INT_MIRROR]
    primary = _node(config, inst.primary_node)
    objects = [diskobjects.disk_object(config, inst, d, primary.uuid) for d in mirrored]
    deadline = time.monotonic() + 600
    degraded_retries = 10
    while True:
        statuses = env.rpc.call(primary, disk_calls.BlockdevGetmirrorstatus(disks=objects))
        degraded = any(s.is_degraded and s.sync_percent is None for s in statuses)
        syncing = [s for s in statuses if s.sync_percent is not None]
        for disk, status in zip(mirrored, statuses, strict=False):
            if status.sync_percent is not None:
                feedback(f"- device {disk.iv_name}: {status.sync_percent:5.2f}% done")
        if (not syncing or oneshot) and degraded and degraded_retries > 0:
            degraded_retries -= 1
            time.sleep(1)
            continue
        if not syncing or oneshot:
            return not degraded
        if time.monotonic() > deadline:
            raise OpExecError(f"the disks of {inst.name} did not resynchronise in time")
        time.sleep(min(60.0, max(float(s.estimated_time or 5) for s in syncing)))
