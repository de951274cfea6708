"""Storage and repair LUs (design-2.1 "Automated disk repairs infrastructure"): list storage
units (PVs, VGs, file dirs), stop allocation on a PV, fix a node's volume group (only when it is
safe), and run a white-listed repair command on a node (maintd's live-repair)."""

from __future__ import annotations

import msgspec

from herder.core import diskobjects, model, storage_units
from herder.core.diskobjects import BlockDevStatus
from herder.core.errors import HerderError, OpPrereqError
from herder.core.rpcdefs import disk_calls, node_calls, storage_calls
from herder.masterd import locking
from herder.masterd.jobs import opcodes
from herder.masterd.lu.base import JobResult, LockRequest, LogicalUnit, lookup
from herder.masterd.vg_repair import CopyReport, CopyReports, vg_repair_allowed

FIELDS = ("name", "size", "used", "free", "allocatable")


class NodeQueryStorage(LogicalUnit[opcodes.OpNodeQueryStorage]):
    def check(self, config: model.ConfigData) -> None:
        op = self.op
        self.config = config
        nodes = [lookup(config.find_node, n) for n in op.nodes] if op.nodes else \
            sorted((n for n in config.nodes.values() if n.vm_capable and not n.offline),
                   key=lambda n: n.name)
        self.nodes = nodes
        self.fields = list(op.output_fields or ("node", *FIELDS))
        if op.name is not None:
            problem = storage_units.query_problem(config, op.storage_type, op.name)
            if problem:
                raise OpPrereqError(f"cannot query storage unit: {problem}")

    def execute(self) -> JobResult:
        op = self.op
        c = self.config.cluster
        request = storage_calls.StorageList(
            type=op.storage_type, name=op.name,
            dirs=[c.file_storage_dir, c.shared_file_storage_dir]
            if op.storage_type == "file" else [])
        rows: list[list[JobResult]] = []
        for node in self.nodes:
            try:
                units = self.env.rpc.call(node, request)
            except HerderError as err:
                self.feedback(f"node {node.name}: {err}")
                continue
            for unit in units:
                row: dict[str, JobResult] = {**unit, "node": node.name}
                rows.append([row.get(f) for f in self.fields])
        return rows


class NodeModifyStorage(LogicalUnit[opcodes.OpNodeModifyStorage]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        node = lookup(config.find_node, self.op.node_name)
        return [LockRequest(locking.LEVEL_NODE, [node.uuid])]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        self.node = lookup(config.find_node, op.node_name)
        unknown = set(op.changes) - {"allocatable"}
        if unknown:
            raise OpPrereqError(f"storage units of type {op.storage_type} can only change "
                                f"'allocatable' (not {', '.join(sorted(unknown))})")

    def execute(self) -> JobResult:
        op = self.op
        self.env.rpc.call(self.node, storage_calls.StorageModify(
            type=op.storage_type, name=op.name, allocatable=bool(op.changes["allocatable"])))
        return None


class RepairNodeStorage(LogicalUnit[opcodes.OpRepairNodeStorage]):
    """Fix a node's VG (remove missing PVs) — only when every node sharing instances with it is
    healthy and every instance on it has a good copy elsewhere ("Fix node volume group")."""

    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        return [LockRequest(locking.LEVEL_INSTANCE, None, shared=True),
                LockRequest(locking.LEVEL_NODE, None, shared=True)]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        self.node = lookup(config.find_node, op.node_name)
        health: dict[str, bool] = {}
        for node in config.nodes.values():
            if node.offline:
                health[node.uuid] = False
                continue
            try:
                self.env.rpc.call(node, node_calls.Ping(), timeout=10)
                health[node.uuid] = True
            except HerderError:
                health[node.uuid] = False
        copies = self._copies(config, health)
        allowed, reason = vg_repair_allowed(config, self.node.uuid, health, op.name, copies)
        if not allowed and not op.ignore_consistency:
            raise OpPrereqError(f"repairing {op.name} on {self.node.name} is not safe: {reason}",
                                "wrong_state")

    def _copies(self, config: model.ConfigData, health: dict[str, bool]) -> CopyReports:
        """Each mirror node's report of its copy of the disks of the instances on this node
        (blockdev_getmirrorstatus_multi): "every other copy is good" means in sync."""
        wanted: dict[str, list[model.Instance]] = {}
        for inst in config.instances_on(self.node.uuid):
            for peer in inst.all_nodes:
                if peer != self.node.uuid and health.get(peer):
                    wanted.setdefault(peer, []).append(inst)
        copies: dict[tuple[str, str], CopyReport] = {}
        reports: dict[tuple[str, str], list[tuple[bool, BlockDevStatus | str]]] = {}
        for peer, instances in wanted.items():
            node = config.nodes[peer]
            objects = [(inst.uuid, diskobjects.disk_object(config, inst, disk, peer))
                       for inst in instances for disk in inst.disks]
            try:
                found = self.env.rpc.call(node, disk_calls.BlockdevGetmirrorstatusMulti(
                    disks=[obj for _, obj in objects]))
            except HerderError as err:
                for inst in instances:
                    copies[(inst.uuid, peer)] = str(err)
                continue
            for (owner, _), entry in zip(objects, found, strict=False):
                reports.setdefault((owner, peer), []).append(entry)
        return {**copies, **reports}

    def execute(self) -> JobResult:
        op = self.op
        repaired = self.env.rpc.call(self.node, storage_calls.StorageRepair(
            type=op.storage_type, name=op.name))
        return msgspec.to_builtins(repaired)


class RepairCommand(LogicalUnit[opcodes.OpRepairCommand]):
    def declare_locks(self, config: model.ConfigData) -> list[LockRequest]:
        node = lookup(config.find_node, self.op.node_name)
        return [LockRequest(locking.LEVEL_NODE, [node.uuid], shared=True)]

    def check(self, config: model.ConfigData) -> None:
        op = self.op
        self.node = lookup(config.find_node, op.node_name)
        if not op.command or "/" in op.command:
            raise OpPrereqError("the repair command is a file name in the node's white-list "
                                "directory, without path separators")

    def execute(self) -> JobResult:
        op = self.op
        result = self.env.rpc.call(self.node, node_calls.RepairCommand(command=op.command,
                                                                        input=op.input))
        self.feedback(f"repair command {op.command} on {self.node.name} succeeded")
        return result.stdout


class OsDiagnose(LogicalUnit[opcodes.OpOsDiagnose]):
    def check(self, config: model.ConfigData) -> None:
        self.nodes = sorted((n for n in config.nodes.values() if n.vm_capable and not n.offline),
                            key=lambda n: n.name)

    def execute(self) -> JobResult:
        """{"os+variant": [nodes offering it]}: an OS is usable where every node has it."""
        offered: dict[str, list[str]] = {}
        for node in self.nodes:
            try:
                names = self.env.rpc.call(node, node_calls.OsList())
            except HerderError as err:
                self.feedback(f"node {node.name}: {err}")
                continue
            for name in names:
                offered.setdefault(name, []).append(node.name)
        return {name: sorted(nodes) for name, nodes in sorted(offered.items())}

