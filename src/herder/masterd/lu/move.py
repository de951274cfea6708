"""OP_INSTANCE_MOVE: move an instance whose disks live on its node alone (plain, file) to another
node, copying the disks' bytes over the network, in Ganeti's order (cmdlib/instance.py
LUInstanceMove): shut it down on the source, create the disks on the target, copy each disk
(the target prepares an import, the source streams its device to the target's noded:
`noded.disk_transfer`), point the config at the target, remove the source's copy (domain and
disks), start it on the target when it was up.

A move finishes or rolls back to one copy of the disks (issue 35):
- a failure before the config points at the target (the disks could not be made there, a copy
  failed) removes what was made on the target and leaves the instance on the source, started
  again when it was up;
- a copy an earlier, interrupted move left on the target (the config says the target holds
  none of the instance's disks, and their names are the instance's own) is removed before the
  disks are made there, so a retry works;
- a move the master died in (its job "running" when masterd started again) is followed by a
  `cleanup` move (`after_master_death`, submitted by the job queue's recovery): the config
  says where the instance is, its disks are removed from the other node (the target when the
  switch had not happened, the other nodes of its group when it had) and it is started on
  its primary when it is up and does not run (compat row B48)."""

from __future__ import annotations

from herder.core import diskobjects, model, ports, verify, vmclaim
from herder.core.errors import HerderError, OpExecError, OpPrereqError
from herder.core.rpcdefs import disk_calls, instance_calls, node_calls
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks, fit, handover
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, MasterEnv, lookup

# Ganeti's DTS_COPYABLE: the templates whose disks a move copies
COPYABLE = frozenset({"plain", "file"})
COPY_TIMEOUT = 6 * 3600.0  # seconds for one disk's copy


def copy_disk(env: MasterEnv, config: model.ConfigData, inst: model.Instance, index: int,
              source: model.Node, target: model.Node) -> disk_calls.Transferred:
    """Copy one disk's bytes from `source` to the same disk on `target` (made already)."""
    disk = inst.disks[index]
    prepared = env.rpc.call(target, disk_calls.BlockdevImportPrepare(
        disk=diskobjects.disk_object(config, inst, disk, target.uuid), instance=inst.name))
    return env.rpc.call(source, disk_calls.BlockdevExport(
        disk=diskobjects.disk_object(config, inst, disk, source.uuid), instance=inst.name,
        token=prepared.token,
        target=disk_calls.ExportTarget(name=target.name, address=target.primary_ip,
                                       port=getattr(env.rpc, "port", ports.NODED))),
        timeout=COPY_TIMEOUT)


class InstanceMove(LogicalUnit[opcodes.OpInstanceMove]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        inst = lookup(config.find_instance, self.op.instance_name)
        target = lookup(config.find_node, self.op.target_node)
        nodes = {inst.primary_node, target.uuid}
        if self.op.cleanup and target.uuid == inst.primary_node:
            nodes |= {n.uuid for n in others_in_group(config, inst)}
        return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                LockRequest(locking.LEVEL_NODE, sorted(nodes))]

    def check(self, config: model.ConfigData) -> None:
        inst = lookup(config.find_instance, self.op.instance_name)
        target = lookup(config.find_node, self.op.target_node)
        source = config.nodes.get(inst.primary_node)
        if source is None:
            raise OpPrereqError(f"instance {inst.name}: its primary node is unknown")
        if inst.disk_template not in COPYABLE:
            raise OpPrereqError(
                f"instance {inst.name} has {inst.disk_template} disks; a move copies plain "
                "and file disks (the others move with failover or migrate)", "wrong_input")
        self.inst, self.source, self.target = inst, source, target
        if self.op.cleanup:
            return
        if target.uuid == source.uuid:
            raise OpPrereqError(f"instance {inst.name} is already on {target.name}",
                                "wrong_input")
        if target.offline or target.drained or not target.vm_capable:
            raise OpPrereqError(f"target node {target.name} is offline, drained or not vm "
                                "capable", "wrong_state")
        if source.offline:
            raise OpPrereqError(f"the primary node {source.name} of {inst.name} is offline: "
                                "its disks cannot be copied", "wrong_state")
        # Ganeti's LUInstanceMove: the target's group policy, its free memory for a guest
        # that will run there
        ignored = fit.refuse_violations(config, target, verify.instance_spec(config, inst),
                                        ignore=self.op.ignore_ipolicy)
        if ignored:
            self.feedback(f"instance policy violations ignored: {', '.join(ignored)}")
        if inst.admin_state == "up":
            fit.check_free_memory(
                self.env, target, int(config.filled_beparams(inst)["maxmem"]),
                f"failing over instance {inst.name}")

    def dry_run_result(self) -> JobResult:
        return [self.source.name, self.target.name]

    @classmethod
    def after_master_death(cls, op: opcodes.OpInstanceMove) -> list[dict[str, object]]:
        """The cleanup of a move the master died in (the job queue's recovery submits it)."""
        return [{"OP_ID": "OP_INSTANCE_MOVE", "instance_name": op.instance_name,
                 "target_node": op.target_node, "cleanup": True}]

    def execute(self) -> JobResult:
        if self.op.cleanup:
            return self._clean_up()
        op, env = self.op, self.env
        config = env.store.load()
        inst = config.instances[self.inst.uuid]
        source, target = config.nodes[self.source.uuid], config.nodes[self.target.uuid]
        running = inst.admin_state == "up"
        self.feedback(f"shutting down {inst.name} on {source.name}")
        try:
            env.rpc.call(source, instance_calls.InstanceShutdown(
                name=inst.name, reason=op.reason, version=inst.serial_no,
                timeout=op.shutdown_timeout, claim=vmclaim.claim_for(config, inst)))
        except HerderError as err:
            if not op.ignore_consistency:
                raise OpExecError(f"could not shut down {inst.name} on {source.name}: "
                                  f"{err}") from None
            self.feedback(f"could not shut down {inst.name} on {source.name}, proceeding "
                          f"anyway (make sure it is down): {err}")
        try:
            # a copy an interrupted move left there: not in the config, the instance's names
            disks.remove_disks(env, config, inst, target=target, feedback=lambda _: None)
            disks.create_disks(env, config, inst, target=target, feedback=self.feedback)
            for index, disk in enumerate(inst.disks):
                copied = copy_disk(env, config, inst, index, source, target)
                self.feedback(f"{disk.iv_name}: {copied.bytes} bytes copied to "
                              f"{target.name}")
        except HerderError as err:
            self.feedback("the disks could not be made or copied on the target, aborting")
            disks.remove_disks(env, config, inst, target=target, feedback=self.feedback)
            if running:
                env.rpc.call(source, instance_calls.InstanceStart(
                    name=inst.name, reason=op.reason, version=inst.serial_no,
                    instance=instance_payload(config, inst),
                    claim=vmclaim.claim_for(config, inst)))
            raise OpExecError(f"errors during the disk copy of {inst.name} to {target.name}: "
                              f"{err}; it stays on {source.name}") from None
        with env.store.update() as fresh:
            moved = fresh.instances[inst.uuid]
            moved.primary_node = target.uuid
            moved.touch()
        self._retire(inst, source)
        self._start_on_primary(running)
        return target.name

    def _retire(self, old: model.Instance, node: model.Node) -> bool:
        """Remove the instance's copy on `node`, not its primary (any more): its domain, then
        its disks (as they were named in `old`); False when something stayed."""
        config = self.env.store.load()
        moved = config.instances[old.uuid]
        try:
            self.env.rpc.call(node, instance_calls.InstanceStopStray(
                name=moved.name, reason=self.op.reason, version=moved.serial_no,
                claim=vmclaim.claim_for(config, moved)))
        except HerderError as err:
            self.feedback(f"could not remove the domain on {node.name}: {err}")
        self.feedback(f"removing the disks on the original node {node.name}")
        return disks.remove_disks(self.env, config, old, target=node, feedback=self.feedback)

    def _start_on_primary(self, running: bool) -> None:
        """Start (or only define) the instance on its primary node."""
        config = self.env.store.load()
        moved = config.instances[self.inst.uuid]
        primary = config.nodes[moved.primary_node]
        payload = instance_payload(config, moved)
        claim = vmclaim.claim_for(config, moved)
        if running:
            self.feedback(f"starting {moved.name} on {primary.name}")
            disks.assemble_disks(self.env, config, moved, ignore_secondaries=True,
                                 feedback=self.feedback)
            self.env.rpc.call(primary, instance_calls.InstanceStart(
                name=moved.name, reason=self.op.reason, version=moved.serial_no,
                instance=payload, claim=claim))
        else:
            self.env.rpc.call(primary, instance_calls.InstanceDefine(
                name=moved.name, reason=self.op.reason, version=moved.serial_no,
                instance=payload, claim=claim))

    def _clean_up(self) -> JobResult:
        """One copy again after a move the master died in: the config says where the
        instance is; its copies elsewhere go, and it runs on its primary when it is up."""
        config = self.env.store.load()
        inst = config.instances[self.inst.uuid]
        primary = config.nodes[inst.primary_node]
        finished = primary.uuid == self.target.uuid
        others = others_in_group(config, inst) if finished else [self.target]
        self.feedback(f"cleaning up the move of {inst.name}: it is on {primary.name} "
                      f"({'moved' if finished else 'not moved'}); removing its copies on "
                      f"{', '.join(n.name for n in others) or 'no other node'}")
        complete = all([self._retire(inst, node) for node in others if not node.offline])
        listed = self.env.rpc.call(primary, node_calls.InstanceList())
        runs = listed.get(inst.name) in handover.RUNNING_STATES
        if inst.admin_state == "up" and not runs:
            self._start_on_primary(True)
        if not complete:
            raise OpExecError(f"{inst.name} is on {primary.name}, but a copy elsewhere could "
                              "not be removed; run the cleanup again once its node answers")
        return primary.name


def others_in_group(config: model.ConfigData, inst: model.Instance) -> list[model.Node]:
    """The VM-capable nodes of the instance's group but its primary: where a move the master
    died in may have left a copy (the config no longer says which was the source)."""
    primary = config.nodes[inst.primary_node]
    return sorted((n for n in config.nodes.values() if n.group == primary.group
                   and n.vm_capable and n.uuid != primary.uuid), key=lambda n: n.name)
