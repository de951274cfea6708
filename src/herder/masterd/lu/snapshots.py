"""Snapshots of an instance's disks (herder's own: Ganeti has none; compat B63):
OP_INSTANCE_SNAPSHOT_ADD, OP_INSTANCE_SNAPSHOT_ROLLBACK, OP_INSTANCE_SNAPSHOT_REMOVE. A snapshot
covers every disk of the instance and is recorded in the config (`model.InstanceSnapshot`:
its name, time and each disk's snapshot volume), so listing needs no node and rollback and
remove know what to act on. The node work is `lu/snapshot_volumes`."""

from __future__ import annotations

from typing import TypeVar

from herder.core import model
from herder.core.errors import OpExecError, OpPrereqError
from herder.masterd.jobs import opcodes
from herder.masterd.lu import snapshot_volumes
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup
from herder.masterd.lu.common import instance_locks

# The most snapshots an instance keeps (each a full volume per disk on ExtStorage providers
# that copy, such as sharedimg)
MAX_SNAPSHOTS = 32

SnapshotOpT = TypeVar("SnapshotOpT", bound=opcodes.SnapshotOpCode)


class SnapshotLU(LogicalUnit[SnapshotOpT]):
    """What the three share: the instance and its nodes locked, the template checked."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return instance_locks(config, self.op.instance_name, nodes=True)

    def check_instance(self, config: model.ConfigData) -> model.Instance:
        inst = lookup(config.find_instance, self.op.instance_name)
        why = snapshot_volumes.unsupported(inst)
        if why is not None:
            raise OpPrereqError(why, "wrong_input")
        primary = config.nodes.get(inst.primary_node)
        if primary is None or primary.offline:
            raise OpPrereqError(f"instance {inst.name}: its primary node is offline",
                                "wrong_state")
        return inst

    def recorded(self, inst: model.Instance) -> model.InstanceSnapshot:
        snapshot = inst.snapshot(self.op.snapshot_name)
        if snapshot is None:
            raise OpPrereqError(f"instance {inst.name} has no snapshot {self.op.snapshot_name}",
                                "unknown_entity")
        return snapshot


class SnapshotAdd(SnapshotLU[opcodes.OpInstanceSnapshotAdd]):
    @classmethod
    def after_master_death(cls, op: opcodes.OpInstanceSnapshotAdd) -> list[dict[str, object]]:
        """The volumes taken before the master died, removed unless the snapshot was
        recorded (the job queue's recovery submits it)."""
        if op.cleanup:
            return []
        return [{"OP_ID": "OP_INSTANCE_SNAPSHOT_ADD", "instance_name": op.instance_name,
                 "snapshot_name": op.snapshot_name, "cleanup": True}]

    def check(self, config: model.ConfigData) -> None:
        inst = self.check_instance(config)
        if self.op.cleanup:
            return
        if inst.snapshot(self.op.snapshot_name) is not None:
            raise OpPrereqError(f"instance {inst.name} already has a snapshot "
                                f"{self.op.snapshot_name}", "already_exists")
        if len(inst.snapshots) >= MAX_SNAPSHOTS:
            raise OpPrereqError(f"instance {inst.name} has {len(inst.snapshots)} snapshots, "
                                "the most it may keep: remove one first", "wrong_state")

    def execute(self) -> JobResult:
        config = self.env.store.load()
        inst = config.find_instance(self.op.instance_name)
        if self.op.cleanup:
            return self._clean_up(config, inst)
        snapshot = snapshot_volumes.take(self.env, config, inst, self.op.snapshot_name,
                                         self.feedback)
        try:
            with self.env.store.update() as changed:
                changed.instances[inst.uuid].snapshots.append(snapshot)
                changed.instances[inst.uuid].touch()
        except Exception:
            snapshot_volumes.remove_volumes(self.env, config, inst, snapshot.volumes,
                                            self.feedback)
            raise
        return snapshot.name

    def _clean_up(self, config: model.ConfigData, inst: model.Instance) -> JobResult:
        if inst.snapshot(self.op.snapshot_name) is not None:
            self.feedback(f"snapshot {self.op.snapshot_name} of {inst.name} was recorded: "
                          "nothing to clean up")
            return None
        left = snapshot_volumes.remove_volumes(
            self.env, config, inst, snapshot_volumes.named_volumes(inst, self.op.snapshot_name),
            self.feedback)
        if left:
            raise OpExecError(f"could not remove the volumes {', '.join(left)} of the "
                              f"unrecorded snapshot {self.op.snapshot_name} of {inst.name}")
        snapshot_volumes.release_stopped(self.env, config, inst, self.feedback)
        return None


class SnapshotRollback(SnapshotLU[opcodes.OpInstanceSnapshotRollback]):
    @classmethod
    def after_master_death(cls, op: opcodes.OpInstanceSnapshotRollback
                           ) -> list[dict[str, object]]:
        """The disks put back as they were and the content kept aside removed (the job
        queue's recovery submits it)."""
        if op.cleanup:
            return []
        return [{"OP_ID": "OP_INSTANCE_SNAPSHOT_ROLLBACK", "instance_name": op.instance_name,
                 "snapshot_name": op.snapshot_name, "cleanup": True}]

    def check(self, config: model.ConfigData) -> None:
        inst = self.check_instance(config)
        if self.op.cleanup:
            return
        if inst.rollback_aside:  # its copies would be overwritten
            raise OpPrereqError(f"instance {inst.name}: a rollback cut short kept the disks' "
                                "earlier content aside; run the rollback with cleanup first "
                                "(it puts the disks back)", "wrong_state")
        snapshot = self.recorded(inst)
        if inst.admin_state == "up":
            raise OpPrereqError(f"instance {inst.name} is running: stop it before rolling back "
                                f"to snapshot {snapshot.name}", "wrong_state")
        taken = {volume.disk for volume in snapshot.volumes}
        changed = [d.iv_name for d in inst.disks if d.uuid not in taken]
        if changed:
            raise OpPrereqError(f"snapshot {snapshot.name} of {inst.name} has no copy of "
                                f"{', '.join(changed)} (added since): it cannot be rolled back "
                                "to", "wrong_state")

    def execute(self) -> JobResult:
        config = self.env.store.load()
        inst = config.find_instance(self.op.instance_name)
        if self.op.cleanup:
            snapshot_volumes.recover_rollback(self.env, config, inst, self.feedback)
            return None
        snapshot = self.recorded(inst)
        inst = snapshot_volumes.release_for_rollback(self.env, config, inst, self.feedback)
        snapshot_volumes.rollback(self.env, config, inst, snapshot, self.feedback)
        return None


class SnapshotRemove(SnapshotLU[opcodes.OpInstanceSnapshotRemove]):
    def check(self, config: model.ConfigData) -> None:
        self.recorded(lookup(config.find_instance, self.op.instance_name))

    def execute(self) -> JobResult:
        config = self.env.store.load()
        inst = config.find_instance(self.op.instance_name)
        snapshot = self.recorded(inst)
        left = snapshot_volumes.remove_volumes(self.env, config, inst, snapshot.volumes,
                                               self.feedback)
        if left:
            raise OpExecError(f"could not remove snapshot {snapshot.name} of {inst.name}: "
                              f"its volumes {', '.join(left)} remain (see the job log)")
        with self.env.store.update() as changed:
            kept = changed.instances[inst.uuid]
            kept.snapshots = [s for s in kept.snapshots if s.name != snapshot.name]
            kept.touch()
        return None
