"""Backups (Ganeti's gnt-backup, cmdlib/backup.py): OP_BACKUP_PREPARE, OP_BACKUP_EXPORT,
OP_BACKUP_REMOVE. An export streams each disk of the instance, shut down (or, with `shutdown`
false, running: a snapshot of each disk, removed afterwards, as Ganeti's), from its primary
node to the target node's export directory over the nodes' TLS (the transport of an instance
move: `noded.disk_transfer`), then writes Ganeti's config.ini there (`core.exportconf`) and
puts the export in place (`noded.exports`). A failure removes the partial export and leaves
the instance as it was (started again when it ran). Imports are OP_INSTANCE_CREATE's mode
`import` (`lu/create`); both stream through `lu/exports`."""

from __future__ import annotations

import time

from herder.core import exportconf, model, vmclaim
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.core.rpcdefs import backup_calls, instance_calls, node_calls
from herder.core.rpcdefs.backup_calls import PARTIAL
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks, handover, remote_streams, snapshot_volumes
from herder.masterd.lu.base import (
    JobResult,
    LockRequest,
    LogicalUnit,
    instance_and_node_locks,
    lookup,
)
from herder.masterd.lu.common import forget_instance, remove_domain_and_disks
from herder.masterd.lu.exports import (
    RemoteTarget,
    check_remote_export,
    domain_secret,
    find_exports,
    progress_line,
    remote_preparation,
    stream_disk,
)

# seconds the partial export's removal is tried after a failed export (a target node daemon
# that died mid-stream is back within this under its supervisor)
PARTIAL_REMOVAL_WAIT = 60.0

# The snapshot an export without a shutdown reads (Ganeti's LUBackupExport snapshots each disk
# the same way): no user's snapshot name (those start with a letter or digit), one per
# instance (the instance is locked), so the queue's recovery finds it after a master died
EXPORT_SNAPSHOT = "_export"


class BackupPrepare(LogicalUnit[opcodes.OpBackupPrepare]):
    """A local export needs no preparation (Ganeti answers None); a remote one answers what
    the destination cluster checks (`exports.remote_preparation`)."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        inst = lookup(config.find_instance, self.op.instance_name)
        return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid], shared=True)]

    def check(self, config: model.ConfigData) -> None:
        self.inst = lookup(config.find_instance, self.op.instance_name)
        if self.op.mode == "remote":
            domain_secret(self.env)

    def execute(self) -> JobResult:
        if self.op.mode != "remote":
            return None
        config = self.env.store.load()
        self.feedback(f"signing the certificate of {self.inst.name}'s primary node for a "
                      "remote export")
        return remote_preparation(self.env, config, config.instances[self.inst.uuid])


class BackupExport(LogicalUnit[opcodes.OpBackupExport]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        if isinstance(self.op.target_node, str):
            return instance_and_node_locks(config, self.op.instance_name, self.op.target_node)
        inst = lookup(config.find_instance, self.op.instance_name)
        return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                LockRequest(locking.LEVEL_NODE, [inst.primary_node])]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        inst = lookup(config.find_instance, op.instance_name)
        self.remote: RemoteTarget | None = None
        if isinstance(op.target_node, str):
            target: model.Node | None = lookup(config.find_node, op.target_node)
        else:  # mode remote (the opcode checked its fields)
            target = None
            self.remote = check_remote_export(self.env, config, inst, op.x509_key_name,
                                              op.destination_x509_ca or "", op.target_node)
        source = config.nodes.get(inst.primary_node)
        if source is None:
            raise OpPrereqError(f"instance {inst.name}: its primary node is unknown")
        if not inst.disks:
            raise OpPrereqError(f"instance {inst.name} has no disks to export", "wrong_input")
        if target is not None and target.offline:
            raise OpPrereqError(f"target node {target.name} is offline", "wrong_state")
        if source.offline:
            raise OpPrereqError(f"the primary node {source.name} of {inst.name} is offline: "
                                "its disks cannot be read", "wrong_state")
        if op.remove_instance and not op.shutdown:
            raise OpPrereqError("can not remove instance without shutting it down before",
                                "wrong_input")
        self.live = not op.shutdown and inst.admin_state == "up"
        if self.live:
            self._check_live(inst)
        self.inst, self.source = inst, source
        self.target = target if target is not None else source  # (mode remote: unused)

    def _check_live(self, inst: model.Instance) -> None:
        """An export of the running `inst` reads a snapshot of each disk: refused where its
        disks cannot take one, and for a remote export (which streams the disks shut down)."""
        if self.remote is not None:
            raise OpPrereqError(f"instance {inst.name} runs: a remote export shuts it down; "
                                "drop shutdown=false", "wrong_input")
        why = snapshot_volumes.unsupported(inst)
        if why is not None:
            raise OpPrereqError(f"an export of the running {inst.name} without a shutdown "
                                f"reads a snapshot of each disk: {why}", "wrong_input")

    def dry_run_result(self) -> JobResult:
        if self.remote is not None:
            return [self.source.name, *(f"{d.address}:{d.port}" for d in self.remote.disks)]
        return [self.source.name, self.target.name]

    @classmethod
    def after_master_death(cls, op: opcodes.OpBackupExport) -> list[dict[str, object]]:
        """The cleanup of an export the master died in (the job queue's recovery submits
        it): no partial export left, the instance running when it should."""
        if op.cleanup or op.mode == "remote":
            return []  # remote: nothing partial here; an instance that should run is restarted
            # by the watcher
        return [{"OP_ID": "OP_BACKUP_EXPORT", "instance_name": op.instance_name,
                 "target_node": op.target_node, "cleanup": True}]

    def _clean_up(self) -> JobResult:
        config = self.env.store.load()
        inst, source, target = (config.instances[self.inst.uuid],
                                *(config.nodes[n.uuid] for n in (self.source, self.target)))
        partial = inst.name + PARTIAL
        if self.env.rpc.call(target, backup_calls.ExportRemove(name=partial)):
            self.feedback(f"removed the partial export {partial} on {target.name}")
        if snapshot_volumes.unsupported(inst) is None:
            self._remove_snapshot(config, inst, snapshot_volumes.named_volumes(
                inst, EXPORT_SNAPSHOT))
        listed = self.env.rpc.call(source, node_calls.InstanceList())
        if inst.admin_state == "up" and listed.get(inst.name) not in handover.RUNNING_STATES:
            self._start(config, inst, source)
        return None  # no export made

    def execute(self) -> JobResult:
        if self.op.cleanup:
            return self._clean_up()
        op, env = self.op, self.env
        config = env.store.load()  # as the locks hold it
        inst, source, target = (config.instances[self.inst.uuid],
                                *(config.nodes[n.uuid] for n in (self.source, self.target)))
        running = inst.admin_state == "up" and not self.live  # (to shut down and restart)
        if running:
            self._shut_down(config, inst, source)
        if self.remote is not None:
            results = self._export_remote(config, inst, source, self.remote, running)
        else:
            results = self._export_local(config, inst, source, target, running)
        if op.remove_instance:
            self.feedback(f"removing instance {inst.name}")
            remove_domain_and_disks(env, config, inst, op.ignore_remove_failures,
                                    self.feedback)
            forget_instance(env, inst, self.feedback)
        elif running:
            self._start(config, inst, source)
        if self.remote is None:
            self._remove_older_exports(config, inst.name, target)
        return [True, results]

    def _shut_down(self, config: model.ConfigData, inst: model.Instance, source: model.Node
                   ) -> None:
        self.feedback(f"shutting down instance {inst.name}")
        try:
            self.env.rpc.call(source, instance_calls.InstanceShutdown(
                name=inst.name, reason=self.op.reason, version=inst.serial_no,
                timeout=self.op.shutdown_timeout, claim=vmclaim.claim_for(config, inst)))
        except HerderError as err:
            raise OpExecError(f"could not shut down {inst.name} on {source.name}: "
                              f"{err}") from None

    def _export_local(self, config: model.ConfigData, inst: model.Instance,
                      source: model.Node, target: model.Node, running: bool) -> list[bool]:
        volumes = self._snapshot(config, inst) if self.live else None
        try:
            results = self._stream(config, inst, source, target, volumes)
            pruned = self.env.rpc.call(target, backup_calls.ExportFinalize(
                instance=inst.name, config_ini=exportconf.build(config, inst, int(time.time())),
                keep=self.op.keep))
        except HerderError as err:
            removed = self._undo(config, inst, source, target, running)
            left = "the partial export was removed" if removed else \
                f"remove the partial export {inst.name}{PARTIAL} on {target.name} yourself"
            raise OpExecError(f"export of {inst.name} to {target.name} failed: {err}; "
                              f"{left}") from None
        finally:
            if volumes is not None:
                self._remove_snapshot(config, inst, volumes)
            if not inst.disks_active:
                disks.shutdown_disks(self.env, config, inst, feedback=self.feedback)
        self.feedback(f"export of {inst.name} finished on {target.name}")
        for name in pruned:
            self.feedback(f"removed the older export {name} on {target.name} "
                          f"(keep {self.op.keep})")
        return results

    def _export_remote(self, config: model.ConfigData, inst: model.Instance,
                       source: model.Node, remote: RemoteTarget, running: bool) -> list[bool]:
        """Each disk straight into the other cluster's new instance; on failure the
        instance as it was (started again when it ran)."""
        try:
            results = remote_streams.send_disks(self.env, config, inst, source, remote.disks,
                                                remote.ca_pem, self.feedback)
        except HerderError as err:
            if running:
                try:
                    self._start(config, inst, source)
                except HerderError as start_err:
                    self.feedback(f"could not start {inst.name} again: {start_err}")
            raise OpExecError(f"remote export of {inst.name} failed: {err}") from None
        finally:
            if not inst.disks_active:
                disks.shutdown_disks(self.env, config, inst, feedback=self.feedback)
        self.feedback(f"remote export of {inst.name} finished")
        return results

    def _snapshot(self, config: model.ConfigData, inst: model.Instance
                  ) -> list[model.SnapshotVolume]:
        """A snapshot of each disk of the running `inst` for the export to read (one a dead
        master left removed first)."""
        self._remove_snapshot(config, inst, snapshot_volumes.named_volumes(inst,
                                                                           EXPORT_SNAPSHOT))
        self.feedback(f"instance {inst.name} runs: exporting a snapshot of each disk")
        return snapshot_volumes.take_volumes(self.env, config, inst, EXPORT_SNAPSHOT,
                                             self.feedback)

    def _remove_snapshot(self, config: model.ConfigData, inst: model.Instance,
                         volumes: list[model.SnapshotVolume]) -> None:
        left = snapshot_volumes.remove_volumes(self.env, config, inst, volumes, self.feedback)
        if left:
            self.feedback(f"could not remove the export's snapshot {', '.join(left)} on the "
                          f"primary node of {inst.name}: remove it yourself")

    def _stream(self, config: model.ConfigData, inst: model.Instance, source: model.Node,
                target: model.Node, volumes: list[model.SnapshotVolume] | None
                ) -> list[bool]:
        """Each disk (or its snapshot's volume of `volumes`) streamed to `target`."""
        snapshot = {volume.disk: volume for volume in volumes or []}
        results = []
        for index, disk in enumerate(inst.disks):
            self.feedback(f"exporting {disk.iv_name} ({disk.size} MiB) to {target.name}")
            started = time.monotonic()
            device = snapshot_volumes.volume_disk(disk, snapshot[disk.uuid]) \
                if disk.uuid in snapshot else None
            copied = stream_disk(self.env, config, inst, index, source, target, device)
            self.feedback(progress_line(disk.iv_name, copied, time.monotonic() - started))
            results.append(True)
        return results

    def _start(self, config: model.ConfigData, inst: model.Instance, source: model.Node
               ) -> None:
        self.feedback(f"starting instance {inst.name}")
        disks.assemble_disks(self.env, config, inst, ignore_secondaries=True,
                             feedback=self.feedback)
        self.env.rpc.call(source, instance_calls.InstanceStart(
            name=inst.name, reason=self.op.reason, version=inst.serial_no,
            instance=instance_payload(config, inst), claim=vmclaim.claim_for(config, inst)))

    def _undo(self, config: model.ConfigData, inst: model.Instance, source: model.Node,
              target: model.Node, running: bool) -> bool:
        """The partial export removed (False: it could not be); the instance started again
        when it ran."""
        removed = self._remove_partial(target, inst.name + PARTIAL)
        if running:
            try:
                self._start(config, inst, source)
            except HerderError as err:
                self.feedback(f"could not start {inst.name} again: {err}")
        return removed

    def _remove_partial(self, target: model.Node, partial: str) -> bool:
        """The partial export removed; tried again for PARTIAL_REMOVAL_WAIT seconds while the
        target does not answer (its daemon restarting after it died mid-stream: it removes
        the partial exports it holds as it starts, so the next try finds none)."""
        deadline = time.monotonic() + PARTIAL_REMOVAL_WAIT
        while True:
            try:
                self.env.rpc.call(target, backup_calls.ExportRemove(name=partial))
                return True
            except HerderError as err:
                if time.monotonic() >= deadline:
                    self.feedback(f"could not remove the partial export on {target.name}: "
                                  f"{err}")
                    return False
                self.feedback(f"{target.name} does not answer ({err}); trying again")
            time.sleep(2.0)

    def _remove_older_exports(self, config: model.ConfigData, name: str,
                              target: model.Node) -> None:
        """Ganeti keeps one export per instance: the other nodes' ones go."""
        for node in find_exports(self.env, config, name, self.feedback):
            if node.uuid == target.uuid:
                continue
            try:
                self.env.rpc.call(node, backup_calls.ExportRemove(name=name))
                self.feedback(f"removed the older export of {name} on {node.name}")
            except HerderError as err:
                self.feedback(f"could not remove the older export of {name} on {node.name}: "
                              f"{err}")


class BackupRemove(LogicalUnit[opcodes.OpBackupRemove]):
    """Every export of the instance, on every node (the instance itself may be gone: its
    name is then the export's)."""

    def check(self, config: model.ConfigData) -> None:
        try:
            self.name = config.find_instance(self.op.instance_name).name
        except HerderError:
            self.name = self.op.instance_name

    def execute(self) -> JobResult:
        config = self.env.store.load()
        holders = find_exports(self.env, config, self.name, self.feedback)
        if not holders:
            raise OpExecError(f"no export of {self.name} on any online node")
        for node in holders:
            self.env.rpc.call(node, backup_calls.ExportRemove(name=self.name))
            self.feedback(f"removed the export of {self.name} on {node.name}")
        return None
