"""Instance LUs: rename, parameter changes and query (config only), and the operations that
act on a node through the node RPC (start, shutdown, reboot, migrate, failover, remove)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, TypeVar

import msgspec

from herder.core import configdiff, diskobjects, model, params, verify, vmclaim
from herder.core.errors import ConfigError, HerderError, OpExecError, OpPrereqError
from herder.core.rpcdefs import disk_calls, instance_calls, node_calls
from herder.core.rpcdefs.payload import instance_payload
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import (
    convert,
    disk_modify,
    disks,
    fit,
    handover,
    hotplug,
    migration,
    nics,
    placement,
    replace,
)
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup
from herder.masterd.lu.common import (
    checked_new_name,
    forget_instance,
    instance_locks,
    kvm_verdict_feedback,
    remove_domain_and_disks,
    resets,
)


class InstanceRename(LogicalUnit[opcodes.OpInstanceRename]):
    """Ganeti's LUInstanceRename: refused while the instance runs; file and sharedfile disks
    move with the name (the config's paths, then `file_storage_dir_rename` on the primary);
    then the disks are assembled, every node's devices get the new owner text
    (`blockdev_setinfo`: LV tags), the OS's rename script runs, and the disks are shut down
    again. LV and DRBD names carry UUIDs, not the name: they stay. The domain takes the new
    name at the next start (noded defines it from the config)."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return instance_locks(config, self.op.instance_name, nodes=True, shared_nodes=False)

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        inst = lookup(config.find_instance, op.instance_name)
        node = config.nodes.get(inst.primary_node)
        if node is None or node.offline:
            raise OpPrereqError(f"Can't use offline node {config.node_name(inst.primary_node)}",
                                "wrong_state")
        if inst.admin_state == "up":
            raise OpPrereqError(f"Instance '{inst.name}' is marked to be up, cannot rename",
                                "wrong_state")
        try:
            listed = self.env.rpc.call(node, node_calls.InstanceList())
        except HerderError as err:
            raise OpPrereqError(f"cannot ask {node.name} whether {inst.name} runs: {err}",
                                "wrong_state") from None
        if listed.get(inst.name) in handover.RUNNING_STATES:
            raise OpPrereqError(f"Instance {inst.name} is running, cannot rename",
                                "wrong_state")
        op.new_name = checked_new_name(op.new_name, name_check=op.name_check,
                                       ip_check=op.ip_check, feedback=self.feedback)
        if any(i.name == op.new_name for i in config.instances.values()):
            raise OpPrereqError(f"instance {op.new_name!r} already exists", "already_exists")
        self.inst, self.node = inst, node

    def execute(self) -> JobResult:
        op = self.op
        old_name = self.inst.name
        old_dir = next((d for d in map(diskobjects.file_storage_dir, self.inst.disks) if d),
                       None)
        new_dir = None
        if old_dir is not None and op.new_name != old_name:
            new_dir = os.path.join(os.path.dirname(old_dir), op.new_name)
            # the node first: a refused rename leaves the config as it was
            try:
                self.env.rpc.call(self.node, disk_calls.FileStorageDirRename(
                    old_file_storage_dir=old_dir, new_file_storage_dir=new_dir))
            except HerderError as err:
                raise OpExecError(f"Could not rename on node {self.node.name} directory "
                                  f"'{old_dir}' to '{new_dir}': {err}") from None
        try:
            with self.env.store.update() as config:
                inst = config.instances[self.inst.uuid]
                inst.name = op.new_name
                for disk in inst.disks:
                    lid = disk.logical_id
                    if disk.dev_type in ("file", "sharedfile") and \
                            isinstance(lid, model.FileId) and new_dir is not None:
                        lid.path = os.path.join(new_dir, os.path.basename(lid.path))
                inst.touch()
        except HerderError:
            if new_dir is not None and old_dir is not None:
                self.env.rpc.call(self.node, disk_calls.FileStorageDirRename(
                    old_file_storage_dir=new_dir, new_file_storage_dir=old_dir))
            raise
        self._after_rename(old_name)
        return op.new_name

    def _after_rename(self, old_name: str) -> None:
        """Ganeti's StartInstanceDisks, blockdev_setinfo on every node, instance_run_rename,
        ShutdownInstanceDisks; failures past the rename are warnings (it is renamed)."""
        config = self.env.store.load()
        inst = config.instances[self.inst.uuid]
        if not inst.disks:
            return
        try:
            disks.assemble_disks(self.env, config, inst, feedback=self.feedback)
        except HerderError as err:
            self.feedback(f"Warning: could not activate the disks of {inst.name} to update "
                          f"their owner: {err}")
            return
        try:
            info = disks.info_text(inst)
            for index, disk in enumerate(inst.disks):
                for node_uuid in disks.disk_nodes(inst, disk):
                    node = config.nodes[node_uuid]
                    try:
                        self.env.rpc.call(node, disk_calls.BlockdevSetinfo(
                            disk=diskobjects.disk_object(config, inst, disk, node_uuid),
                            info=info))
                    except HerderError as err:
                        self.feedback(f"Warning: Error setting info on node {node.name} for "
                                      f"disk {index}: {err}")
            try:
                self.env.rpc.call(self.node, instance_calls.InstanceRunRename(
                    instance=instance_payload(config, inst), old_name=old_name))
            except HerderError as err:
                self.feedback(f"Warning: Could not run OS rename script for instance "
                              f"{inst.name} on node {self.node.name} (but the instance has "
                              f"been renamed): {err}")
        finally:
            disks.shutdown_disks(self.env, config, inst, feedback=self.feedback)


class InstanceSetParams(LogicalUnit[opcodes.OpInstanceSetParams]):
    """Ganeti's LUInstanceSetParams: disk changes (`disk_modify`), then a disk template
    conversion (`convert`), then the parameters (config only: they apply at the next
    start)."""

    disk_changes: list[disk_modify.DiskChange]
    secondary: model.Node | None = None

    hotplug = False

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        op = self.op
        inst = lookup(config.find_instance, op.instance_name)
        networks = LockRequest(locking.LEVEL_NETWORK, sorted(config.networks)) if op.nics \
            else None
        if not (op.disks or op.disk_template or op.runtime_mem or op.nics):
            return instance_locks(config, op.instance_name)
        nodes = set(inst.all_nodes)
        if op.remote_node:
            nodes.add(lookup(config.find_node, op.remote_node).uuid)
        requests = [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                    LockRequest(locking.LEVEL_NODE, sorted(nodes))]
        return requests + ([networks] if networks else [])

    def _runs(self, config: model.ConfigData, inst: model.Instance) -> bool:
        """Does the instance's domain run on its primary (Ganeti's IsInstanceRunning)? An
        offline primary is not asked (Ganeti warns and goes on)."""
        node = config.nodes.get(inst.primary_node)
        if node is None or node.offline:
            self.feedback("Primary node offline, ignoring check that instance is down")
            return False
        try:
            listed = self.env.rpc.call(node, node_calls.InstanceList())
        except HerderError as err:
            raise OpPrereqError(f"cannot ask {node.name} whether {inst.name} runs: {err}",
                                "wrong_state") from None
        return listed.get(inst.name) in handover.RUNNING_STATES

    def _check_disks(self, config: model.ConfigData, inst: model.Instance) -> None:
        op = self.op
        self.disk_changes = []
        if op.disk_template and op.disks:
            raise OpPrereqError("Disk template conversion and other disk changes not "
                                "supported at the same time", "wrong_input")
        removing = any(m[0] == disk_modify.REMOVE for m in op.disks)
        running = (removing or bool(op.disk_template)) and inst.admin_state != "up" \
            and self._runs(config, inst)
        if op.disks:
            self.disk_changes = disk_modify.plan(inst, op.disks, wait_for_sync=op.wait_for_sync,
                                                 hotplug=self.hotplug, running=running)
        if op.disk_template:
            if op.iallocator:
                raise OpPrereqError("choosing the new secondary by an iallocator is not "
                                    "supported; give it (-n NODE)", "wrong_input")
            remote = lookup(config.find_node, op.remote_node) if op.remote_node else None
            if remote is not None and op.disk_template != "drbd":
                self.feedback("Changing the disk template to a non-mirrored one, the "
                              "secondary node will be ignored")
                remote = None
            self.secondary = convert.check(config, inst, op.disk_template, remote,
                                           running=running)

    def _apply(self, inst: model.Instance) -> list[list[str]]:
        op = self.op
        changes: list[list[str]] = []
        if op.hvparams:
            inst.hvparams = params.apply_overrides(params.hv_family(inst.hypervisor), inst.hvparams,
                                                   resets(op.hvparams), instance_level=True)
            changes += [[f"hv/{k}", str(v)] for k, v in op.hvparams.items()]
        if op.beparams:
            inst.beparams = params.apply_overrides(params.BE_FAMILY, inst.beparams,
                                                   resets(op.beparams))
            changes += [[f"be/{k}", str(v)] for k, v in op.beparams.items()]
        if op.osparams:
            for key, value in resets(op.osparams).items():
                if value is None:
                    inst.osparams.pop(key, None)
                else:
                    inst.osparams[key] = str(value)
            changes += [[f"os/{k}", str(v)] for k, v in op.osparams.items()]
        if op.os_name:
            inst.os = op.os_name
            changes.append(["os", op.os_name])
        if op.offline is not None:
            if op.offline and inst.admin_state == "up":
                raise ConfigError(f"instance {inst.name} is running; shut it down before "
                                  "marking it offline")
            inst.admin_state = "offline" if op.offline else "down"
            changes.append(["admin_state", inst.admin_state])
        return changes

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        inst = lookup(config.find_instance, op.instance_name)
        if op.hotplug or op.hotplug_if_possible:
            self.hotplug = hotplug.supported(self.env, config, inst, required=op.hotplug,
                                             feedback=self.feedback)
        self._check_disks(config, inst)
        # a trial on a copy of the instance (`config` is the shared snapshot)
        copy = configdiff.decode_object("instances", configdiff.encode_object(inst))
        if op.nics:
            primary = config.nodes[inst.primary_node]
            nics.apply_mods(nics.NicContext.of(config, primary, lambda message: None,
                                               op.conflicts_check), copy, op.nics)
        try:
            self._apply(copy)
            # what the instance will run with: the change meets the inherited values
            if self.op.hvparams:
                params.check_relations(params.hv_family(copy.hypervisor),
                                       config.filled_hvparams(copy))
            proposed = config.filled_beparams(copy)
            if self.op.beparams:
                params.check_relations(params.BE_FAMILY, proposed)
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None
        if self.op.disks or self.op.beparams or self.op.disk_template:
            self._check_policy(config, inst, proposed)
        if self.op.runtime_mem:
            self._check_runtime_memory(config, inst, proposed)

    def _check_policy(self, config: model.ConfigData, inst: model.Instance,
                      proposed: dict[str, Any]) -> None:
        """Ganeti's policy check of the instance as it will be (its disks after the adds and
        removes, its new backend parameters at maxmem and at minmem), unless ignore_ipolicy:
        so the last disk cannot go while the policy asks for one."""
        sizes = [d.size for d in inst.disks]
        for change in self.disk_changes:
            if change.action == disk_modify.REMOVE:
                del sizes[change.index]
            elif change.action == disk_modify.ADD:
                sizes.insert(change.index, change.size)
        node = config.nodes[inst.primary_node]
        for memory in ("maxmem", "minmem"):
            spec = dataclasses.replace(
                verify.instance_spec(config, inst, beparams=proposed, memory_key=memory),
                disk_sizes=sizes, template=self.op.disk_template or inst.disk_template)
            ignored = fit.refuse_violations(config, node, spec, ignore=self.op.ignore_ipolicy)
            if ignored:
                self.feedback(f"instance policy violations ignored: {', '.join(ignored)}")
                return

    def _check_runtime_memory(self, config: model.ConfigData, inst: model.Instance,
                              proposed: dict[str, Any]) -> None:
        """Ganeti's CheckPrereq for runtime_mem: the instance runs on its primary, the size
        is within the proposed minmem..maxmem (unless force), and an increase fits in the
        primary's free memory (CheckNodeFreeMemory)."""
        wanted = self.op.runtime_mem
        assert wanted is not None  # the caller's test
        node = config.nodes.get(inst.primary_node)
        name = config.node_name(inst.primary_node)
        if node is None or node.offline:
            raise OpPrereqError(f"Error checking node {name}: Node is marked offline",
                                "environment_error")
        try:
            info = self.env.rpc.call(node, node_calls.NodeInfo(instances=True), timeout=60)
        except HerderError as err:
            raise OpPrereqError(f"Error checking node {name}: {err}",
                                "environment_error") from None
        running = (info.instances or {}).get(inst.name)
        if running is None:
            raise OpPrereqError(f"Instance {inst.name} is not running", "wrong_state")
        low, high = int(proposed["minmem"]), int(proposed["maxmem"])
        if not self.op.force and not low <= wanted <= high:
            raise OpPrereqError(f"Instance {inst.name} must have memory between {low} and "
                                f"{high} MB of memory unless --force is given")
        delta = wanted - running.memory
        if delta > 0 and delta > info.memory_free:
            raise OpPrereqError(f"Not enough memory on node {name} for ballooning memory for "
                                f"instance {inst.name}: needed {delta} MiB, available "
                                f"{info.memory_free} MiB", "insufficient_resources")

    def execute(self) -> JobResult:
        op = self.op
        config = self.env.store.load()
        inst = config.find_instance(op.instance_name)
        uuid = inst.uuid
        ballooned: list[Any] = []
        if op.runtime_mem:  # Ganeti's Exec: first, before the disk changes
            try:
                self.env.rpc.call(config.nodes[inst.primary_node],
                                  instance_calls.InstanceBalloonMemory(
                                      name=inst.name, reason=op.reason,
                                      version=inst.serial_no,
                                      claim=vmclaim.claim_for(config, inst),
                                      memory=op.runtime_mem))
            except HerderError as err:
                raise OpExecError(f"Cannot modify instance runtime memory: {err}") from None
            ballooned.append(["runtime_memory", op.runtime_mem])
        done = disk_modify.apply(self.env, uuid, self.disk_changes,
                                 wait_for_sync=op.wait_for_sync, feedback=self.feedback,
                                 hotplug=self.hotplug)
        if op.disk_template:
            self._convert(uuid, op.disk_template)
            done.append(["disk_template", op.disk_template])
        nic_changes: list[nics.NicChange] = []
        with self.env.store.update() as config:
            inst = config.instances[uuid]
            if op.nics:
                ctx = nics.NicContext.of(config, config.nodes[inst.primary_node], self.feedback,
                                         op.conflicts_check)
                nic_changes = nics.apply_mods(ctx, inst, op.nics)
                ctx.pools.keep()
            changes = self._apply(inst)
            if changes or nic_changes:
                inst.touch()
        nic_rows = nics.describe(nic_changes)
        if self.hotplug and nic_changes:
            nic_rows += hotplug.nic_changes(self.env, self.env.store.load(), uuid, nic_changes,
                                     feedback=self.feedback)
        return ballooned + done + nic_rows + changes

    def _convert(self, uuid: str, template: str) -> None:
        config = self.env.store.load()
        inst = config.instances[uuid]
        if not disks.shutdown_disks(self.env, config, inst, feedback=self.feedback):
            raise OpExecError("Cannot shutdown instance disks, unable to proceed with disk "
                              "template conversion")
        if template == "drbd":
            assert self.secondary is not None  # convert.check gave it
            convert.plain_to_drbd(self.env, uuid, self.secondary,
                                  wait_for_sync=self.op.wait_for_sync, feedback=self.feedback)
        else:
            convert.drbd_to_plain(self.env, uuid, self.feedback)


def disk_view(config: model.ConfigData, inst: model.Instance,
              disk: model.Disk) -> dict[str, Any]:
    """A disk as any RAPI reader may see it (Ganeti's LUInstanceQueryData): a DRBD disk's
    shared secret is None, its nodes, minors and port are given as `drbd_info`; the children
    likewise."""
    view: dict[str, Any] = model.to_builtins(disk)
    lid = disk.logical_id
    view["drbd_info"] = None
    if isinstance(lid, model.DrbdId):
        view["logical_id"]["secret"] = None
        first = 0 if lid.nodes[0] == inst.primary_node else 1
        view["drbd_info"] = {
            "primary_node": config.node_name(lid.nodes[first]),
            "primary_minor": lid.minors[first],
            "secondary_node": config.node_name(lid.nodes[1 - first]),
            "secondary_minor": lid.minors[1 - first], "port": lid.port}
    view["children"] = [disk_view(config, inst, child) for child in disk.children]
    return view


class InstanceQueryData(LogicalUnit[opcodes.OpInstanceQueryData]):
    def execute(self) -> JobResult:
        op = self.op
        config = self.env.store.load()
        wanted = [lookup(config.find_instance, n) for n in op.instances] if op.instances \
            else list(config.instances.values())
        result = {}
        for inst in wanted:
            result[inst.name] = {
                "name": inst.name, "uuid": inst.uuid, "config_state": inst.admin_state,
                "run_state": None if op.static else "unknown",
                "pnode": config.node_name(inst.primary_node),
                "snodes": [config.node_name(n) for n in inst.secondary_nodes],
                "os": inst.os, "hypervisor": inst.hypervisor,
                "disk_template": inst.disk_template,
                "hv_instance": inst.hvparams, "hv_actual": config.filled_hvparams(inst),
                "be_instance": inst.beparams, "be_actual": config.filled_beparams(inst),
                "os_instance": inst.osparams, "os_actual": config.filled_osparams(inst),
                "network_port": inst.network_port, "tags": inst.tags,
                "disks": [disk_view(config, inst, d) if op.static else
                          {**disk_view(config, inst, d),
                           **disks.disk_status(self.env, config, inst, d)}
                          for d in inst.disks],
                "nics": [model.to_builtins(n) for n in inst.nics],
                "ctime": inst.ctime, "mtime": inst.mtime, "serial_no": inst.serial_no,
            }
        return result


InstanceOpT = TypeVar("InstanceOpT", bound=opcodes.InstanceOpCode)


class _NodeAction(LogicalUnit[InstanceOpT]):
    """An instance operation carried out by the node daemon of its primary node."""

    new_admin_state: model.AdminState | None = None
    # set by check()
    config: model.ConfigData
    inst: model.Instance
    node: model.Node  # the primary

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return instance_locks(config, self.op.instance_name, nodes=True)

    def check(self, config: model.ConfigData) -> None:
        self.config = config
        self.inst = lookup(config.find_instance, self.op.instance_name)
        node = config.nodes.get(self.inst.primary_node)
        if node is None:
            raise OpPrereqError(f"instance {self.inst.name}: its primary node is unknown")
        self.node = node
        if self.inst.admin_state == "offline" and self.new_admin_state == "up":
            raise OpPrereqError(f"instance {self.inst.name} is offline; mark it online first",
                                "wrong_state")
        if self.node.offline and not getattr(self.op, "ignore_offline_nodes", False):
            raise OpPrereqError(f"node {self.node.name} is offline", "wrong_state")

    def claim(self) -> vmclaim.Claim:
        return vmclaim.claim_for(self.config, self.inst)

    def act(self) -> None:
        raise NotImplementedError

    def execute(self) -> JobResult:
        self.act()  # the node first: the config changes only when the node did it
        if self.new_admin_state and not getattr(self.op, "no_remember", False):
            with self.env.store.update() as config:
                inst = config.instances[self.inst.uuid]
                inst.admin_state = self.new_admin_state
                inst.admin_state_source = "admin"
                inst.disks_active = self.new_admin_state == "up" or inst.disks_active
                inst.touch()
        return None


class InstanceStartup(_NodeAction[opcodes.OpInstanceStartup]):
    new_admin_state = "up"

    def check(self, config: model.ConfigData) -> None:
        """Ganeti's LUInstanceStartup: an instance that does not run yet needs its minmem
        free on its primary (CheckNodeFreeMemory)."""
        super().check(config)
        if self.node.offline:  # ignore_offline_nodes: nothing is asked of it
            return
        info = fit.node_info(self.env, self.node, instances=True)
        if self.inst.name not in (info.instances or {}):
            be = params.fill(config.filled_beparams(self.inst), self.op.beparams)
            fit.check_free_memory(self.env, self.node, int(be["minmem"]),
                                  f"starting instance {self.inst.name}", info=info)

    def act(self) -> None:
        kvm_verdict_feedback(self.env, self.node, self.inst, self.feedback)
        self.env.rpc.call(self.node, instance_calls.InstanceStart(
            instance=instance_payload(self.config, self.inst), name=self.inst.name,
            reason=self.op.reason, version=self.inst.serial_no, claim=self.claim()))


class InstanceShutdown(_NodeAction[opcodes.OpInstanceShutdown]):
    new_admin_state = "down"

    def act(self) -> None:
        self.env.rpc.call(self.node, instance_calls.InstanceShutdown(
            instance=instance_payload(self.config, self.inst), name=self.inst.name,
            reason=self.op.reason, version=self.inst.serial_no, claim=self.claim(),
            timeout=self.op.timeout))


class InstanceReboot(_NodeAction[opcodes.OpInstanceReboot]):
    def act(self) -> None:
        self.env.rpc.call(self.node, instance_calls.InstanceReboot(
            instance=instance_payload(self.config, self.inst), name=self.inst.name,
            reason=self.op.reason, version=self.inst.serial_no, claim=self.claim(),
            type=self.op.reboot_type))


MoveOpT = TypeVar("MoveOpT", opcodes.OpInstanceMigrate, opcodes.OpInstanceFailover)


class _InstanceMove(_NodeAction[MoveOpT]):
    """Moving an instance to another node: to its DRBD secondary, or where the allocator (or
    the operator) says for shared storage."""

    live = True

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        inst = lookup(config.find_instance, self.op.instance_name)
        if placement.uses_allocator(inst, self.op.iallocator, self.op.target_node) or \
                getattr(self.op, "cleanup", False):
            # the allocator may choose any node; a cleanup may find the guest on any node
            return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                    LockRequest(locking.LEVEL_NODE, None)]
        nodes = set(inst.all_nodes)
        if self.op.target_node:
            nodes.add(lookup(config.find_node, self.op.target_node).uuid)
        return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                LockRequest(locking.LEVEL_NODE, sorted(nodes))]

    def _target(self, config: model.ConfigData) -> model.Node:
        op = self.op
        if op.iallocator and op.target_node:
            raise OpPrereqError("give a target node or an iallocator, not both", "wrong_input")
        if placement.uses_allocator(self.inst, op.iallocator, op.target_node):
            return placement.allocate_target(self.env, config, self.inst, op.iallocator,
                                             self.feedback)
        return placement.pick_target(config, self.inst, op.target_node)

    def check(self, config: model.ConfigData) -> None:
        super().check(config)
        self.target = self._target(config)
        if self.target.offline:
            raise OpPrereqError(f"target node {self.target.name} is offline", "wrong_state")


class InstanceMigrate(_InstanceMove[opcodes.OpInstanceMigrate]):
    """Live (or paused, --non-live) migration through libvirt, Ganeti's way
    (`masterd.lu.migration`); cleanup=True settles a failed one."""

    cleanup_target: model.Node | None = None  # cleanup: the node the migration went to

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        if op.live is not None and op.mode is not None:
            raise OpPrereqError("Only one of the 'live' and 'mode' parameters may be given",
                                "wrong_input")
        if op.cleanup and op.allow_failover:
            raise OpPrereqError("cleanup and allow_failover exclude each other", "wrong_input")
        if op.cleanup:
            # Ganeti's _ExecCleanup asks every online node where the guest runs; the target
            # is the DRBD secondary, the node given, or (shared storage) the one found
            _NodeAction.check(self, config)
            self.cleanup_target = (None if self.inst.disk_template in placement.ALLOCATED
                                   and not op.target_node else self._target(config))
            return
        super().check(config)
        if op.live is not None:
            self.live = op.live
        elif op.mode is not None:
            self.live = op.mode == "live"
        else:
            self.live = config.filled_hvparams(self.inst).get("migration_mode",
                                                              "live") == "live"

    def act(self) -> None:
        if self.op.cleanup:
            migration.cleanup(self.env, self.config, self.inst, self.cleanup_target,
                              reason=self.op.reason, say=self.feedback)
            return
        migration.migrate_or_failover(self.env, self.config, self.inst, self.target,
                                      live=self.live, allow_failover=self.op.allow_failover,
                                      allow_runtime_changes=self.op.allow_runtime_changes,
                                      reason=self.op.reason, say=self.feedback)


class InstanceFailover(_InstanceMove[opcodes.OpInstanceFailover]):
    """Shut down on the primary (forced when it is dead), start on the target (Ganeti's
    failover, `masterd.lu.migration.failover`)."""

    live = False

    def check(self, config: model.ConfigData) -> None:
        self.config = config
        self.inst = lookup(config.find_instance, self.op.instance_name)
        self.node = config.nodes[self.inst.primary_node]
        self.target = self._target(config)
        if self.target.offline:
            raise OpPrereqError(f"target node {self.target.name} is offline", "wrong_state")

    def act(self) -> None:
        migration.failover(self.env, self.config, self.inst, self.target,
                           reason=self.op.reason, say=self.feedback,
                           shutdown_timeout=self.op.shutdown_timeout,
                           ignore_consistency=self.op.ignore_consistency)


class InstanceRemove(_NodeAction[opcodes.OpInstanceRemove]):
    """Ganeti's LUInstanceRemove. With herder's `cleanup` (what the queue's recovery submits
    after the master died in a remote import, `lu/create`), only an instance whose creation
    never finished (`Instance.incomplete`) is removed: a creation that died before it
    recorded the instance, or one that finished, leaves nothing to do."""

    half_made = True  # (cleanup: whether there is a half-made instance to remove)
    _locked = True  # (cleanup: whether its lock was asked for: never removed without it)

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        if self.op.cleanup and self._half_made(config) is None:
            self._locked = False
            return []
        return super().declare_locks(config)

    def _half_made(self, config: model.ConfigData) -> model.Instance | None:
        try:
            found = config.find_instance(self.op.instance_name)
        except HerderError:
            return None
        return found if found.incomplete else None

    def check(self, config: model.ConfigData) -> None:
        # no primary-node checks: act() cleans up on every node of the instance
        self.config = config
        if self.op.cleanup:
            found = self._half_made(config) if self._locked else None
            self.half_made = found is not None
            if found is not None:
                self.inst = found
            return
        self.inst = lookup(config.find_instance, self.op.instance_name)

    def act(self) -> None:
        remove_domain_and_disks(self.env, self.config, self.inst, self.op.ignore_failures,
                                self.feedback)

    def execute(self) -> JobResult:
        if not self.half_made:
            self.feedback(f"no half-made instance {self.op.instance_name}: its creation "
                          "recorded none, or finished; nothing to remove")
            return None
        if self.op.cleanup:
            self.feedback(f"removing {self.inst.name}, which a remote import the master died "
                          "in left half-made")
        self.act()
        forget_instance(self.env, self.inst, self.feedback)
        return None


class InstanceStopStray(LogicalUnit[opcodes.OpInstanceStopStray]):
    """Stop the copy of an instance on a node that is not its primary (issue 18): only after
    the primary's node daemon confirmed that the primary's copy runs, so the only running copy
    is never the one stopped. Nothing to do when the node has become the primary meanwhile
    (a move finished before this job got the instance's lock)."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        inst = lookup(config.find_instance, self.op.instance_name)
        node = lookup(config.find_node, self.op.node_name)
        return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                LockRequest(locking.LEVEL_NODE, sorted({inst.primary_node, node.uuid}))]

    def check(self, config: model.ConfigData) -> None:
        self.config = config
        self.inst = lookup(config.find_instance, self.op.instance_name)
        self.node = lookup(config.find_node, self.op.node_name)
        primary = config.nodes.get(self.inst.primary_node)
        if primary is None:
            raise OpPrereqError(f"instance {self.inst.name}: its primary node is unknown")
        self.primary = primary
        if self.node.uuid != primary.uuid and primary.offline:
            raise OpPrereqError(f"the primary node {primary.name} of {self.inst.name} is "
                                "offline: its copy cannot be confirmed", "wrong_state")

    def execute(self) -> JobResult:
        inst, node, primary = self.inst, self.node, self.primary
        if node.uuid == primary.uuid:
            self.feedback(f"{node.name} is the primary node of {inst.name} now; nothing to stop")
            return None
        listed = self.env.rpc.call(primary, node_calls.InstanceList())
        state = listed.get(inst.name)
        if state not in handover.RUNNING_STATES:
            raise OpExecError(f"the copy of {inst.name} on its primary node {primary.name} is "
                              f"not running ({state or 'absent'}); not stopping the copy on "
                              f"{node.name}, which may be the only one")
        self.feedback(f"{inst.name} runs on its primary node {primary.name} ({state}); "
                      f"stopping the copy on {node.name}")
        stopped = self.env.rpc.call(node, instance_calls.InstanceStopStray(
            name=inst.name, reason=self.op.reason, version=inst.serial_no,
            claim=vmclaim.claim_for(self.config, inst)))
        return msgspec.to_builtins(stopped)


class InstanceActivateDisks(_NodeAction[opcodes.OpInstanceActivateDisks]):
    """Make an instance's disks available on its nodes (Ganeti's LUInstanceActivateDisks,
    also maintd's watcher-style repair of running instances whose disks are inactive):
    returns (node, iv_name, device path) per disk, as `gnt-instance activate-disks` prints."""

    def act(self) -> None:
        self.assembled = disks.assemble_disks(self.env, self.config, self.inst,
                                              feedback=self.feedback)

    def execute(self) -> JobResult:
        with self.env.store.update() as config:  # Ganeti marks them active first
            config.instances[self.inst.uuid].disks_active = True
        try:
            self.act()
        except HerderError:
            with self.env.store.update() as config:  # and inactive again when that failed
                config.instances[self.inst.uuid].disks_active = False
            raise
        return [list(entry) for entry in self.assembled]


class InstanceDeactivateDisks(_NodeAction[opcodes.OpInstanceDeactivateDisks]):
    """Shut an instance's disks down on its nodes (Ganeti's LUInstanceDeactivateDisks): only
    when it does not run (`force`: also when its primary cannot be asked, and errors of the
    primary are not fatal)."""

    def check(self, config: model.ConfigData) -> None:
        if self.op.force:  # Ganeti's: an offline primary too (its disks are skipped)
            self.config = config
            self.inst = lookup(config.find_instance, self.op.instance_name)
            self.node = config.nodes[self.inst.primary_node]
            return
        super().check(config)
        if self.inst.admin_state == "up" and not self.op.force:
            raise OpPrereqError(f"instance {self.inst.name} is running; shut it down before "
                                "deactivating its disks", "wrong_state")

    def act(self) -> None:
        if not self.op.force:
            listed = self.env.rpc.call(self.node, node_calls.InstanceList())
            if listed.get(self.inst.name) in handover.RUNNING_STATES:
                raise OpExecError(f"instance {self.inst.name} runs on {self.node.name}; "
                                  "cannot deactivate its disks")
        if not disks.shutdown_disks(self.env, self.config, self.inst,
                                    ignore_primary=self.op.force, feedback=self.feedback):
            raise OpExecError(f"could not shut down every disk of {self.inst.name}")

    def execute(self) -> JobResult:
        self.act()
        with self.env.store.update() as config:
            config.instances[self.inst.uuid].disks_active = False
        return None


class InstanceReinstall(_NodeAction[opcodes.OpInstanceReinstall]):
    """Recreate the OS on the instance's disks (it must be down); the OS may change."""

    def check(self, config: model.ConfigData) -> None:
        super().check(config)
        if self.inst.admin_state == "up":
            raise OpPrereqError(f"instance {self.inst.name} is running; shut it down first",
                                "wrong_state")

    def act(self) -> None:
        op = self.op
        payload = instance_payload(self.config, self.inst)
        if op.os_type:
            payload = msgspec.structs.replace(payload, os=op.os_type)
        self.env.rpc.call(self.node, instance_calls.InstanceOsAdd(
            instance=payload, name=self.inst.name, reason=op.reason,
            version=self.inst.serial_no, force_variant=op.force_variant))

    def execute(self) -> JobResult:
        op = self.op
        self.act()
        if op.os_type and op.os_type != self.inst.os:
            with self.env.store.update() as config:
                config.instances[self.inst.uuid].os = op.os_type
                config.instances[self.inst.uuid].touch()
        return None


class InstanceReplaceDisks(_NodeAction[opcodes.OpInstanceReplaceDisks]):
    """replace-disks: recreate the disks on the primary (-p, the "repair instance" of design
    2.1), on the secondary, or move the mirror to a new secondary (remote node / iallocator)."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        inst = lookup(config.find_instance, self.op.instance_name)
        return [LockRequest(locking.LEVEL_INSTANCE, [inst.uuid]),
                LockRequest(locking.LEVEL_NODE, None)]

    def check(self, config: model.ConfigData) -> None:
        self.config = config
        self.inst = lookup(config.find_instance, self.op.instance_name)
        self.node = config.nodes[self.inst.primary_node]
        if self.inst.disk_template != "drbd":
            raise OpPrereqError(f"instance {self.inst.name} is not DRBD-mirrored; "
                                "replace-disks needs a mirror", "wrong_input")

    def _auto(self) -> tuple[str, list[int]] | None:
        """replace_auto (Ganeti's TLReplaceDisks.CheckPrereq): the node whose disks report
        faulty local storage and those disks; None when no disk needs a replacement."""
        config, inst = self.config, self.inst
        if not disks.disks_activated(self.env, config, inst):
            raise OpPrereqError(f"Please run activate-disks on instance {inst.name} first",
                                "wrong_state")
        secondary = inst.secondary_nodes[0]
        faulty = {node_uuid: disks.faulty_disks(self.env, config, inst, config.nodes[node_uuid])
                  for node_uuid in (inst.primary_node, secondary)}
        if all(faulty.values()):
            raise OpPrereqError(f"Instance {inst.name} has faulty disks on more than one node"
                                " and can not be repaired automatically", "wrong_state")
        return next(((node, found) for node, found in faulty.items() if found), None)

    def act(self) -> None:
        """Ganeti's TLReplaceDisks.Exec: a stopped instance's disks are assembled for the
        replacement (secondaries' errors ignored) and shut down again afterwards."""
        auto = None
        if self.op.mode == "replace_auto" and not (self.op.remote_node or self.op.iallocator):
            auto = self._auto()
            if auto is None:
                self.feedback(f"No disks need replacement for instance '{self.inst.name}'")
                return
        activate = not self.inst.disks_active
        if activate:
            disks.assemble_disks(self.env, self.config, self.inst, ignore_secondaries=True,
                                 feedback=self.feedback)
        try:
            self._replace(auto)
        finally:
            if activate:
                fresh = self.env.store.load()
                disks.shutdown_disks(self.env, fresh, fresh.instances[self.inst.uuid],
                                     feedback=self.feedback)

    def _replace(self, auto: tuple[str, list[int]] | None) -> None:
        op = self.op
        if op.mode == "replace_new_secondary" or op.remote_node or op.iallocator:
            new = placement.choose_secondary(self.env, self.config, self.inst, op.remote_node,
                                             op.iallocator, self.feedback)
            replace.change_secondary(self.env, self.config, self.inst, new, self.feedback,
                                     early_release=op.early_release)
            return
        indices: list[int] | None
        if auto is not None:
            node_uuid, indices = auto
        else:
            node_uuid = self.inst.primary_node if op.mode == "replace_on_primary" \
                else self.inst.secondary_nodes[0]
            indices = op.disks or None
        replace.replace_disks_only(self.env, self.config, self.inst,
                                   self.config.nodes[node_uuid], indices=indices,
                                   early_release=op.early_release, feedback=self.feedback)

