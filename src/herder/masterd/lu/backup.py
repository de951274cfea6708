"""Backups (Ganeti's gnt-backup, cmdlib/backup.py): OP_BACKUP_PREPARE, OP_BACKUP_EXPORT,
OP_BACKUP_REMOVE. An export streams each disk of the instance, shut down, from its primary
node to the target node's export directory over the nodes' TLS (the transport of an instance
move: `noded.disk_transfer`), then writes Ganeti's config.ini there (`core.exportconf`) and
puts the export in place (`noded.exports`). A failure removes the partial export and leaves
the instance as it was (started again when it ran). Imports are OP_INSTANCE_CREATE's mode
`import` (`lu/create`); both stream through `lu/exports`."""

from __future__ import annotations

import time
from typing import Any

from herder.core import exportconf, model, vmclaim
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.core.rpcdefs import backup_calls, instance_calls, node_calls
from herder.core.rpcdefs.backup_calls import PARTIAL
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks, handover
from herder.masterd.lu.base import (
    JobResult,
    LockRequest,
    LogicalUnit,
    instance_and_node_locks,
    lookup,
)
from herder.masterd.lu.common import forget_instance, remove_domain_and_disks
from herder.masterd.lu.exports import (
    NOT_BUILT,
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
        if not isinstance(op.target_node, str):  # mode remote (the opcode checked its fields)
            check_remote_export(self.env, config, inst, op.x509_key_name,
                                op.destination_x509_ca or "", op.target_node)
            raise OpPrereqError(f"remote export of {inst.name}: {NOT_BUILT}", "wrong_input")
        target = lookup(config.find_node, op.target_node)
        source = config.nodes.get(inst.primary_node)
        if source is None:
            raise OpPrereqError(f"instance {inst.name}: its primary node is unknown")
        if not inst.disks:
            raise OpPrereqError(f"instance {inst.name} has no disks to export", "wrong_input")
        if target.offline:
            raise OpPrereqError(f"target node {target.name} is offline", "wrong_state")
        if source.offline:
            raise OpPrereqError(f"the primary node {source.name} of {inst.name} is offline: "
                                "its disks cannot be read", "wrong_state")
        if op.remove_instance and not op.shutdown:
            raise OpPrereqError("can not remove instance without shutting it down before",
                                "wrong_input")
        if not op.shutdown and inst.admin_state == "up":
            raise OpPrereqError(
                f"instance {inst.name} runs: exporting it without a shutdown needs a snapshot "
                f"of its {inst.disk_template} disks, which herder cannot take yet; export it "
                "shut down", "wrong_input")
        self.inst, self.source, self.target = inst, source, target

    def dry_run_result(self) -> JobResult:
        return [self.source.name, self.target.name]

    @classmethod
    def after_master_death(cls, op: opcodes.OpBackupExport) -> list[dict[str, Any]]:
        """The cleanup of an export the master died in (the job queue's recovery submits
        it): no partial export left, the instance running when it should."""
        if op.cleanup:
            return []
        return [{"OP_ID": "OP_BACKUP_EXPORT", "instance_name": op.instance_name,
                 "target_node": op.target_node, "cleanup": True}]

    def _clean_up(self) -> JobResult:
        config = self.env.store.load()
        inst, source, target = (config.instances[self.inst.uuid],
                                *(config.nodes[n.uuid] for n in (self.source, self.target)))
        partial = inst.name + PARTIAL
        if self.env.rpc.call(target, backup_calls.ExportRemove(name=partial)):
            self.feedback(f"removed the partial export {partial} on {target.name}")
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
        running = inst.admin_state == "up"
        if running:
            self.feedback(f"shutting down instance {inst.name}")
            try:
                env.rpc.call(source, instance_calls.InstanceShutdown(
                    name=inst.name, reason=op.reason, version=inst.serial_no,
                    timeout=op.shutdown_timeout, claim=vmclaim.claim_for(config, inst)))
            except HerderError as err:
                raise OpExecError(f"could not shut down {inst.name} on {source.name}: "
                                  f"{err}") from None
        try:
            results = self._stream(config, inst, source, target)
            pruned = env.rpc.call(target, backup_calls.ExportFinalize(
                instance=inst.name, config_ini=exportconf.build(config, inst, int(time.time())),
                keep=op.keep))
        except HerderError as err:
            removed = self._undo(config, inst, source, target, running)
            left = "the partial export was removed" if removed else \
                f"remove the partial export {inst.name}{PARTIAL} on {target.name} yourself"
            raise OpExecError(f"export of {inst.name} to {target.name} failed: {err}; "
                              f"{left}") from None
        finally:
            if not inst.disks_active:
                disks.shutdown_disks(env, config, inst, feedback=self.feedback)
        self.feedback(f"export of {inst.name} finished on {target.name}")
        for name in pruned:
            self.feedback(f"removed the older export {name} on {target.name} (keep {op.keep})")
        if op.remove_instance:
            self.feedback(f"removing instance {inst.name}")
            remove_domain_and_disks(env, config, inst, op.ignore_remove_failures,
                                    self.feedback)
            forget_instance(env, inst, self.feedback)
        elif running:
            self._start(config, inst, source)
        self._remove_older_exports(config, inst.name, target)
        return [True, results]

    def _stream(self, config: model.ConfigData, inst: model.Instance, source: model.Node,
                target: model.Node) -> list[bool]:
        results = []
        for index, disk in enumerate(inst.disks):
            self.feedback(f"exporting {disk.iv_name} ({disk.size} MiB) to {target.name}")
            started = time.monotonic()
            copied = stream_disk(self.env, config, inst, index, source, target)
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
