"""Cluster-level LUs: OP_CLUSTER_SET_PARAMS, OP_CLUSTER_REDIST_CONF, OP_CLUSTER_VERIFY_GROUP."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec

from herder import __version__
from herder.core import diskobjects, model, nodeverify, params, uidpool, verify
from herder.core.diskobjects import BlockDevStatus, Disk
from herder.core.errors import ConfigError, HerderError, OpPrereqError
from herder.core.noderpc import call_many
from herder.core.rpcdefs import disk_calls, node_calls
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import candidates, disks
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup
from herder.masterd.lu.common import apply_ipolicy, redistribute, resets


def apply_collectors(c: model.Cluster, changes: Mapping[str, Mapping[str, object]]) -> None:
    """Change data collector settings (checked at submission); a new `interval` re-derives
    unset bounds."""
    for name, settings in changes.items():
        data = msgspec.to_builtins(c.data_collectors.get(name, model.CollectorSettings()))
        for key, value in settings.items():
            if key == "active":
                data[key] = params.coerce(params.ParamSpec(key, "bool", True), value)
            elif value is None:
                data[key] = model.CollectorSettings().interval if key == "interval" else None
            else:
                data[key] = params.coerce(params.ParamSpec(key, "float", 0.0), value)
        if "interval" in settings:
            for bound in ("min_interval", "max_interval"):
                if bound not in settings:
                    data[bound] = None
        try:
            c.data_collectors[name] = msgspec.convert(data, model.CollectorSettings)
        except msgspec.ValidationError as err:
            raise ConfigError(f"data collector {name}: {err}") from None


# maintenance settings an opcode field maint_<name> changes
MAINT_SETTINGS = ("enabled", "harep", "round_delay", "balance", "balance_threshold",
                  "balance_disk_moves", "balance_dynamic_load", "node_recovery")


def apply_os_lists(op: opcodes.OpClusterSetParams, c: model.Cluster) -> None:
    """Ganeti's hidden_os / blacklisted_os changes: [[add|remove, os], ...] (adding one
    listed, or removing one not listed, changes nothing, as Ganeti)."""
    for changes, listed in ((op.hidden_os, c.hidden_os), (op.blacklisted_os, c.blacklisted_os)):
        for action, os_name in changes or []:
            if action == "add" and os_name not in listed:
                listed.append(os_name)
            elif action == "remove" and os_name in listed:
                listed.remove(os_name)


class ClusterSetParams(LogicalUnit[opcodes.OpClusterSetParams]):
    REQ_BGL = True

    def execute(self) -> JobResult:
        op = self.op
        with self.env.store.update() as config:
            self.apply(op, config)
            # Ganeti's AdjustCandidatePool after a pool size change: a larger pool is filled
            promoted = candidates.maintain(config) if op.candidate_pool_size is not None else []
        candidates.announce(self.env, promoted, self.feedback)
        return None

    def check(self, config: model.ConfigData) -> None:
        # Everything is validated by applying the change to a copy.
        op = self.op
        copy = model.decode(model.encode(config))
        try:
            self.apply(op, copy)
            model.revalidate(copy)
            self.check_relations(op, copy.cluster)
        except ConfigError as err:
            raise OpPrereqError(str(err)) from None

    @staticmethod
    def check_relations(op: opcodes.OpClusterSetParams, c: model.Cluster) -> None:
        """The relations between parameters (Ganeti's CheckParameterSyntax) of the families
        this change touches, on the cluster's new filled values."""
        for hv in op.hvparams or {}:
            params.check_relations(params.hv_family(hv), c.hvparams.get(hv, {}))
        for os_name, per_hv in (op.os_hvp or {}).items():
            for hv in per_hv:
                params.check_relations(params.hv_family(hv), params.fill(
                    c.hvparams.get(hv, {}), c.os_hvp.get(os_name, {}).get(hv)))
        if op.beparams:
            params.check_relations(params.BE_FAMILY, c.beparams)
        if op.nicparams:
            params.check_relations(params.NIC_FAMILY, c.nicparams)

    @staticmethod
    def apply(op: opcodes.OpClusterSetParams, config: model.ConfigData) -> None:
        c = config.cluster
        apply_os_lists(op, c)
        if op.uid_pool is not None:
            c.uid_pool = uidpool.normalise(op.uid_pool)
        if op.add_uids:
            c.uid_pool = uidpool.add(c.uid_pool, op.add_uids)
            uidpool.check_size(c.uid_pool)
        if op.remove_uids:
            c.uid_pool = uidpool.remove(c.uid_pool, op.remove_uids)
        for hv, changes in (op.hvparams or {}).items():
            c.hvparams[hv] = params.apply_overrides(params.hv_family(hv), c.hvparams.get(hv, {}),
                                                    resets(changes))
        for os_name, per_hv in (op.os_hvp or {}).items():
            target = c.os_hvp.setdefault(os_name, {})
            for hv, changes in per_hv.items():
                target[hv] = params.apply_overrides(params.hv_family(hv), target.get(hv, {}),
                                                    resets(changes), instance_level=True)
        if op.beparams:
            be = op.beparams.get("default", op.beparams) if "default" in op.beparams \
                and isinstance(op.beparams["default"], dict) else op.beparams
            c.beparams = params.apply_overrides(params.BE_FAMILY, c.beparams, resets(be))
        if op.nicparams:
            default = op.nicparams.get("default")
            nic = default if isinstance(default, dict) else op.nicparams
            c.nicparams = params.apply_overrides(params.NIC_FAMILY, c.nicparams, resets(nic))
        if op.ndparams:
            c.ndparams = params.apply_overrides(params.ND_FAMILY, c.ndparams, resets(op.ndparams))
        for dt, changes in (op.diskparams or {}).items():
            c.diskparams[dt] = params.apply_overrides(params.disk_family(dt),
                                                      c.diskparams.get(dt, {}),
                                                      resets(changes))
        for os_name, changes in (op.osparams or {}).items():
            current = dict(c.osparams.get(os_name, {}))
            for key, value in resets(changes).items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = str(value)
            c.osparams[os_name] = current
        if op.ipolicy:
            apply_ipolicy(c.ipolicy, op.ipolicy)
        if op.enabled_hypervisors is not None:
            c.enabled_hypervisors = list(op.enabled_hypervisors)
        if op.enabled_disk_templates is not None:
            c.enabled_disk_templates = list(op.enabled_disk_templates)
        if op.master_netdev is not None:
            c.master_netdev = op.master_netdev
        if op.candidate_pool_size is not None:
            c.candidate_pool_size = op.candidate_pool_size
        if op.master_lease_ttl is not None:
            c.master_lease_ttl = op.master_lease_ttl
        if op.rapi_anonymous_reads is not None:
            c.rapi_anonymous_reads = op.rapi_anonymous_reads
        if op.default_iallocator is not None:
            names = [op.default_iallocator] if op.default_iallocator else []
            c.default_iallocators = {kind: list(names) for kind in model.IALLOCATOR_REQUEST_TYPES}
        if op.default_iallocator_params is not None:
            c.default_iallocator_params = dict(op.default_iallocator_params)
        if op.default_iallocators is not None:
            c.default_iallocators.update({k: list(v) for k, v in op.default_iallocators.items()})
        collector_changes: dict[str, dict[str, Any]] = {}
        for name, active in (op.enabled_data_collectors or {}).items():
            collector_changes.setdefault(name, {})["active"] = active
        for name, usec in (op.data_collector_interval or {}).items():
            collector_changes.setdefault(name, {})["interval"] = float(usec) / 1e6
        for name, settings in (op.data_collectors or {}).items():
            collector_changes.setdefault(name, {}).update(settings)
        apply_collectors(c, collector_changes)
        maint = config.maintenance
        before = msgspec.to_builtins(maint)
        for field in MAINT_SETTINGS:
            value = getattr(op, f"maint_{field}")
            if value is not None:
                setattr(maint, field, value)
        if op.maint_node_failure_time is not None:  # 0: maintd's --node-failure-time again
            maint.node_failure_time = op.maint_node_failure_time or None
        if op.diagnose_data_collector_filename is not None:
            if "/" in op.diagnose_data_collector_filename:
                raise ConfigError("the diagnose command is a file name, without path separators")
            maint.diagnose_command = op.diagnose_data_collector_filename
        if msgspec.to_builtins(maint) != before:
            maint.touch()
        if op.name:
            c.name = op.name
        c.touch()


class ClusterRedistConf(LogicalUnit[opcodes.OpClusterRedistConf]):
    """Ganeti's LUClusterRedistConf: push everything (with the cluster secrets) to every
    online node now."""

    def execute(self) -> JobResult:
        results = redistribute(self.env, self.env.store.load(), full=True)
        for name, result in results.items():
            for error in result["errors"]:
                self.feedback(f"{name}: {error}")
        return results



class ClusterVerifyGroup(LogicalUnit[opcodes.OpClusterVerifyGroup]):
    """Ganeti's LUClusterVerifyGroup, the part that asks the node daemons: every online
    VM-capable node of the group lists its domains (`instance_list`), and `core.verify.running`
    judges them against the config. Instances and nodes are locked shared, so a move the master
    is running finishes first (its target's copy is not reported)."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        lookup(config.find_group, self.op.group_name)
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODE, None, shared=True)]

    def check(self, config: model.ConfigData) -> None:
        self.group = lookup(config.find_group, self.op.group_name)

    def _disks(self, config: model.ConfigData, node: model.Node, instances: list[model.Instance]
               ) -> tuple[dict[str, tuple[str, bool, bool]] | str | None,
                          dict[str, list[tuple[bool, BlockDevStatus | str]]] | str | None]:
        """What `node` says of the disks it holds: its LVs in the VGs they use (None: no LV
        is expected here) and per instance each disk's (success, status) (None: no disk)."""
        owners: list[str] = []
        objects: list[Disk] = []
        vgs: set[str] = set()
        for inst in instances:
            for disk in inst.disks:
                if node.uuid not in disks.disk_nodes(inst, disk):
                    continue
                owners.append(inst.uuid)
                objects.append(diskobjects.disk_object(config, inst, disk, node.uuid))
                vgs |= {volume.split("/", 1)[0] for volume in verify.instance_lvs(disk)}
        # Ganeti's NV_LVLIST: the cluster's VG too, when an LVM template is enabled
        # (utils.IsLvmEnabled: a cluster without one has no VG to ask the nodes about)
        if config.cluster.volume_group_name and params.DTS_LVM.intersection(
                config.cluster.enabled_disk_templates):
            vgs.add(config.cluster.volume_group_name)
        volumes: dict[str, tuple[str, bool, bool]] | str | None = None
        if vgs:
            try:
                volumes = self.env.rpc.call(node, disk_calls.LvList(vg_names=sorted(vgs)),
                                            timeout=30)
            except HerderError as err:
                volumes = str(err)
        if not objects:
            return volumes, None
        try:
            found = self.env.rpc.call(node, disk_calls.BlockdevGetmirrorstatusMulti(
                disks=objects))
        except HerderError as err:
            return volumes, str(err)
        statuses: dict[str, list[tuple[bool, BlockDevStatus | str]]] = {}
        for owner, entry in zip(owners, found, strict=False):
            statuses.setdefault(owner, []).append(entry)
        return volumes, statuses

    def execute(self) -> JobResult:
        config = self.env.store.load()
        asked = [n for n in sorted(config.nodes.values(), key=lambda n: n.name)
                 if n.group == self.group.uuid and not n.offline and n.vm_capable]
        # all nodes at once, as Ganeti's multi-node RPC: a dead node costs one timeout
        answers: dict[str, dict[str, str] | str] = {
            uuid: str(answer) if isinstance(answer, HerderError) else answer
            for uuid, answer in call_many(self.env.rpc, asked,
                                          lambda node: node_calls.InstanceList()).items()}
        mine = [i for i in config.instances.values()
                if (g := config.instance_group(i)) is not None and g.uuid == self.group.uuid]
        findings = verify.running(config, answers, mine)
        # the disks, on the nodes that answered (Ganeti's _CollectDiskInfo, NV_LVLIST)
        answered = [n for n in asked if isinstance(answers[n.uuid], dict)]
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(answered)))) as pool:
            disk_answers = dict(zip((n.uuid for n in answered),
                                    pool.map(lambda n: self._disks(config, n, mine), answered),
                                    strict=True))
        volumes = {uuid: lvs for uuid, (lvs, _) in disk_answers.items() if lvs is not None}
        statuses = {uuid: said for uuid, (_, said) in disk_answers.items() if said is not None}
        findings += verify.disk_status_findings(config, mine, volumes, statuses)
        findings += verify.orphan_findings(config, volumes)
        findings += self._node_checks(config, answered, mine)
        return [{"severity": f.severity, "code": f.code, "object": f.object,
                 "message": f.message} for f in findings]

    def _node_checks(self, config: model.ConfigData, nodes: list[model.Node],
                     instances: list[model.Instance]) -> list[verify.Finding]:
        """Ganeti's node_verify on the nodes that answered, judged by `core.nodeverify`
        (VG and PVs, bridges, DRBD, storage paths, OSes, hypervisor, clock, certificates)."""
        asked = {node.uuid: nodeverify.node_verify_request(config, node, instances)
                 for node in nodes}
        start = time.time()
        said = call_many(self.env.rpc, nodes, lambda node: asked[node.uuid])
        window = nodeverify.Window(start=start, end=time.time())
        answers: dict[str, node_calls.NodeVerifyAnswer | str] = {
            uuid: str(answer) if isinstance(answer, HerderError) else answer
            for uuid, answer in said.items()}
        findings = [verify.Finding("error", "ENODERPC", f"node {config.node_name(uuid)}",
                                   f"while verifying the node: {answer}")
                    for uuid, answer in sorted(answers.items(),
                                               key=lambda kv: config.node_name(kv[0]))
                    if isinstance(answer, str)]
        return findings + nodeverify.node_verify_findings(config, asked, answers, window,
                                                          __version__)


class ClusterRepairDiskSizes(LogicalUnit[opcodes.OpClusterRepairDiskSizes]):
    """Ganeti's LUClusterRepairDiskSizes: each disk's size as its primary node's volume
    manager reports it (the data LV of plain and DRBD disks, `lv_list`), written to the config
    where it differs. Disks of other templates are reported as not checked (herder's nodes
    have no size query for them). Result: [[instance, disk index, "size", new MiB], ...]."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODE, None, shared=True)]

    def check(self, config: model.ConfigData) -> None:
        self.instances = [lookup(config.find_instance, name) for name in self.op.instances] \
            if self.op.instances else sorted(config.instances.values(), key=lambda i: i.name)

    def dry_run_result(self) -> JobResult:
        return [i.name for i in self.instances]

    def execute(self) -> JobResult:
        config = self.env.store.load()
        sizes: dict[str, dict[str, tuple[str, bool, bool]] | None] = {}
        changes: list[list[Any]] = []
        for inst in self.instances:
            node = config.nodes[inst.primary_node]
            if node.offline:
                self.feedback(f"{inst.name}: primary node {node.name} is offline, skipped")
                continue
            if node.uuid not in sizes:
                try:
                    sizes[node.uuid] = self.env.rpc.call(node, disk_calls.LvList(), timeout=30)
                except HerderError as err:
                    self.feedback(f"node {node.name}: cannot list its volumes: {err}")
                    sizes[node.uuid] = None
            volumes = sizes[node.uuid]
            if volumes is None:
                continue
            for index, disk in enumerate(inst.disks):
                data = verify.instance_lvs(disk)[:1]
                if not data:
                    self.feedback(f"{inst.name} disk/{index}: a {disk.dev_type} disk, not "
                                  "checked")
                    continue
                entry = volumes.get(data[0])
                if entry is None:
                    self.feedback(f"{inst.name} disk/{index}: volume {data[0]} not found on "
                                  f"{node.name}")
                    continue
                size = int(float(entry[0]))
                if size != disk.size:
                    self.feedback(f"{inst.name} disk/{index}: size {disk.size} MiB in the "
                                  f"config, {size} MiB on {node.name}")
                    changes.append([inst.name, index, "size", size])
        if changes:
            with self.env.store.update() as fresh:
                for name, index, _, size in changes:
                    inst = fresh.find_instance(name)
                    _resize(inst.disks[index], size)
                    inst.touch()
        return changes


def _resize(disk: model.Disk, size: int) -> None:
    """The disk's size, and its DRBD data child's (the metadata LV keeps its own)."""
    disk.size = size
    if disk.dev_type == "drbd" and disk.children:
        disk.children[0].size = size


class ClusterDestroy(LogicalUnit[opcodes.OpClusterDestroy]):
    """Ganeti's LUClusterDestroy: refused while a node other than the master or any instance
    is left; answers the master node's name (`herder cluster destroy` then removes the
    cluster's files on it)."""

    REQ_BGL = True

    def check(self, config: model.ConfigData) -> None:
        others = sorted(n.name for n in config.nodes.values()
                        if n.uuid != config.cluster.master_node)
        if others:
            raise OpPrereqError(f"there are still {len(others)} node(s) in this cluster: "
                                f"{', '.join(others)}", "wrong_state")
        if config.instances:
            raise OpPrereqError(f"there are still {len(config.instances)} instance(s) in this "
                                "cluster", "wrong_state")
        self.master = config.node_name(config.cluster.master_node)

    def execute(self) -> JobResult:
        return self.master
