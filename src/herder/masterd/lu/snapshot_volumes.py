"""Helpers of instance snapshots (`lu/snapshots`' LUs, `lu/common`'s instance removal): every
disk of an instance snapshotted on its primary node (all or none), the disks rolled back to a
snapshot (all or none), a snapshot's volumes removed. Only `ext` disks take part: the node side
snapshots and rolls back ExtStorage volumes whose provider has the `snapshot` and `rollback`
scripts (compat B57); every other device type is refused before anything runs."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from herder.core import diskobjects, model
from herder.core.errors import HerderError, OpExecError
from herder.core.rpcdefs import disk_calls, node_calls
from herder.masterd.lu import disks, handover
from herder.masterd.lu.base import MasterEnv

Feedback = Callable[[str], None]

# The disk templates whose devices the nodes can snapshot and roll back (noded.bdev.operations)
SNAPSHOT_TEMPLATES = ("ext", "rbd")

# The snapshot a rollback keeps the disks' content in while it runs: no user's snapshot name
# (those start with a letter or digit), one per instance (the instance is locked), so the
# queue's recovery finds it after a master died in the rollback
ASIDE = "_rollback"


def unsupported(inst: model.Instance) -> str | None:
    """Why the instance's disks cannot be snapshotted (None: they can)."""
    if not inst.disks:
        return f"instance {inst.name} has no disks to snapshot"
    if inst.disk_template == "plain":
        return (f"instance {inst.name}: plain disks cannot be snapshotted (rolling an LVM "
                "volume back needs device-mapper, which herder's nodes do not drive; use rbd "
                "or ext disks)")
    if inst.disk_template not in SNAPSHOT_TEMPLATES:
        return (f"instance {inst.name}: {inst.disk_template} disks cannot be snapshotted "
                "(only rbd disks, and ext disks whose provider has the snapshot and rollback "
                "scripts)")
    return None


def snap_name(disk: model.Disk, snapshot: str) -> str:
    """The name the node gives `disk`'s snapshot `snapshot`: an ExtStorage volume of its own
    (`VOLUME.snap-NAME`), an rbd image's snapshot (`snap-NAME`, in the image's namespace)."""
    assert isinstance(disk.logical_id, model.ExtId)
    if disk.dev_type == "rbd":
        return f"snap-{snapshot}"
    return f"{disk.logical_id.name}.snap-{snapshot}"


def volume_name(disk: model.Disk, snapshot: str) -> str:
    """The name of `disk`'s volume holding the snapshot `snapshot` (its logical id's)."""
    assert isinstance(disk.logical_id, model.ExtId)
    if disk.dev_type == "rbd":
        return f"{disk.logical_id.name}@{snap_name(disk, snapshot)}"
    return snap_name(disk, snapshot)


def rollback_name(volume: model.SnapshotVolume) -> str:
    """The snapshot name a rollback gives the node: the volume's name, for rbd the part after
    the image's (`IMAGE@SNAP`)."""
    assert isinstance(volume.logical_id, model.ExtId)
    return volume.logical_id.name.rpartition("@")[2]


def volume_disk(disk: model.Disk, volume: model.SnapshotVolume) -> model.Disk:
    """The snapshot's volume as a disk of its own (a snapshot is a volume: compat B57)."""
    return msgspec.structs.replace(disk, logical_id=volume.logical_id)


def named_volumes(inst: model.Instance, name: str) -> list[model.SnapshotVolume]:
    """The volumes a snapshot `name` of `inst` has (or would have), by their names."""
    return [model.SnapshotVolume(disk=disk.uuid, logical_id=model.ExtId(
        provider=disk.logical_id.provider, name=volume_name(disk, name)))
        for disk in inst.disks if isinstance(disk.logical_id, model.ExtId)]


def _primary(config: model.ConfigData, inst: model.Instance) -> model.Node:
    return config.nodes[inst.primary_node]


def _logical_id(answer: list[str]) -> model.ExtId:
    if len(answer) != 2 or not all(answer):
        raise OpExecError(f"the node answered a snapshot id {answer!r}")
    return model.ExtId(provider=answer[0], name=answer[1])


def take(env: MasterEnv, config: model.ConfigData, inst: model.Instance, name: str,
         feedback: Feedback) -> model.InstanceSnapshot:
    """A snapshot of every disk of `inst`, named `name`; a failure removes the volumes taken
    so far and raises OpExecError (one line). The disks of a stopped instance are released
    again (taking a snapshot attaches the volume)."""
    return model.InstanceSnapshot(name=name, ctime=time.time(),
                                  volumes=take_volumes(env, config, inst, name, feedback))


def take_volumes(env: MasterEnv, config: model.ConfigData, inst: model.Instance, name: str,
                 feedback: Feedback) -> list[model.SnapshotVolume]:
    """`take`'s volumes (`name` may be the reserved ASIDE)."""
    node = _primary(config, inst)
    taken: list[model.SnapshotVolume] = []
    try:
        for disk in inst.disks:
            answer = env.rpc.call(node, disk_calls.BlockdevSnapshot(
                disk=diskobjects.disk_object(config, inst, disk),
                snap_name=snap_name(disk, name)))
            taken.append(model.SnapshotVolume(disk=disk.uuid, logical_id=_logical_id(answer)))
            feedback(f"snapshot {name} of {disk.iv_name} taken")
    except HerderError as err:
        left = remove_volumes(env, config, inst, taken, feedback)
        undo = "; the snapshots taken were removed" if not left else \
            f"; remove {', '.join(left)} on {node.name} yourself"
        raise OpExecError(f"snapshot {name} of {inst.name} failed: {err}{undo}") from None
    finally:
        release_stopped(env, config, inst, feedback)
    return taken


def release_stopped(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                    feedback: Feedback) -> None:
    """The disks of an instance that neither runs nor has its disks activated released."""
    if inst.admin_state != "up" and not inst.disks_active:
        disks.shutdown_disks(env, config, inst, feedback=feedback)


def release_for_rollback(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                         feedback: Feedback) -> model.Instance:
    """The disks of the stopped `inst` released on its primary (herder's shutdown leaves them
    assembled; a provider rolls back only a volume no node has attached), refused while its
    domain runs there; the instance as it is then (its disks inactive)."""
    node = _primary(config, inst)
    listed = env.rpc.call(node, node_calls.InstanceList())
    if listed.get(inst.name) in handover.RUNNING_STATES:
        raise OpExecError(f"instance {inst.name} runs on {node.name}: its disks cannot be "
                          "rolled back")
    if not disks.shutdown_disks(env, config, inst, feedback=feedback):
        raise OpExecError(f"could not release the disks of {inst.name} on {node.name} for "
                          "the rollback")
    if inst.disks_active:
        with env.store.update() as changed:
            changed.instances[inst.uuid].disks_active = False
    return msgspec.structs.replace(inst, disks_active=False)


def remove_volumes(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                   volumes: list[model.SnapshotVolume], feedback: Feedback) -> list[str]:
    """The snapshot volumes removed from the primary node; the ones that could not be (their
    names), past every failure."""
    node = _primary(config, inst)
    by_uuid = {disk.uuid: disk for disk in inst.disks}
    left = []
    for volume in volumes:
        disk = by_uuid.get(volume.disk)
        named = volume_label(volume)
        if disk is None:
            feedback(f"snapshot volume {named}: its disk is gone; remove it yourself")
            left.append(named)
            continue
        try:
            env.rpc.call(node, disk_calls.BlockdevRemove(disk=diskobjects.disk_object(
                config, inst, volume_disk(disk, volume))))
        except HerderError as err:
            feedback(f"could not remove snapshot volume {named} on {node.name}: {err}")
            left.append(named)
    return left


class PartialRollback(HerderError):
    """A rollback that failed at one disk, after `done` were rolled back."""

    def __init__(self, message: str, done: list[model.Disk]) -> None:
        super().__init__(message)
        self.done = done


def _roll_back(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
               volumes: list[model.SnapshotVolume]) -> None:
    """Each disk rolled back to its volume of `volumes`, in order (PartialRollback)."""
    node = _primary(config, inst)
    by_disk = {volume.disk: volume for volume in volumes}
    done: list[model.Disk] = []
    for disk in inst.disks:
        try:
            env.rpc.call(node, disk_calls.BlockdevSnapshotRollback(
                disk=diskobjects.disk_object(config, inst, disk),
                snap_name=rollback_name(by_disk[disk.uuid])))
        except HerderError as err:
            raise PartialRollback(f"{disk.iv_name}: {err}", done) from None
        done.append(disk)


def rollback(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
             snapshot: model.InstanceSnapshot, feedback: Feedback) -> None:
    """Every disk of the stopped `inst` takes the content of `snapshot`. The disks' present
    content is snapshotted first (under ASIDE, outside the users' names) and recorded in the
    config (`Instance.rollback_aside`), so a failure part-way puts the disks rolled back so
    far back as they were (OpExecError, one line), and after a master died in it the queue's
    recovery does (`recover_rollback`)."""
    remove_volumes(env, config, inst, named_volumes(inst, ASIDE), feedback)  # a dead one's
    keep = take_volumes(env, config, inst, ASIDE, feedback)
    _record_aside(env, inst, keep)
    try:
        _roll_back(env, config, inst, snapshot.volumes)
    except PartialRollback as err:
        restored = _restore(env, config, inst, keep, err.done, feedback)
        if restored:
            _record_aside(env, inst, [])
        left = remove_volumes(env, config, inst, keep, feedback) if restored else \
            [volume_label(v) for v in keep]
        kept = "" if not left else f"; their content before it is in {', '.join(left)}"
        state = "the disks are as they were" if restored else "the disks could not all be put back"
        raise OpExecError(f"rollback of {inst.name} to {snapshot.name} failed: {err}; "
                          f"{state}{kept}") from None
    _record_aside(env, inst, [])  # done: from here the copies are only removed
    remove_volumes(env, config, inst, keep, feedback)
    for disk in inst.disks:
        feedback(f"{disk.iv_name} rolled back to snapshot {snapshot.name}")


def _record_aside(env: MasterEnv, inst: model.Instance,
                  volumes: list[model.SnapshotVolume]) -> None:
    with env.store.update() as changed:
        changed.instances[inst.uuid].rollback_aside = volumes


def _restore(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
             keep: list[model.SnapshotVolume], rolled: list[model.Disk], feedback: Feedback
             ) -> bool:
    """The disks `rolled` put back to `keep` (their content before the rollback)."""
    partial = msgspec.structs.replace(inst, disks=rolled)
    try:
        _roll_back(env, config, partial, keep)
    except PartialRollback as err:
        feedback(f"could not put back the disks rolled back: {err}")
        return False
    return True


def recover_rollback(env: MasterEnv, config: model.ConfigData, inst: model.Instance,
                     feedback: Feedback) -> None:
    """After a master died in a rollback of `inst` (the job queue's recovery): when the
    disks' content kept aside was recorded (the rollback may have begun), every disk takes it
    again, as it was before the job; then the copies are removed and the record cleared.
    Unrecorded copies (the master died while taking them, or after the rollback finished)
    are removed; the disks are not touched."""
    recorded = inst.rollback_aside
    if recorded:
        inst = release_for_rollback(env, config, inst, feedback)
        try:
            _roll_back(env, config, inst, recorded)
        except PartialRollback as err:
            raise OpExecError(f"could not put the disks of {inst.name} back as they were "
                              f"before the rollback: {err}; their content is in "
                              f"{', '.join(volume_label(v) for v in recorded)}") from None
        _record_aside(env, inst, [])
        feedback(f"the disks of {inst.name} are back as they were before the rollback")
    left = remove_volumes(env, config, inst, recorded or named_volumes(inst, ASIDE), feedback)
    if left:
        raise OpExecError(f"could not remove {', '.join(left)} (the disks' content before "
                          f"a rollback of {inst.name}) on {_primary(config, inst).name}")
    if not recorded:
        feedback(f"no rollback of {inst.name} had begun: only its unrecorded copies were "
                 "removed, if any")


def volume_label(volume: model.SnapshotVolume) -> str:
    return getattr(volume.logical_id, "name", str(volume.logical_id))
