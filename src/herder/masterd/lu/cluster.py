"""Cluster-level LUs: OP_CLUSTER_SET_PARAMS, OP_CLUSTER_REDIST_CONF, OP_CLUSTER_VERIFY_GROUP."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec

from herder.core import diskobjects, model, params, uidpool, verify
from herder.core.diskobjects import BlockDevStatus, Disk
from herder.core.errors import ConfigError, HerderError, OpPrereqError
from herder.core.noderpc import call_many
from herder.core.rpcdefs import disk_calls, node_calls
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu import disks
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup
from herder.masterd.lu.common import apply_ipolicy, redistribute, resets


def apply_collectors(c: model.Cluster, changes: dict[str, dict[str, Any]]) -> None:
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
                  "balance_disk_moves", "balance_dynamic_load")


class ClusterSetParams(LogicalUnit[opcodes.OpClusterSetParams]):
    REQ_BGL = True

    def execute(self) -> JobResult:
        op = self.op
        with self.env.store.update() as config:
            self.apply(op, config)
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
        if op.uid_pool is not None:
            c.uid_pool = uidpool.normalise(op.uid_pool)
        if op.add_uids:
            c.uid_pool = uidpool.add(c.uid_pool, op.add_uids)
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
        return [{"severity": f.severity, "code": f.code, "object": f.object,
                 "message": f.message} for f in findings]
